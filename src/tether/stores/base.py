"""The checkpoint store: one class, written once, on a backend.

A :class:`Backend` stores opaque rows and run records (``backend.py``); the chain engine
(``_chain.py``) decides what a commit writes and how rows replay. :class:`CheckpointStore`
joins them: everything users call (``commit``, ``save``, ``load``, ``update_state``,
``copy``, ``prune``…) is written here, so every backend behaves the same and one
conformance suite covers them all.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from types import MethodType
from typing import Any, ClassVar, Self, TypeVar

from tether.errors import CheckpointCorrupt, ConfigError, RunExpired, StoreUnavailable
from tether.state.context import Changes, ExecutionContext
from tether.state.model import ChainStats, Checkpoint, CheckpointInfo, RunInfo, RunStatus
from tether.state.reducers import ReducerRegistry
from tether.state.serde import Codec, is_plain
from tether.state.values import check_node_id, check_run_id, check_value
from tether.stores._chain import ChainEngine, Known, Plan, StaleSeal, Write, known_kept
from tether.stores._retry import RetryPolicy, retry_call
from tether.stores.backend import Backend, Capabilities, InlineLatest, LatestCache, StoredRow, remember
from tether.stores.fencing import Fence, LeaseOperations, arm, landed
from tether.stores.policies import CompactionPolicy, ExpiryPolicy
from tether.stores.runs import RunOperations

__all__ = [
    "STORE_OPTIONS",
    "Backend",
    "Capabilities",
    "CheckpointStore",
    "CompactionPolicy",
    "ExpiryPolicy",
    "RetryPolicy",
    "StaleSeal",
    "StoredRow",
    "Write",
    "split_store_options",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")


STORE_OPTIONS = ("codec", "expiry", "compaction", "retry")


def split_store_options(options: dict[str, Any]) -> dict[str, Any]:
    """Take a store's own options out of ``options``; the rest are its backend's."""
    return {k: options.pop(k) for k in STORE_OPTIONS if k in options}


class CheckpointStore(RunOperations, LeaseOperations):
    """Durable, versioned checkpoints of runs, on a :class:`Backend`. Async; one instance
    per event loop.

    Args:
        backend: the database (``open_store(url)`` builds it from a URL).
        codec: how payloads become bytes (encryption, compression); default plain.
        expiry: TTLs for checkpoints and finished runs.
        compaction: when a save writes a full state instead of a delta.
        retry: how transient failures (connection lost, deadlock) are retried inside the
            store before :class:`StoreUnavailable` reaches the caller.
    """

    #: URL scheme(s) this store answers to, for ``open_store``.
    scheme: str = ""
    #: The backend this class builds from a URL (``from_url``).
    backend_class: ClassVar[Any] = None

    def __init__(
        self,
        backend: Backend,
        *,
        codec: Codec | None = None,
        expiry: ExpiryPolicy | None = None,
        compaction: CompactionPolicy | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._backend = backend
        self._latest_cache = backend if isinstance(backend, LatestCache) else None
        if self._latest_cache is not None:  # the cache answers in front of the load below
            self.load = self._latest_cache.front(MethodType(CheckpointStore.load, self))  # type: ignore[method-assign]
        self._latest_inline = backend.latest_chain_inline if isinstance(backend, InlineLatest) else None
        self._use(codec or Codec(), compaction or CompactionPolicy())
        self.expiry = expiry or ExpiryPolicy()
        self.retry = retry or RetryPolicy()
        self._write_ids = map(f"{os.urandom(6).hex()}.{{}}".format, itertools.count(1))
        """New write ids: this store's random tag and a counter (unique across processes)."""
        self._chains_seen: dict[str, Known] = {}
        """Per run, what this store last wrote or read of its chain (bounded: ``remember``)."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """A store of this class on the backend ``url`` names; the store's own options
        (``codec``, ``expiry``, ``compaction``, ``retry``) go to it, the rest to the backend."""
        if cls.backend_class is None:
            raise ConfigError(f"{cls.__name__} cannot be opened from a URL")
        mine = split_store_options(options)
        return cls.wrap(cls.backend_class.from_url(url, **options), **mine)

    @classmethod
    def wrap(cls, backend: Backend, **options: Any) -> Self:
        """A store of this class on an existing backend (the subclasses' ``__init__`` build
        theirs from their own arguments)."""
        store = object.__new__(cls)
        CheckpointStore.__init__(store, backend, **options)
        return store

    public_url: str | None = None
    """The URL the store was opened from, without credentials (``open_store`` sets it): what
    names its database for things kept beside it, such as an agent's artefacts."""

    @property
    def backend(self) -> Backend:
        return self._backend

    @property
    def capabilities(self) -> Capabilities:
        return self._backend.capabilities

    @property
    def engine(self) -> ChainEngine:
        """The chain engine for this store's codec, compaction policy and backend."""
        return self._engine

    @property
    def codec(self) -> Codec:
        """How payloads become bytes (encryption, compression)."""
        return self._engine.codec

    @codec.setter
    def codec(self, codec: Codec) -> None:
        self._use(codec, self.compaction)

    @property
    def compaction(self) -> CompactionPolicy:
        """When a save writes a full state instead of a delta."""
        return self._engine.policy

    @compaction.setter
    def compaction(self, policy: CompactionPolicy) -> None:
        self._use(self.codec, policy)

    def _use(self, codec: Codec, policy: CompactionPolicy) -> None:
        caps = self.capabilities
        self._engine = ChainEngine(codec, policy, seals=caps.seals, splits_state=caps.splits_state)

    async def _retry(self, call: Callable[[], Awaitable[T]], failed: StoreUnavailable) -> T:
        """Run ``call`` again after it failed with ``failed`` (see :class:`RetryPolicy`)."""
        return await retry_call(self.retry, type(self).__name__, call, failed)

    async def _write_retried(self, w: Write) -> tuple[int, ChainStats]:  # (a write id makes it safe)
        return await self._retried(lambda: self._backend.append(w))

    # == the backend's operations, as the store and its run operations call them =======
    async def setup(self) -> None:
        """Create tables/keys and apply migrations; idempotent."""
        await self.backend.setup()

    async def aclose(self) -> None:
        """Release connections; the store is unusable afterwards."""
        await self.backend.aclose()

    async def _write(self, w: Write) -> tuple[int, ChainStats]:
        return await self._backend.append(w)

    async def _read(self, run_id: str, version: int | None) -> tuple[RunInfo | None, list[StoredRow]]:
        return await self.backend.read(run_id, version)

    async def _read_chain(self, run_id: str, version: int | None) -> list[tuple[int, bytes]]:
        return await self._backend.read_chain(run_id, version)

    async def _history(self, run_id: str, *, before: int | None, limit: int | None) -> list[CheckpointInfo]:
        return await self.backend.history(run_id, before=before, limit=limit)

    async def _set_status(self, run_id: str, status: RunStatus, expires_at: float | None) -> None:
        await self.backend.set_status(run_id, status, expires_at)

    async def _is_expired(self, run_id: str) -> bool:
        return await self._backend.is_expired(run_id)

    async def _rebase(self, run_id: str, version: int, payload: bytes, after: bytes = b"") -> int:
        return await self.backend.rebase(run_id, version, payload, after)

    async def _retried(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except StoreUnavailable as exc:
            return await self._retry(call, exc)

    async def get_run(self, run_id: str) -> RunInfo | None:
        """The run record, or None when absent or expired."""
        check_run_id(run_id)
        return await self._retried(lambda: self.backend.get_run(run_id))

    async def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        limit: int = 100,
        offset: int = 0,
        updated_after: dt.datetime | None = None,
        updated_before: dt.datetime | None = None,
    ) -> list[RunInfo]:
        """Runs, most recently updated first; ``updated_after`` / ``updated_before`` (both
        exclusive) keep those last updated in that window (a naive datetime is UTC)."""
        status = None if status is None else RunStatus(status)
        after, before = _epoch(updated_after), _epoch(updated_before)
        call = functools.partial(self.backend.list_runs, status=status, limit=limit, offset=offset)
        return await self._retried(lambda: call(updated_after=after, updated_before=before))

    async def delete(self, run_id: str) -> bool:
        """Delete a run and all its checkpoints; False when there was nothing."""
        check_run_id(run_id)
        self._know(run_id, None)
        return await self._retried(lambda: self.backend.delete(run_id))

    async def purge_expired(self) -> int:
        """Physically delete expired runs; returns how many went."""
        return await self._retried(self.backend.purge_expired)

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
        fence: Fence | None = None,
        patches: bool = True,
    ) -> int:
        """Checkpoint a context: store what changed since its last checkpoint.

        The write is a delta built from the reducers' ops, unless the run is new,
        the state was restored, or compaction is due. Uses the context's version as
        the expected one, so a second writer on the run gets :class:`VersionConflict`
        (and this context keeps its unsaved changes). Durable when it returns.

        After a failed save whose outcome is unknown (a lost reply), the changes it held go
        first, with its write id: if it landed, the backend answers with its version and
        stores nothing; else they land now. What was recorded since follows at the next
        version, in the same call.

        ``fence``: a lease holder's write (see :class:`Fence`): a take, or fenced by its token.
        ``patches=False``: overwrites are stored whole, not diffed against the values last
        written (see ``_patch``), for a writer whose values share nothing with the last ones.
        """
        meta = dict(metadata) if metadata else {}
        meta_dated = bool(meta) and check_value(meta, key="metadata")
        now = time.time()
        node = node_id if node_id is not None else ctx.node_id
        check_node_id(node)
        engine = self._engine
        changes = ctx.take_changes()
        write_id = changes.write_id or next(self._write_ids)
        final = status
        if changes.followed:  # a catch-up write: the status changes with the last one only
            status = _require_status or status
        try:
            expires_at = self.expiry.expires_at(status, now)
            known = known_kept(self._chains_seen, changes) or await self._known_for(changes)
            plan = engine.plan(
                changes,
                known,
                node=node,
                status=status,
                meta=meta,
                meta_dated=meta_dated,
                now=now,
                expires_at=expires_at,
                require_status=_require_status,
                write_id=write_id,
                patches=patches,
            )
            tail = known.tail if not changes.write_id else None  # a retry: the rows are not known
            write = plan.write
            arm(fence, write)
            try:
                version, chain = await self._write_retried(write)
            except StaleSeal:
                write.kind, write.payload, write.seal_from = "delta", plan.plain, 0
                # the rows are not what was seen: no seal until a full row
                plan, tail = Plan(write, 0, b"", None, plan.values), None
                version, chain = await self._write_retried(write)
        except BaseException:
            ctx.restore_changes(changes._replace(write_id=write_id))
            raise
        ctx.saved(version, datetimes=plan.walked)
        landed(fence, write)
        remember(
            self._chains_seen, changes.run_id, engine.after(plan, version, chain, tail, known.tail_bytes)
        )
        if logger.isEnabledFor(logging.DEBUG):
            args = (ctx.run_id, version, write.kind, len(write.payload))
            logger.debug("checkpoint %s v%d %s %dB", *args, extra={"run_id": ctx.run_id})
        if changes.followed:
            return await self.commit(
                ctx,
                node_id=node_id,
                status=final,
                metadata=metadata,
                _require_status=_require_status,
                fence=fence,
                patches=patches,
            )
        return version

    async def _known_for(self, changes: Changes) -> Known:
        """What the run record says of the chain ``changes`` follow (nothing kept of it)."""
        return self.engine.known_from_run(await self.get_run(changes.run_id), changes.version)

    def _know(self, run_id: str, known: Known | None) -> None:
        remember(self._chains_seen, run_id, known)

    async def save(self, checkpoint: Checkpoint, *, expected_version: int | None = None) -> int:
        """Store a whole :class:`Checkpoint` as the run's next version.

        ``expected_version``: None appends after whatever is stored; 0 requires a new
        run; n requires the latest to be n (else :class:`VersionConflict`).
        Returns the version assigned.
        """
        check_run_id(checkpoint.run_id)
        write = self.engine.save_write(
            checkpoint,
            expected_version=expected_version,
            expires_at=self.expiry.expires_at(RunStatus(checkpoint.status), time.time()),
            write_id=next(self._write_ids),
        )
        version, _ = await self._write_retried(write)
        return version

    # == reading ===================================================================
    async def load(self, run_id: str, version: int | None = None) -> Checkpoint | None:
        """The checkpoint at ``version`` (latest when None), or None if not stored."""
        inline = self._latest_inline if version is None and type(run_id) is str else None
        chain = None if inline is None else inline(run_id)
        if chain:  # only a stored run's (checked) id has one
            return self._engine.checkpoint_of(run_id, chain)
        check_run_id(run_id)
        if chain is None:
            chain = await self._retried(lambda: self._read_chain(run_id, version))
        if chain:
            cp = self.engine.checkpoint_of(run_id, chain)
            cache = self._latest_cache
            if cache is not None and version is None:
                cache.loaded_latest(run_id, cp, all(is_plain(p) for _, p in chain))
            return cp
        if await self._is_expired(run_id):
            raise RunExpired(run_id)
        return None

    async def load_context(
        self, run_id: str, version: int | None = None, *, reducers: ReducerRegistry | None = None
    ) -> ExecutionContext | None:
        """An :class:`ExecutionContext` restored from a checkpoint, ready to continue.

        The context's version is the checkpoint's, so committing from an older version
        raises VersionConflict (use :meth:`rollback` to continue from an old version).
        """
        loaded = await self.load_run(run_id, version, reducers=reducers)
        return None if loaded is None else loaded[1]

    async def load_run(
        self, run_id: str, version: int | None = None, *, reducers: ReducerRegistry | None = None
    ) -> tuple[RunInfo, ExecutionContext] | None:
        """The run record and a context (:meth:`load_context`) from one read, so the status
        and lease a resume checks belong to the state it continues, and a worker starting a
        run pays one round trip, not two; None when the run is not stored."""
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
        state, executed, _last, tail = self.engine.replay(run_id, [(r.version, r.payload) for r in rows])
        last = rows[-1]
        ctx = ExecutionContext.from_stored(
            run_id, state, executed, version=last.version, node_id=last.node_id, reducers=reducers
        )
        self._know(run_id, self.engine.known_after_load(info, last.version, tail))
        return info, ctx

    async def _read_retried(self, run_id: str, version: int | None) -> tuple[RunInfo | None, list[StoredRow]]:
        return await self._retried(lambda: self._read(run_id, version))

    # == rows as stored (a key rotation rewrites them: see ``stores/rekey.py``) ==========
    async def read_rows(self, run_id: str) -> tuple[RunInfo | None, list[StoredRow]]:
        """The run record and every stored row of the run (payloads as stored), ascending."""
        check_run_id(run_id)
        return await self._retried(lambda: self._backend.read_rows(run_id))

    async def rewrite_rows(self, run_id: str, payloads: Mapping[int, bytes], expected_version: int) -> bool:
        """Replace stored rows' payloads in place with ones that mean the same (a
        re-encryption), atomically, if the run is still at ``expected_version``; False
        (nothing changed) when a writer committed meanwhile. Versions, history and the
        chain's layout stay as they are. Retried when the store is unavailable: a rewrite
        that landed changes nothing the second time it lands."""
        check_run_id(run_id)
        return await self._retried(lambda: self._backend.rewrite_rows(run_id, payloads, expected_version))


def _epoch(when: dt.datetime | None) -> float | None:
    """Seconds since the epoch of ``when`` (a naive datetime is UTC), as run records keep it."""
    if when is None:
        return None
    return (when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)).timestamp()
