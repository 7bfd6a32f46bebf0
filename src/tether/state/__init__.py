"""Run state: the context, its reducers, the records stores keep, and their bytes.

Pure: nothing here does I/O, so it is tested with plain function calls.
"""

from __future__ import annotations

from tether.state.context import Delta, ExecutionContext
from tether.state.model import (
    TERMINAL_STATUSES,
    ChainStats,
    Checkpoint,
    CheckpointInfo,
    ExecutionContextSnapshot,
    RunInfo,
    RunStatus,
)
from tether.state.reducers import (
    APPEND,
    COUNTER,
    MERGE,
    OVERWRITE,
    Reducer,
    ReducerRegistry,
    default_registry,
    replayable,
    upsert_by,
)
from tether.state.serde import SCHEMA_VERSION, Codec, generate_key
from tether.state.values import check_value

__all__ = [
    "APPEND",
    "COUNTER",
    "MERGE",
    "OVERWRITE",
    "SCHEMA_VERSION",
    "TERMINAL_STATUSES",
    "ChainStats",
    "Checkpoint",
    "CheckpointInfo",
    "Codec",
    "Delta",
    "ExecutionContext",
    "ExecutionContextSnapshot",
    "Reducer",
    "ReducerRegistry",
    "RunInfo",
    "RunStatus",
    "check_value",
    "default_registry",
    "generate_key",
    "replayable",
    "upsert_by",
]
