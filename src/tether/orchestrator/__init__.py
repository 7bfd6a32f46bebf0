"""Several agents on one task: MAIN decides, TEST / DEV / REVIEW / FINISH_REVIEW report on
a blackboard in the working directory, a TEST→DEV fast-fix sub-loop, FINISH_CHECK.

The orchestrator is a durable tether workflow (one step per stage, routed by MAIN), so
pause, resume after a crash, rollback and failure reports work for it as for any run.
See docs/orchestrator.md.
"""

from __future__ import annotations

from tether.orchestrator.blackboard import ROLES, Blackboard
from tether.orchestrator.engine import Orchestrator, OrchestratorConfig
from tether.orchestrator.prompts import PromptConfig
from tether.orchestrator.roles import (
    AgentRunner,
    CommandRunner,
    MainDecision,
    MainPolicy,
    MainRequest,
    ModelMain,
    RoleOutput,
    RoleRequest,
    RoleRunner,
    ScriptedMain,
    ScriptedRunner,
)
from tether.orchestrator.subloop import SubLoopResult, SubLoopState, classify_blocker
from tether.orchestrator.summaries import SummaryStore

__all__ = [
    "ROLES",
    "AgentRunner",
    "Blackboard",
    "CommandRunner",
    "MainDecision",
    "MainPolicy",
    "MainRequest",
    "ModelMain",
    "Orchestrator",
    "OrchestratorConfig",
    "PromptConfig",
    "RoleOutput",
    "RoleRequest",
    "RoleRunner",
    "ScriptedMain",
    "ScriptedRunner",
    "SubLoopResult",
    "SubLoopState",
    "SummaryStore",
    "classify_blocker",
]
