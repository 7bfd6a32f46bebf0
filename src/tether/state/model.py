"""The records a run leaves behind: checkpoints, snapshots, run summaries."""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ChainStats",
    "Checkpoint",
    "CheckpointInfo",
    "ExecutionContextSnapshot",
    "NO_CHAIN",
    "RunInfo",
    "RunStatus",
    "TERMINAL_STATUSES",
    "chain_stats",
    "make_checkpoint",
]


class RunStatus(enum.StrEnum):
    """Life cycle of a run, from PENDING to COMPLETED, FAILED or CANCELLED."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    INTERRUPTED = "INTERRUPTED"
    """Stopped from outside (cancelled task, Ctrl-C, a store that stayed down) or its
    process died: nothing executes it, ``resume`` continues it."""
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL_STATUSES = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
"""Statuses after which the run's execution state expires (24 h by default)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    """The full state of a run after one node, as a ``Checkpoint``.

    Stores may keep it as a delta against an earlier checkpoint; this object is always
    the materialised whole.
    """

    run_id: str
    """The run (the seeds' conversationId)."""
    node_id: str | None
    """The node that had just finished when this was taken."""
    state: dict[str, Any]
    """The state data after that node (``stateSnapshot``)."""
    executed_node_ids: list[str] = field(default_factory=list)
    """Nodes done so far, in order; resume skips them."""
    timestamp: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    """When it was saved (UTC)."""
    version: int = 0
    """1, 2, 3… per run, assigned by the store; 0 before it is saved."""
    status: RunStatus = RunStatus.RUNNING
    """The run's status when this was saved."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Free-form JSON-like data (step timings, fork origin…)."""


_new = object.__new__
(
    _set_run_id,
    _set_node_id,
    _set_state,
    _set_executed,
    _set_timestamp,
    _set_version,
    _set_status,
    _set_metadata,
) = (getattr(Checkpoint, f).__set__ for f in Checkpoint.__slots__)


class _Lazy:
    """A ``Checkpoint`` field a store's load may leave in a cheaper form (a ``raw`` type
    value in the slot), made the field's own value when first read: a small load is all
    fixed costs, and a resume rarely reads these (figures in ``benchmarks/README.md``):

    - ``timestamp``: the stored POSIX time (float), made the UTC datetime;
    - ``executed_node_ids``: a cached tuple, made the caller's own list;
    - ``metadata``: None for none, made the caller's own empty dict.
    """

    __slots__ = ("_slot", "_raw", "_make")

    def __init__(self, name: str, raw: type, make: Callable[[Any], Any]) -> None:
        self._slot = Checkpoint.__dict__[name]  # the member descriptor this one stands in for
        self._raw = raw
        self._make = make

    def __get__(self, obj: Checkpoint | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = self._slot.__get__(obj, owner)
        if type(value) is self._raw:
            value = self._make(value)
            self._slot.__set__(obj, value)
        return value

    def __set__(self, obj: Checkpoint, value: Any) -> None:
        self._slot.__set__(obj, value)

    def __delete__(self, obj: Checkpoint) -> None:
        self._slot.__delete__(obj)


Checkpoint.timestamp = _Lazy("timestamp", float, lambda ts: dt.datetime.fromtimestamp(ts, dt.UTC))  # type: ignore[assignment,misc]
Checkpoint.executed_node_ids = _Lazy("executed_node_ids", tuple, list)  # type: ignore[assignment,misc]
Checkpoint.metadata = _Lazy("metadata", type(None), lambda _: {})  # type: ignore[assignment,misc]


def make_checkpoint(
    run_id: str,
    node_id: str | None,
    state: dict[str, Any],
    executed_node_ids: list[str] | tuple[str, ...],
    timestamp: dt.datetime | float,
    version: int,
    status: RunStatus,
    metadata: dict[str, Any] | None,
) -> Checkpoint:
    """``Checkpoint(...)`` for a store's load, without the frozen dataclass's ``__init__``
    (which sets each field through ``object.__setattr__``): a small load is all fixed
    costs. The arguments are the fields, in order; a test holds the two equal.
    ``timestamp`` may be the stored POSIX time, made a datetime when read; the ids may be a
    tuple and the metadata None, made a list and a dict when read."""
    cp: Checkpoint = _new(Checkpoint)
    _set_run_id(cp, run_id)
    _set_node_id(cp, node_id)
    _set_state(cp, state)
    _set_executed(cp, executed_node_ids)
    _set_timestamp(cp, timestamp)
    _set_version(cp, version)
    _set_status(cp, status)
    _set_metadata(cp, metadata)
    return cp


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointInfo:
    """One line of a run's history: what ``history()`` lists, without the state."""

    run_id: str
    version: int
    node_id: str | None
    status: RunStatus
    timestamp: dt.datetime
    kind: str
    """``full`` (a whole state), ``delta`` (ops against the version before), ``segment``
    (the ops of this version and of the ``sealed`` ones right after it, packed into one
    row so that a load reads fewer rows) or ``sealed`` (its ops are in that segment)."""
    size: int
    """Bytes stored for this version."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainStats:
    """Bytes stored since the last full checkpoint, which decide when to write one.

    ``rewrite_bytes`` counts ops that replace data (``set``, ``merge``, ``upsert``):
    those leave dead bytes behind in the chain. ``growth_bytes`` counts appends, which
    never do. A full checkpoint is due when dead bytes could make a load read far more
    than the state's size, or when the chain gets long.
    """

    base_version: int = 0
    base_bytes: int = 0
    growth_bytes: int = 0
    rewrite_bytes: int = 0
    length: int = 0
    """Deltas after the base."""


_set_base_version, _set_base_bytes, _set_growth_bytes, _set_rewrite_bytes, _set_length = (
    getattr(ChainStats, f).__set__ for f in ChainStats.__slots__
)


def chain_stats(
    base_version: int, base_bytes: int, growth_bytes: int, rewrite_bytes: int, length: int
) -> ChainStats:
    """``ChainStats(...)`` built as :func:`make_checkpoint` builds a checkpoint, since every save
    makes one: the frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``. The arguments are the fields, in order; a test holds the two equal."""
    chain: ChainStats = _new(ChainStats)
    _set_base_version(chain, base_version)
    _set_base_bytes(chain, base_bytes)
    _set_growth_bytes(chain, growth_bytes)
    _set_rewrite_bytes(chain, rewrite_bytes)
    _set_length(chain, length)
    return chain


NO_CHAIN = ChainStats()
"""A run with nothing stored, shared (the record is immutable)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunInfo:
    """A run as ``list_runs()`` shows it."""

    run_id: str
    status: RunStatus
    version: int
    """Latest version."""
    node_id: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
    expires_at: dt.datetime | None
    chain: ChainStats = field(default_factory=ChainStats)
    fence: int = 0
    """The token of the run's latest lease (0: never leased): only its holder may write."""
    lease_until: float | None = None
    """The latest lease's deadline as its holder last renewed it (POSIX time; None: released)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionContextSnapshot:
    """What a human or the dashboard sees of a run."""

    run_id: str
    current_node_id: str | None
    current_node_name: str | None
    status: RunStatus
    state: dict[str, Any]
    execution_history: list[Any]
    timestamp: dt.datetime
    version: int
