"""The backend protocol: what a database must do for a :class:`CheckpointStore` to use it.

A backend stores opaque rows and run records, atomically; it knows nothing of states,
reducers or compaction. :class:`~tether.stores.base.CheckpointStore` wraps one (as an
HTTP client wraps a transport) and does everything else: planning writes with the chain
engine (``_chain``), replaying rows, the write checks (through
:func:`~tether.stores._chain.check_write`, which a backend calls inside its atomic
section), retries, expiry times.

To add a backend: implement this protocol, give it a ``from_url`` classmethod, and name it
in ``registry.BACKENDS``; the conformance suite (``tests/stores/test_conformance.py``) then
runs against it once its URL is set.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from tether.state.model import ChainStats, Checkpoint, CheckpointInfo, RunInfo, RunStatus

if TYPE_CHECKING:
    from tether.stores._chain import Write

__all__ = [
    "Backend",
    "BackendSettings",
    "Capabilities",
    "InlineLatest",
    "LatestCache",
    "Load",
    "StoredRow",
    "remember",
    "utc",
]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend takes beyond plain full and delta rows."""

    seals: bool = False
    """It takes ``segment`` writes (``Write.seal_from``): its loads read rows, so packing
    the deltas at the end of a chain into one row makes them cheaper."""
    splits_state: bool = False
    """Full writes should say where their state starts (``Write.state_at``, ``Write.head``):
    it decodes the state without the payload's head."""
    drops_expired: bool = False
    """Expired runs vanish outright (key TTLs): a load of one finds nothing to report."""


class StoredRow(NamedTuple):
    """One stored version as a backend returns it (a tuple: a load builds one per row)."""

    run_id: str
    version: int
    kind: str
    node_id: str | None
    status: RunStatus
    created_at: float
    payload: bytes


@runtime_checkable
class Backend(Protocol):
    """Rows and run records in one database. Every method is atomic on its own."""

    capabilities: Capabilities

    async def setup(self) -> None:
        """Create tables/keys and apply migrations; idempotent."""

    async def append(self, w: Write) -> tuple[int, ChainStats]:
        """Store ``w`` as the run's next version and update the run record, atomically,
        after :func:`~tether.stores._chain.check_write` passed on the record it follows
        (if that says the write already landed, return the stored version and change
        nothing). Returns the new version and the run's chain statistics after it.

        Fencing, in the same atomic write: ``w.fence`` (a lease holder's token) must be the
        run's current token; ``w.take`` stores :func:`~tether.stores._chain.next_fence` of it
        and sets ``w.fence`` to that; ``w.lease_until`` sets (0: clears) the lease deadline."""
        ...

    async def read(self, run_id: str, version: int | None) -> tuple[RunInfo | None, list[StoredRow]]:
        """The run record and the rows that build ``version`` (latest if None), ascending
        from the last full row at or before it. ``(None, [])`` when the run is absent or
        expired; ``(info, [])`` when the version is not stored."""
        ...

    async def read_chain(self, run_id: str, version: int | None) -> list[tuple[int, bytes]]:
        """``(version, payload)`` of the rows that build ``version``: all a load needs, as
        lean a read as the database allows. ``[]`` when there is nothing to read."""
        ...

    async def history(self, run_id: str, *, before: int | None, limit: int | None) -> list[CheckpointInfo]:
        """Versions newest first, only those < ``before`` when given."""
        ...

    async def get_run(self, run_id: str) -> RunInfo | None:
        """The run record, or None when absent or expired."""
        ...

    async def list_runs(
        self,
        *,
        status: RunStatus | None,
        limit: int,
        offset: int,
        updated_after: float | None = None,
        updated_before: float | None = None,
    ) -> list[RunInfo]:
        """Runs, most recently updated first; ``updated_after`` / ``updated_before``
        (seconds since the epoch, both exclusive) keep those updated in that window, found
        by the store's own index rather than by reading every run."""
        ...

    async def set_status(self, run_id: str, status: RunStatus, expires_at: float | None) -> None:
        """Change the run's status; RunNotFound when absent."""

    async def renew_lease(self, run_id: str, fence: int, until: float) -> None:
        """Move the run's lease deadline to ``until`` (a heartbeat of its holder), atomically
        only while ``fence`` is the run's current lease token; :class:`LeaseLost` otherwise
        (also when the run is gone). No new version."""

    async def is_expired(self, run_id: str) -> bool:
        """Whether ``run_id`` is stored but past its expiry, asked after a read found
        nothing; may raise CheckpointCorrupt for a stored run whose rows are gone."""
        ...

    async def delete(self, run_id: str) -> bool:
        """Delete a run and all its rows; False when there was nothing."""
        ...

    async def rebase(self, run_id: str, version: int, payload: bytes, after: bytes = b"") -> int:
        """Make ``version`` a full row (``payload``) and drop every version before it;
        ``after``: a segment of the versions after it that the old segment held, for row
        ``version + 1`` (sealed). Returns how many rows were removed."""
        ...

    async def purge_expired(self) -> int:
        """Physically delete expired runs; returns how many went."""
        ...

    async def read_rows(self, run_id: str) -> tuple[RunInfo | None, list[StoredRow]]:
        """The run record and every stored row of the run, ascending, as one consistent
        read (sealed rows included, with their empty payload). ``(None, [])`` when the run
        is absent or expired."""
        ...

    async def rewrite_rows(self, run_id: str, payloads: Mapping[int, bytes], expected_version: int) -> bool:
        """Replace the payloads of stored rows (version -> new payload) in place, keeping
        every row's version, kind, node, status and time, and the run record, atomically,
        if the run's latest version is still ``expected_version``; False, changing nothing,
        if it is not. Every payload must mean what the row held (a re-encryption), so a
        reader sees the run the same before and after. RunNotFound when the run or a row
        is absent."""
        ...

    async def aclose(self) -> None:
        """Release connections; the backend is unusable afterwards."""


