"""The checkpoint store interface, written once.

A backend implements a handful of primitives over opaque rows (:class:`Write`,
:class:`StoredRow`); everything users call (``commit``, ``save``, ``load``,
``update_state``, ``copy``, ``prune``…) is written here on top of them, so every
backend behaves the same and one conformance suite covers them all.

Storage model: each run is an append-only log of versions 1, 2, 3…; a version is
either a *full* state or a *delta* of replayable ops against the version before.
Loading version v reads the last full row at or before v plus the deltas after it.
A full row is written when the chain would make a load read much more than the
state (overwritten data piling up) or grow long (see :class:`CompactionPolicy`).
In a store that seals (``_seals``), runs of deltas are packed into *segment* rows
(see ``_segment``): the tail's first row holds them all, the others keep their
history entry with an empty payload (*sealed*), so a load reads one row per segment.
"""

from __future__ import annotations

import abc
import datetime as dt
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import ormsgpack

from tether.errors import (
    CheckpointCorrupt,
    ConfigError,
    RunExpired,
    RunNotFound,
    RunNotPaused,
    StoreUnavailable,
)
from tether.state.context import Delta, ExecutionContext
from tether.state.model import (
    TERMINAL_STATUSES,
    ChainStats,
    Checkpoint,
    CheckpointInfo,
    ExecutionContextSnapshot,
    RunInfo,
    RunStatus,
    _chain_stats,
    _checkpoint,
)
from tether.state.reducers import ReducerRegistry
from tether.state.reserved import check_user_keys, release_lease, without_lease
from tether.state.serde import SCHEMA_VERSION, Codec, decode_plain, state_offset
from tether.state.values import check_run_id, check_value
from tether.stores._retry import RetryPolicy, retry_call
from tether.stores._segment import apply_ops, apply_segment, pack_segment, segment_length, split_segment

