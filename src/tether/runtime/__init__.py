"""Durable execution: workflows, the runner, failure classes, reports and decisions."""

from __future__ import annotations

from tether.runtime.events import Event
from tether.runtime.failures import (
    Classifier,
    DataError,
    FailureKind,
    LogicError,
    PermissionDenied,
    Rule,
    TransientError,
    classify,
)
from tether.runtime.lease import list_runs_live, live_status
from tether.runtime.report import (
    CallbackDecisions,
    Decision,
    DecisionHandler,
    FailureReport,
    PolicyDecisions,
)
from tether.runtime.runner import Runner, RunResult, StepReturnError, StepTimeout, runtime_reducers
from tether.runtime.workflow import Compensation, Phase, RetryPolicy, Step, StepContext, Workflow

__all__ = [
    "CallbackDecisions",
    "Classifier",
    "Compensation",
    "DataError",
    "Decision",
    "DecisionHandler",
    "Event",
    "FailureKind",
    "FailureReport",
    "LogicError",
    "PermissionDenied",
    "Phase",
    "PolicyDecisions",
    "RetryPolicy",
    "Rule",
    "RunResult",
    "Runner",
    "Step",
    "StepContext",
    "StepReturnError",
    "StepTimeout",
    "TransientError",
    "Workflow",
    "classify",
    "list_runs_live",
    "live_status",
    "runtime_reducers",
]
