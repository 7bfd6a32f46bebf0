"""Agents: the action model, the durable agent loop, the plan orchestrator, and what
they stand on (interaction handlers, experience, repository analysis)."""

from __future__ import annotations

from tether.agent.actions import AgentAction, parse_action
from tether.agent.deploy import (
    AsyncDeploymentAgent,
    DeploymentAgent,
    DeploymentRequest,
    DeployResult,
    LocalDeploymentRequest,
)
from tether.agent.experience import Experience, ExperienceRetriever, ExperienceStore, lessons_from_run
from tether.agent.interaction import (
    CallbackInteractionHandler,
    CLIInteractionHandler,
    DeferredInteractionHandler,
    InteractionRequest,
    InteractionResponse,
    InvalidAnswer,
    NonInteractiveHandler,
    PendingQuestion,
    UserInteractionHandler,
)
from tether.agent.loop import AgentLoop, LoopConfig
from tether.agent.plan import PlanOrchestrator, PlanStep, StepContext, StepResult, step_prompt
from tether.agent.repo import RepoContext, analyze_repo

__all__ = [
    "AgentAction",
    "AgentLoop",
    "AsyncDeploymentAgent",
    "CLIInteractionHandler",
    "CallbackInteractionHandler",
    "DeferredInteractionHandler",
    "DeployResult",
    "DeploymentAgent",
    "DeploymentRequest",
    "Experience",
    "ExperienceRetriever",
    "ExperienceStore",
    "InteractionRequest",
    "InteractionResponse",
    "InvalidAnswer",
    "LocalDeploymentRequest",
    "LoopConfig",
    "NonInteractiveHandler",
    "PendingQuestion",
    "PlanOrchestrator",
    "PlanStep",
    "RepoContext",
    "StepContext",
    "StepResult",
    "UserInteractionHandler",
    "analyze_repo",
    "lessons_from_run",
    "parse_action",
    "step_prompt",
]