__all__ = [
    "CheckpointStore",
    "CompactionPolicy",
    "ExpiryPolicy",
    "RetryPolicy",
    "StoredRow",
    "Write",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpiryPolicy:
    """How long stored runs live.

    A run's checkpoints expire ``checkpoint_ttl`` after its last save; once the run
    reaches COMPLETED, FAILED or CANCELLED its whole execution state expires
    ``completed_ttl`` after that. ``None`` keeps it forever. Redis applies these as key
    TTLs; SQL stores keep an ``expires_at`` column, hide expired runs at once and
    delete them in :meth:`CheckpointStore.purge_expired`.
    """

    checkpoint_ttl: dt.timedelta | None = dt.timedelta(days=7)
    completed_ttl: dt.timedelta | None = dt.timedelta(hours=24)

    def expires_at(self, status: RunStatus, now: float) -> float | None:
        ttl = self.completed_ttl if status in TERMINAL_STATUSES else self.checkpoint_ttl
        return None if ttl is None else now + ttl.total_seconds()


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionPolicy:
    """When a save writes the whole state instead of a delta.

    A load reads the base plus every delta after it. Appends never waste bytes, but
    overwrites (``set``, ``merge``, ``upsert``) leave dead data in the chain: a full row
    is written once that dead data could exceed ``max_waste_ratio`` of the live state
    (and ``min_waste_bytes``). Long chains cost per row at load time: past ``max_chain``
    deltas a full row is written when the chain has at least doubled the base (so the
    bases of an append-only run grow geometrically and storage stays linear, ≤ ~3x the
    state in the long run) or when the rows are so small that their count, not their
    bytes, would dominate a load (``row_cost_bytes`` per row).
    """

    max_chain: int = 1000
    max_waste_ratio: float = 0.5
    min_waste_bytes: int = 256 * 1024
    row_cost_bytes: int = 4096
    """What reading one more row costs at load time, in bytes of payload decoded."""
    seal_versions: int = 8
    """A store that seals packs the last deltas into one segment row once there are this
    many (or ``seal_tail_bytes`` of them). 0 turns sealing off."""
    seal_tail_bytes: int = 64 * 1024
    seal_fanout: int = 4
    """… and then merges the ``seal_fanout`` last segments of one level into one of the next
    level, while that stays under ``seal_bytes``: a chain of N small deltas loads from
    about ``seal_versions + (seal_fanout - 1) * log(N / seal_versions, seal_fanout)`` rows
    (15 at the end of a 1,000-step run), each version rewritten once per level on its way
    up."""
    seal_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        if self.seal_versions == 1 or self.seal_versions < 0:
            raise ConfigError("seal_versions must be 0 (off) or >= 2")
        if self.seal_fanout < 2:
            raise ConfigError("seal_fanout must be >= 2")

    def due(self, chain: ChainStats, *, growth: int, rewrite: int, sealed: bool = False) -> bool:
        """``sealed``: the store packs deltas into segments (see ``seal_versions``), so a
        load reads far fewer rows than the chain has versions."""
        waste = chain.rewrite_bytes + rewrite
        live = chain.base_bytes + chain.growth_bytes + growth
        if waste > max(self.min_waste_bytes, self.max_waste_ratio * live):
            return True
        rows = chain.length + 1
        if rows < self.max_chain:
            return False
        if sealed and self.seal_versions:
            per, levels = self.seal_versions, 1
            while per * self.seal_fanout < rows:
                per, levels = per * self.seal_fanout, levels + 1
            rows = self.seal_versions + (self.seal_fanout - 1) * levels
        grown = chain.growth_bytes + growth + waste
        return grown >= chain.base_bytes or rows * self.row_cost_bytes >= live


@dataclass(slots=True, kw_only=True)
class Write:
    """One atomic save: a new version of a run, and the run record after it.

    Not frozen, though nothing changes one: a frozen dataclass sets each of the 13 fields
    through ``object.__setattr__``, 2.7 vs 1.0 us a save."""

    run_id: str
    kind: str
    """``full``, ``delta`` or ``segment`` (see ``seal_from``)."""
    payload: bytes
    node_id: str | None
    status: RunStatus
    created_at: float
    expires_at: float | None
    expected_version: int | None
    """None: append after whatever is there; 0: the run must not exist; n: latest must be n."""
    require_status: RunStatus | None = None
    growth_bytes: int = 0
    rewrite_bytes: int = 0
    state_at: int = 0
    """Where the state's own bytes start in a plain full payload, for a store that keeps
    them apart (see ``CheckpointStore._splits_state``); 0 otherwise."""
    head: dict[str, Any] | None = None
    """With ``state_at``: the payload's head as it was encoded (ids, metadata…), so that
    such a store need not decode it again."""
    dated: bool = True
    """False: the payload holds no datetime, so none of its values is a MessagePack
    extension and a decode needs no ``ext_hook`` (see ``serde.pack_plain``)."""
    write_id: str = ""
    """Unique per commit, stored with the run: a retry of a write that landed but whose
    reply was lost finds its own id as the latest and returns that version instead of a
    VersionConflict (or a second copy). "" for none."""
    seal_from: int = 0
    """For a ``segment`` write, the first version it packs: the payload replaces that
    row's, the rows after it up to the new version (included) are stored sealed (kind
    ``sealed``, empty payload). The store checks that row holds a delta or a segment and
    none up to the new one is full, and raises :class:`StaleSeal` (changing nothing)
    otherwise."""

    def chain_after(self, prev: ChainStats, version: int) -> ChainStats:
        """The run's chain statistics once this write is version ``version``."""
        if self.kind == "full":
            return _chain_stats(version, len(self.payload), 0, 0, 0)
        return _chain_stats(
            prev.base_version,
            prev.base_bytes,
            prev.growth_bytes + self.growth_bytes,
            prev.rewrite_bytes + self.rewrite_bytes,
            prev.length + 1,
        )


class StaleSeal(Exception):
    """A segment write found other rows than those it packs (another process pruned the
    run meanwhile): the save is retried as a plain delta. Internal."""


Carrier = tuple[bytes, int, int]
"""A row after the chain's full one that holds a payload: the payload, how many versions
it holds, and its level (0 for a delta, see ``_segment``). What a context keeps of them
(``ExecutionContext._tail``) is what its store may pack into its next segment."""


class StoredRow(NamedTuple):
    """One stored version as a backend returns it.

    A NamedTuple rather than a frozen dataclass: a load builds one per row of a chain,
    and a tuple is several times cheaper to construct.
    """

    run_id: str
    version: int
    kind: str
    node_id: str | None
    status: RunStatus
    created_at: float
    payload: bytes


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, dt.UTC)


_STATUS_OF: dict[Any, RunStatus] = {s.value: s for s in RunStatus}

_HINTS_MAX = 4096


def _hint(hints: dict[str, Any], run_id: str, value: Any) -> None:
    """Record (or with None forget) what a store last saw of a run's chain, so its next
    read can skip a step. Bounded: a hint, not a cache of every run ever seen."""
    if value is None:
        hints.pop(run_id, None)
        return
    if len(hints) >= _HINTS_MAX and run_id not in hints:
        hints.clear()
    hints[run_id] = value


