"""tether: context management and durable execution for long-running LLM agents.

The top level re-exports the everyday names. The runtime, the context engine, the agent
loop and the scripted model load on first use (``tether.Runner``), and backends, drivers
and the tokenizer only when used, so ``import tether`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tether.errors import (
    CheckpointCorrupt,
    ConfigError,
    DecryptionError,
    InvalidStateValue,
    RunInProgress,
    RunNotFound,
    RunNotPaused,
    StoreError,
    StoreUnavailable,
    TetherError,
    VersionConflict,
)
from tether.state import (
    Checkpoint,
    ExecutionContext,
    ExecutionContextSnapshot,
    ReducerRegistry,
    RunStatus,
    upsert_by,
)
from tether.stores import CheckpointStore, CompactionPolicy, ExpiryPolicy, open_store

if TYPE_CHECKING:
    from tether.agent.loop import AgentLoop
    from tether.context.window import ContextWindow
    from tether.models.scripted import ScriptedModel
    from tether.runtime.runner import Runner
    from tether.runtime.workflow import Step, Workflow

__version__ = "0.1.0"

_LAZY = {
    "AgentLoop": "tether.agent.loop",
    "ContextWindow": "tether.context.window",
    "Runner": "tether.runtime.runner",
    "ScriptedModel": "tether.models.scripted",
    "Step": "tether.runtime.workflow",
    "Workflow": "tether.runtime.workflow",
}
"""Names imported on first access: their modules pull in pydantic, the tokenizer's tables
and the runtime, which a script that only opens a store does not need."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "AgentLoop",
    "CheckpointCorrupt",
    "Checkpoint",
    "CheckpointStore",
    "CompactionPolicy",
    "ConfigError",
    "ContextWindow",
    "DecryptionError",
    "ExecutionContext",
    "ExecutionContextSnapshot",
    "ExpiryPolicy",
    "InvalidStateValue",
    "ReducerRegistry",
    "RunInProgress",
    "RunNotFound",
    "RunNotPaused",
    "RunStatus",
    "Runner",
    "ScriptedModel",
    "Step",
    "StoreError",
    "StoreUnavailable",
    "TetherError",
    "VersionConflict",
    "Workflow",
    "__version__",
    "open_store",
    "upsert_by",
]