class Load(Protocol):
    """What ``CheckpointStore.load`` is: the checkpoint at a version (latest when None)."""

    def __call__(self, run_id: str, version: int | None = None) -> Coroutine[Any, Any, Checkpoint | None]: ...


@runtime_checkable
class LatestCache(Protocol):
    """A backend that keeps runs' latest checkpoints ready (opt-in: see ``memory_cached``):
    its :meth:`front` becomes the store's ``load``, and the store tells it what a load
    replayed."""

    def front(self, load: Load) -> Load:
        """``load`` (the store's own) with the cache asked first, as one function: a load
        the cache answers is one call (a hot path: see benchmarks/README.md)."""
        ...

    def loaded_latest(self, run_id: str, cp: Checkpoint, plain: bool) -> None:
        """A load replayed the latest chain into ``cp`` (``plain``: no key guards it)."""


@runtime_checkable
class InlineLatest(Protocol):
    """A backend that can read some runs' latest chains without awaiting (an embedded
    database's small chains, where a thread hop would cost more than the read):
    :meth:`CheckpointStore.load` asks it first."""

    def latest_chain_inline(self, run_id: str) -> list[tuple[int, bytes]] | None:
        """``(version, payload)`` of the latest chain, read at once (``[]``: nothing
        stored), or None when :meth:`Backend.read_chain` must be awaited for it."""
        ...


class BackendSettings:
    """For a store whose backend has settings worth reading on the store (``store.path``,
    ``store.checkpoint_bytes``, ``store.prefix``…): unknown public attributes are the
    backend's. Not on :class:`CheckpointStore` itself: a class with ``__getattr__`` reads
    every attribute the slow way, its own ones on the commit path too."""

    def __getattr__(self, name: str) -> Any:
        backend = self.__dict__.get("_backend")
        if name.startswith("_") or backend is None:  # (not yet set, while unpickling)
            raise AttributeError(name)
        return getattr(backend, name)


HINTS_MAX = 4096


def remember(hints: dict[str, Any], run_id: str, value: Any) -> None:
    """Record (or with None forget) what a backend last saw of a run, so its next read can
    skip a step. Bounded: a hint, not a cache of every run ever seen."""
    if value is None:
        hints.pop(run_id, None)
        return
    if len(hints) >= HINTS_MAX and run_id not in hints:
        hints.clear()
    hints[run_id] = value


def utc(ts: float) -> dt.datetime:
    """A stored POSIX time as an aware datetime."""
    return dt.datetime.fromtimestamp(ts, dt.UTC)