class CheckpointStore(abc.ABC):
    """Durable, versioned checkpoints of runs. Async; one instance per event loop.

    Args:
        codec: how payloads become bytes (encryption, compression); default plain.
        expiry: TTLs for checkpoints and finished runs.
        compaction: when a save writes a full state instead of a delta.
        retry: how transient failures (connection lost, deadlock) are retried inside the
            store before :class:`StoreUnavailable` reaches the caller.
    """

    #: URL scheme(s) this backend answers to, for ``open_store``.
    scheme: str = ""
    #: Whether full writes should say where their state starts (``Write.state_at``): for a
    #: store that decodes the state without the payload's head on its loads.
    _splits_state: bool = False
    #: Whether the store takes ``segment`` writes (see ``Write.seal_from``). The memory
    #: store does not: its loads of the latest state read a kept copy, not the rows.
    _seals: bool = False

    def __init__(
        self,
        *,
        codec: Codec | None = None,
        expiry: ExpiryPolicy | None = None,
        compaction: CompactionPolicy | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.codec = codec or Codec()
        self.expiry = expiry or ExpiryPolicy()
        self.compaction = compaction or CompactionPolicy()
        self.retry = retry or RetryPolicy()
        self._write_ids = itertools.count(1)
        self._writer = os.urandom(6).hex()

    def _write_id(self) -> str:
        """A new write id: this store's random tag and a counter (unique across processes)."""
        return f"{self._writer}.{next(self._write_ids)}"

    async def _retry(self, call: Callable[[], Awaitable[T]], failed: StoreUnavailable) -> T:
        """Run ``call`` again after it failed with ``failed`` (see :class:`RetryPolicy`)."""
        return await retry_call(self.retry, type(self).__name__, call, failed)

    async def _write_retried(self, w: Write) -> tuple[int, ChainStats]:
        """``_write`` with the retry policy (the write id makes a retry safe)."""
        try:
            return await self._write(w)
        except StoreUnavailable as exc:
            return await self._retry(lambda: self._write(w), exc)

    async def _is_expired(self, run_id: str) -> bool:
        """Whether ``run_id`` is stored but past its expiry (a load then says so, rather
        than "not found"), asked after a load found nothing; a backend may raise
        CheckpointCorrupt here for a stored run whose rows are gone. A backend that drops
        expired runs outright returns False."""
        return False

    # == primitives every backend implements =====================================
    @abc.abstractmethod
    async def setup(self) -> None:
        """Create tables/keys and apply migrations; idempotent."""

    @abc.abstractmethod
    async def _write(self, w: Write) -> tuple[int, ChainStats]:
        """Atomically append ``w`` as the next version and update the run record.

        Raises VersionConflict when ``expected_version`` does not match, RunNotPaused
        when ``require_status`` does not, RunNotFound for a delta on a missing run.
        Returns the new version and the run's chain statistics after it.
        """

    @abc.abstractmethod
    async def _read(self, run_id: str, version: int | None) -> tuple[RunInfo | None, list[StoredRow]]:
        """The run record and the rows needed to build ``version`` (latest if None).

        Rows are ascending: the last full row at or before the version, then every
        delta after it up to the version. ``(None, [])`` when the run is absent or
        expired; ``(info, [])`` when the version is not stored.
        """

    async def _read_chain(self, run_id: str, version: int | None) -> list[tuple[int, bytes]]:
        """``(version, payload)`` of the rows that build ``version`` (latest if None).

        All :meth:`load` needs, since every payload carries its node, status, time and
        metadata: backends override it with their leanest read (no run record, no
        per-row columns). ``[]`` when the run is absent or expired, or the version is not
        stored. This default derives it from :meth:`_read`.
        """
        _info, rows = await self._read(run_id, version)
        return [(r.version, r.payload) for r in rows]

    @abc.abstractmethod
    async def _history(self, run_id: str, *, before: int | None, limit: int | None) -> list[CheckpointInfo]:
        """Versions newest first, only those < ``before`` when given."""

    @abc.abstractmethod
    async def get_run(self, run_id: str) -> RunInfo | None:
        """The run record, or None when absent or expired."""

    @abc.abstractmethod
    async def _set_status(self, run_id: str, status: RunStatus, expires_at: float | None) -> None:
        """Change the run's status; RunNotFound when absent."""

    @abc.abstractmethod
    async def list_runs(
        self, *, status: RunStatus | None = None, limit: int = 100, offset: int = 0
    ) -> list[RunInfo]:
        """Runs, most recently updated first."""

    @abc.abstractmethod
    async def delete(self, run_id: str) -> bool:
        """Delete a run and all its checkpoints; False when there was nothing."""

    @abc.abstractmethod
    async def _rebase(self, run_id: str, version: int, payload: bytes, after: bytes = b"") -> int:
        """Atomically make ``version`` a full row and drop every version before it.

        ``after``: when ``version`` was inside a segment, a new segment of the versions
        after it that the old one held, for row ``version + 1`` (which is sealed).
        Returns how many rows were removed.
        """

    @abc.abstractmethod
    async def purge_expired(self) -> int:
        """Physically delete expired runs; returns how many went."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release connections; the store is unusable afterwards."""

    async def __aenter__(self) -> CheckpointStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # == writing ===================================================================
    async def commit(
        self,
        ctx: ExecutionContext,
        *,
        node_id: str | None = None,
        status: RunStatus = RunStatus.RUNNING,
        metadata: Mapping[str, Any] | None = None,
        _require_status: RunStatus | None = None,
    ) -> int:
        """Checkpoint a context: store what changed since its last checkpoint.

        The write is a delta built from the reducers' ops, unless the run is new,
        the state was restored, or compaction is due. Uses the context's version as
        the expected one, so a second writer on the run gets :class:`VersionConflict`
        (and this context keeps its unsaved changes). Durable when it returns.
        """
        meta = dict(metadata or {})
        meta_dated = bool(meta) and check_value(meta, key="metadata")
        now = time.time()
        node = node_id if node_id is not None else ctx.node_id
        with ctx._lock:
            taken = ctx._take()
            tail = ctx._tail
            try:
                kind, payload, state_at, head, growth, rewrite, dated = self._encode_commit(
                    ctx, taken, node, status, now, meta, meta_dated
                )
                seal_from, level, plain = 0, 0, b""
                if kind == "delta" and tail is not None and self._seals:
                    seal_from, level, payload, plain = self._seal(ctx.run_id, ctx.version, tail, payload)
                    kind = "segment" if level else kind
            except BaseException:
                ctx._give_back(taken)
                raise
        write = Write(
            run_id=ctx.run_id,
            kind=kind,
            payload=payload,
            state_at=state_at,
            head=head,
            dated=dated,
            node_id=node,
            status=status,
            created_at=now,
            expires_at=self.expiry.expires_at(status, now),
            expected_version=ctx.version,
            require_status=_require_status,
            growth_bytes=growth,
            rewrite_bytes=rewrite,
            seal_from=seal_from,
            write_id=self._write_id(),
        )
        try:
            try:
                version, chain = await self._write_retried(write)
            except StaleSeal:
                write.kind, write.payload, write.seal_from = "delta", plain, 0
                version, chain = await self._write_retried(write)
                tail = None  # the rows are not what this context saw: no seal until a full row
        except BaseException:
            ctx._give_back(taken)
            raise
        ctx._mark_saved(version, chain, self._tail_after(write, version, tail, level))
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "checkpoint %s v%d %s %dB",
                ctx.run_id,
                version,
                kind,
                len(payload),
                extra={"run_id": ctx.run_id},
            )
        return version

    def _encode_commit(
        self,
        ctx: ExecutionContext,
        taken: Delta,
        node: str | None,
        status: RunStatus,
        now: float,
        meta: dict[str, Any],
        meta_dated: bool = True,
    ) -> tuple[str, bytes, int, dict[str, Any] | None, int, int, bool]:
        """The write a commit makes: kind, payload, where a full one's state starts and its
        head (see :meth:`_encode_full`), a delta's growth and rewrite bytes, and whether a
        full one may hold a datetime (``Write.dated``)."""
        head = {"v": SCHEMA_VERSION, "node": node, "status": str(status), "ts": now, "meta": meta}
        if not taken.full and ctx.version > 0:
            ops = [[k, op, arg] for k, op, arg in taken.ops]
            payload = self.codec.encode({**head, "kind": "delta", "ops": ops, "executed": taken.executed})
            rewrite = sum(
                len(ormsgpack.packb(arg, default=_no_default, option=_OPTS))
                for _k, op, arg in taken.ops
                if op not in ("append", "add")
            )
            rewrite = min(rewrite, len(payload))
            growth = len(payload) - rewrite
            if not self.compaction.due(ctx.chain, growth=growth, rewrite=rewrite, sealed=self._seals):
                return "delta", payload, 0, None, growth, rewrite, True
        full = {**head, "kind": "full", "executed": ctx.executed_node_ids}
        dated = meta_dated or ctx._holds_datetimes()
        payload, state_at = self._encode_full(full, ctx._state_ref(), datetimes=dated)
        return "full", payload, state_at, full if state_at else None, 0, 0, dated

    def _seal(
        self, run_id: str, version: int, tail: list[Carrier], payload: bytes
    ) -> tuple[int, int, bytes, bytes]:
        """``(seal_from, level, payload, plain)`` for a delta about to become ``version + 1``:
        a segment when the deltas at the end of the chain are enough (``seal_versions`` or
        ``seal_tail_bytes``), merged with the ``seal_fanout - 1`` segments of its level
        before it while that stays under ``seal_bytes``; else ``(0, 0, payload, b"")``."""
        policy = self.compaction
        rows = [*tail, (payload, 1, 0)]
        start = len(rows)
        while start and rows[start - 1][2] == 0:
            start -= 1
        total = sum(len(r[0]) for r in rows[start:])
        deltas = len(rows) - start
        if (
            not policy.seal_versions
            or deltas < 2
            or (deltas < policy.seal_versions and total < policy.seal_tail_bytes)
        ):
            return 0, 0, payload, b""
        level, more = 1, policy.seal_fanout - 1
        while start >= more and all(r[2] == level for r in rows[start - more : start]):
            merged = total + sum(len(r[0]) for r in rows[start - more : start])
            if merged > policy.seal_bytes:
                break
            start, total, level = start - more, merged, level + 1
        first = version + 2 - sum(r[1] for r in rows[start:])
        bodies: list[dict[str, Any]] = []
        at = first
        for data, count, lv in rows[start:]:
            body = self.codec.decode(data, run_id=run_id, version=at)
            bodies.extend(split_segment(body) if lv else [body])
            at += count
        return first, level, self.codec.encode(pack_segment(first, bodies, level)), payload

    def _tail_after(
        self, write: Write, version: int, tail: list[Carrier] | None, level: int
    ) -> list[Carrier] | None:
        """What a context keeps of its chain's rows once ``write`` is stored as ``version``:
        the last ones, up to ``seal_bytes`` of them (all a next segment may merge)."""
        if write.kind == "full":
            return []
        if tail is None:
            return None
        rows = list(tail)
        if write.kind == "segment":
            held = version - write.seal_from  # versions of the tail the segment took in
            while held > 0:
                held -= rows.pop()[1]
            rows.append((write.payload, version - write.seal_from + 1, level))
        else:
            rows.append((write.payload, 1, 0))
        return _last_bytes(rows, self.compaction.seal_bytes)

    def _encode_full(
        self, head: dict[str, Any], state: dict[str, Any], *, datetimes: bool = True
    ) -> tuple[bytes, int]:
        """A full payload (the state its last pair) and, for a store that asks, where the
        state starts in it. ``datetimes=False``: neither holds one (see ``serde.pack_plain``)."""
        payload = self.codec.encode({**head, "state": state}, datetimes=datetimes)
        at = state_offset(payload, head, datetimes=datetimes) if self._splits_state else 0
        return payload, at

    async def save(self, checkpoint: Checkpoint, *, expected_version: int | None = None) -> int:
        """Store a whole :class:`Checkpoint` as the run's next version.

        ``expected_version``: None appends after whatever is stored; 0 requires a new
        run; n requires the latest to be n (else :class:`VersionConflict`).
        Returns the version assigned.
        """
        check_run_id(checkpoint.run_id)
        dated = [check_value(value, key=key) for key, value in checkpoint.state.items()]
        dated.append(check_value(checkpoint.metadata, key="metadata"))
        check_value(list(checkpoint.executed_node_ids), key="executed_node_ids")
        now = checkpoint.timestamp.timestamp()
        head = _full_head(checkpoint)
        datetimes = any(dated)
        payload, state_at = self._encode_full(head, checkpoint.state, datetimes=datetimes)
        version, _ = await self._write_retried(
            Write(
                run_id=checkpoint.run_id,
                kind="full",
                payload=payload,
                node_id=checkpoint.node_id,
                status=RunStatus(checkpoint.status),
                created_at=now,
                expires_at=self.expiry.expires_at(RunStatus(checkpoint.status), time.time()),
                expected_version=expected_version,
                state_at=state_at,
                head=head if state_at else None,
                dated=datetimes,
                write_id=self._write_id(),
            )
        )
        return version

    # == reading ===================================================================
    async def load(self, run_id: str, version: int | None = None) -> Checkpoint | None:
        """The checkpoint at ``version`` (latest when None), or None if not stored."""
        check_run_id(run_id)
        try:
            chain = await self._read_chain(run_id, version)
        except StoreUnavailable as exc:
            chain = await self._retry(lambda: self._read_chain(run_id, version), exc)
        if chain:
            return self._checkpoint_of(run_id, chain)
        if await self._is_expired(run_id):
            raise RunExpired(run_id)
        return None

    def _checkpoint_of(self, run_id: str, chain: Sequence[tuple[int, bytes]]) -> Checkpoint:
        """The checkpoint a non-empty ``(version, payload)`` chain ends at."""
        number = chain[-1][0]
        if len(chain) == 1 and not self.codec.encrypted:  # keyed: plaintext is refused, not read
            cp = _lone_full(run_id, number, chain[0][1])
            if cp is not None:
                return cp
        state, executed, last, _tail = self._replay(run_id, chain)  # decrypts; says what is wrong
        status = _STATUS_OF.get(last.get("status"))  # every payload carries its own head
        ts = last.get("ts")
        if status is None or (type(ts) is not float and type(ts) is not int):
            raise CheckpointCorrupt("payload head is damaged", run_id=run_id, version=number)
        meta = last.get("meta") or {}
        return _checkpoint(run_id, last.get("node"), state, executed, float(ts), number, status, meta)

    async def load_context(
        self, run_id: str, version: int | None = None, *, reducers: ReducerRegistry | None = None
    ) -> ExecutionContext | None:
        """An :class:`ExecutionContext` restored from a checkpoint, ready to continue.

        The context's version is the checkpoint's, so committing from an older version
        raises VersionConflict (use :meth:`rollback` to continue from an old version).
        """
        check_run_id(run_id)
        info, rows = await self._read_retried(run_id, version)
        if not rows or info is None:
            if info is None and await self._is_expired(run_id):
                raise RunExpired(run_id)
            if info is not None and version is None:
                raise CheckpointCorrupt(
                    "the rows of the latest version are missing while the run is stored",
                    run_id=run_id,
                    version=info.version,
                )
            return None
        state, executed, _last, tail = self._replay(run_id, [(r.version, r.payload) for r in rows])
        ctx = ExecutionContext(run_id, reducers=reducers)
        latest = rows[-1].version == info.version
        ctx._load(
            state=state,
            executed=executed,
            version=rows[-1].version,
            node_id=rows[-1].node_id,
            chain=info.chain if latest else ChainStats(length=self.compaction.max_chain),
            tail=None if tail is None else _last_bytes(tail, self.compaction.seal_bytes),
        )
        return ctx

    async def _read_retried(self, run_id: str, version: int | None) -> tuple[RunInfo | None, list[StoredRow]]:
        try:
            return await self._read(run_id, version)
        except StoreUnavailable as exc:
            return await self._retry(lambda: self._read(run_id, version), exc)

    def _replay(
        self, run_id: str, chain: Sequence[tuple[int, bytes]]
    ) -> tuple[dict[str, Any], list[str], dict[str, Any], list[Carrier] | None]:
        """State, executed node ids, the head of the chain's last version, and the rows a
        context continuing from it keeps (see :class:`Carrier`; None when it ends inside a
        segment), from ``(version, payload)`` rows: a full state, then deltas and segments
        applied in place (every object here is freshly decoded, so it is ours to change).

        The chain ends at the version wanted. Sealed rows (empty payloads) are skipped:
        the segment before them holds their ops, and a last row that is sealed makes the
        segment apply only up to it. Every version must be covered exactly once."""
        first_version, first_payload = chain[0]
        head = self.codec.decode(first_payload, run_id=run_id, version=first_version)
        state = head.get("state")
        if type(state) is not dict or head.get("kind") != "full":
            raise CheckpointCorrupt(
                "chain does not start with a full state", run_id=run_id, version=first_version
            )
        executed = head.get("executed")
        if type(executed) is not list:
            executed = list(executed or ())
        if len(chain) == 1:
            return state, executed, head, []
        target = chain[-1][0]
        rows = [row for row in chain[1:] if row[1]]
        versions = [v for v, _ in rows]
        bodies = self.codec.decode_many([p for _, p in rows], run_id=run_id, versions=versions)
        last = head
        expect = first_version + 1
        carriers: list[Carrier] | None = []
        for at, (number, body) in enumerate(zip(versions, bodies, strict=True)):
            if number != expect:
                why = "overlaps the segment before it" if number < expect else f"follows {expect - 1}"
                raise CheckpointCorrupt(
                    f"version {min(number, expect)} is missing from the chain (row {number} {why})",
                    run_id=run_id,
                    version=min(number, expect),
                )
            try:
                if body.get("kind") == "segment":
                    held = segment_length(body, run_id=run_id, version=number)
                    count = min(held, target - number + 1)
                    last = apply_segment(state, executed, body, count)
                    expect = number + count
                    if carriers is not None:
                        level = body.get("lv")
                        carriers.append((rows[at][1], held, level if type(level) is int and level > 0 else 1))
                        if count < held:
                            carriers = None
                else:
                    _apply(state, executed, body)
                    last, expect = body, expect + 1
                    if carriers is not None:
                        carriers.append((rows[at][1], 1, 0))
            except CheckpointCorrupt:
                raise
            except Exception as exc:
                raise CheckpointCorrupt(f"cannot apply delta ({exc})", run_id=run_id, version=number) from exc
        if expect != target + 1:
            raise CheckpointCorrupt(
                f"version {expect} is missing from the chain", run_id=run_id, version=expect
            )
        return state, executed, last, carriers

    async def history(
        self, run_id: str, *, before: int | None = None, limit: int | None = None
    ) -> list[CheckpointInfo]:
        """Stored versions with node and time, newest first; page with ``before``."""
        check_run_id(run_id)
        if limit is not None and limit < 0:
            raise ConfigError("limit must be >= 0")
        try:
            return await self._history(run_id, before=before, limit=limit)
        except StoreUnavailable as exc:
            return await self._retry(lambda: self._history(run_id, before=before, limit=limit), exc)

    async def snapshot(self, run_id: str) -> ExecutionContextSnapshot | None:
        """What a human reviewing the run sees, or None."""
        check_run_id(run_id)
        info, rows = await self._read_retried(run_id, None)
        if info is None or not rows:
            if info is None and await self._is_expired(run_id):
                raise RunExpired(run_id)
            if info is not None:
                raise CheckpointCorrupt(
                    "the rows of the latest version are missing while the run is stored",
                    run_id=run_id,
                    version=info.version,
                )
            return None
        state, _executed, head, _tail = self._replay(run_id, [(r.version, r.payload) for r in rows])
        last = rows[-1]
        meta = head.get("meta") or {}
        history = state.get("execution_history")
        return ExecutionContextSnapshot(
            run_id=run_id,
            current_node_id=last.node_id,
            current_node_name=meta.get("node_name") or last.node_id,
            status=info.status,
            state=state,
            execution_history=history if type(history) is list else [],
            timestamp=_utc(last.created_at),
            version=last.version,
        )

    async def get_status(self, run_id: str) -> RunStatus | None:
        info = await self.get_run(run_id)
        return None if info is None else info.status

    # == changing runs =============================================================
    async def set_status(self, run_id: str, status: RunStatus | str) -> None:
        """Record the run's status (PAUSED for review, COMPLETED at the end…)."""
        check_run_id(run_id)
        st = RunStatus(status)
        expires = self.expiry.expires_at(st, time.time())
        try:
            await self._set_status(run_id, st, expires)
        except StoreUnavailable as exc:
            await self._retry(lambda: self._set_status(run_id, st, expires), exc)

    async def update_state(
        self,
        run_id: str,
        update: Mapping[str, Any],
        *,
        reducers: ReducerRegistry | None = None,
        node_id: str | None = None,
    ) -> int:
        """Merge ``update`` into a PAUSED run's state through the reducers and persist it.

        Raises RunNotPaused (and changes nothing) for any other status, RunNotFound
        for an unknown run. The status check is repeated inside the atomic write, so
        a run resumed meanwhile is not modified. A runner's lease is never carried over.
        """
        check_run_id(run_id)
        check_user_keys(update, where="a state update")
        info = await self.get_run(run_id)
        if info is None:
            raise RunNotFound(run_id)
        if info.status is not RunStatus.PAUSED:
            raise RunNotPaused(run_id, str(info.status))
        ctx = await self.load_context(run_id, reducers=reducers)
        if ctx is None:
            raise RunNotFound(run_id)
        ctx.merge(update)
        release_lease(ctx)
        return await self.commit(
            ctx,
            node_id=node_id,
            status=RunStatus.PAUSED,
            metadata={"update": True},
            _require_status=RunStatus.PAUSED,
        )

    async def rollback(self, run_id: str, version: int) -> int:
        """Make the state at ``version`` the latest again, as a new version.

        History stays append-only: later versions remain readable. A runner's lease is
        not restored with the state: no process executes the restored version.
        """
        cp = await self.load(run_id, version)
        if cp is None:
            raise RunNotFound(run_id, version)
        info = await self.get_run(run_id)
        status = info.status if info else cp.status
        return await self.save(
            Checkpoint(
                run_id=run_id,
                node_id=cp.node_id,
                state=without_lease(cp.state),
                executed_node_ids=cp.executed_node_ids,
                status=status,
                metadata={"rolled_back_to": version},
            ),
            expected_version=info.version if info else None,
        )

    async def copy(self, run_id: str, new_run_id: str, *, version: int | None = None) -> int:
        """Fork a run at ``version`` (latest when None) into a new run id.

        The fork starts at version 1 with the source's state, executed nodes and
        status, and records where it came from in its metadata. Raises
        VersionConflict if ``new_run_id`` exists. The source's lease is not copied.
        """
        check_run_id(new_run_id)
        cp = await self.load(run_id, version)
        if cp is None:
            raise RunNotFound(run_id, version)
        return await self.save(
            Checkpoint(
                run_id=new_run_id,
                node_id=cp.node_id,
                state=without_lease(cp.state),
                executed_node_ids=cp.executed_node_ids,
                status=cp.status,
                metadata={"forked_from": {"run_id": run_id, "version": cp.version}},
            ),
            expected_version=0,
        )

    async def prune(self, run_id: str, *, keep: int) -> int:
        """Keep only the latest ``keep`` versions; returns how many were removed.

        Safe with deltas: the oldest kept version is rewritten as a full state first,
        in the same transaction that drops the older rows.
        """
        if keep < 1:
            raise ConfigError("prune needs keep >= 1 (use delete() to remove a run)")
        info = await self.get_run(run_id)
        if info is None:
            raise RunNotFound(run_id)
        cut = info.version - keep + 1
        if cut <= 1:
            return 0
        chain = await self._read_chain(run_id, cut)
        if not chain:
            return 0
        cp = self._checkpoint_of(run_id, chain)
        full, after = self.codec.encode(_full_payload(cp)), self._recut(run_id, chain)
        try:
            return await self._rebase(run_id, cut, full, after)
        except StoreUnavailable as exc:
            return await self._retry(lambda: self._rebase(run_id, cut, full, after), exc)

    def _recut(self, run_id: str, chain: Sequence[tuple[int, bytes]]) -> bytes:
        """When the chain's last version is inside a segment that holds later versions too,
        a segment of those later ones (for the row after it, see :meth:`_rebase`); else b""."""
        cut = chain[-1][0]
        first, payload = next((v, p) for v, p in reversed(chain) if p)
        if first == chain[0][0]:
            return b""  # the full row
        body = self.codec.decode(payload, run_id=run_id, version=first)
        if (
            body.get("kind") != "segment"
            or first + segment_length(body, run_id=run_id, version=first) - 1 <= cut
        ):
            return b""
        return self.codec.encode(pack_segment(cut + 1, split_segment(body)[cut + 1 - first :]))


