"""tether: context management and durable execution for long-running LLM agents.

The top level re-exports the everyday names; backends, drivers and the tokenizer load
only when used, so ``import tether`` stays light.
"""

from __future__ import annotations

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

__version__ = "0.1.0"

__all__ = [
    "CheckpointCorrupt",
    "Checkpoint",
    "CheckpointStore",
    "CompactionPolicy",
    "ConfigError",
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
    "StoreError",
    "StoreUnavailable",
    "TetherError",
    "VersionConflict",
    "__version__",
    "open_store",
    "upsert_by",
]