def _last_bytes(rows: list[Carrier], limit: int) -> list[Carrier]:
    """The deltas at the end of ``rows`` (the next segment's) and the segments before them
    while all add up to at most ``limit`` bytes (those it may merge)."""
    keep = len(rows)
    while keep and rows[keep - 1][2] == 0:
        keep -= 1
    total = sum(len(r[0]) for r in rows[keep:])
    while keep and total + len(rows[keep - 1][0]) <= limit:
        keep -= 1
        total += len(rows[keep][0])
    return rows[keep:]


def _lone_full(run_id: str, number: int, payload: bytes) -> Checkpoint | None:
    """A plain full row as its checkpoint in one step (the common load: one row, no key), or
    None when it is anything else, for the general path to read or to report."""
    last = decode_plain(payload)
    if last is None:
        return None
    state, executed, ts = last.get("state"), last.get("executed"), last.get("ts")
    status = _STATUS_OF.get(last.get("status"))
    if type(state) is not dict or type(executed) is not list or last.get("kind") != "full" or status is None:
        return None
    if type(ts) is not float:
        if type(ts) is not int:
            return None
        ts = float(ts)
    meta = last.get("meta") or None  # the datetime, and {} for no metadata, made when read (model._Lazy)
    return _checkpoint(run_id, last.get("node"), state, executed, ts, number, status, meta)


def _full_head(cp: Checkpoint) -> dict[str, Any]:
    """A full row's payload for a checkpoint, all but its last pair, the state."""
    return {
        "v": SCHEMA_VERSION,
        "kind": "full",
        "node": cp.node_id,
        "status": str(cp.status),
        "ts": cp.timestamp.timestamp(),
        "meta": cp.metadata,
        "executed": list(cp.executed_node_ids),
    }


def _full_payload(cp: Checkpoint) -> dict[str, Any]:
    """A checkpoint as a full row's payload, the form :meth:`CheckpointStore.load` reads back."""
    return {**_full_head(cp), "state": cp.state}


_OPTS = ormsgpack.OPT_PASSTHROUGH_DATETIME | ormsgpack.OPT_PASSTHROUGH_SUBCLASS


def _no_default(obj: Any) -> Any:
    return str(obj)  # sizing only: a datetime's exact bytes do not matter here


def _apply(state: dict[str, Any], executed: list[str], body: dict[str, Any]) -> None:
    """Apply one delta in place."""
    if body.get("kind") != "delta":
        raise CheckpointCorrupt("expected a delta row")
    apply_ops(state, body["ops"])
    executed.extend(body.get("executed") or ())
