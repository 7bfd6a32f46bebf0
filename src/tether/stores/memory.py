"""In-process store: for tests, demos and runs that need no durability."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from time import time as _now
from typing import Any

import ormsgpack

from tether.errors import CheckpointCorrupt, RunExpired, RunNotFound, RunNotPaused, VersionConflict
from tether.state.model import (
    NO_CHAIN,
    ChainStats,
    Checkpoint,
    CheckpointInfo,
    RunInfo,
    RunStatus,
    make_checkpoint,
)
from tether.state.serde import (
    _BULK_BYTES,
    SCHEMA_VERSION,
    _ext_hook,
    _unpack,
    is_plain,
    pack_plain,
)
from tether.state.values import copy_value
from tether.stores.base import CheckpointStore, StoredRow, Write, _utc

__all__ = ["InMemoryStore"]

_unpackb = ormsgpack.unpackb


_Latest = tuple[
    int,
    Callable[[Any], Any],
    bytes | memoryview,
    str | None,
    tuple[str, ...],
    bytes | None,
    dt.datetime | float,
    RunStatus,
]
"""The latest checkpoint as a save wrote it, ready for a load: (version, the state's decoder,
state, node_id, executed node ids, metadata, timestamp, status). The state is packed on its
own (a view into the full row), each load decoding its own copy with the decoder the save
chose (see :func:`_latest_of`); the metadata is packed too, None when empty (the common
case: no decode). A plain tuple, not a NamedTuple: a load unpacks it, and the
interpreter unpacks only exact tuples fast (20 vs 70 ns)."""

_SMALL_BYTES = 16 * 1024
"""Up to this size a saved state is kept as its own bytes, beyond it as a view."""

_Kept = tuple[
    int,
    dict[str, Any],
    str | None,
    tuple[str, ...],
    dict[str, Any] | None,
    dt.datetime | float,
    RunStatus,
]
"""As :data:`_Latest`, for a state loads replayed from a chain: the state and metadata kept
as objects (private copies), each load copying them again (see
:meth:`InMemoryStore._load_rest`)."""


@dataclass(slots=True)
class _Run:
    """A run's record, kept as plain values: the :class:`RunInfo` (a frozen dataclass with
    two datetimes) is built when asked for, not at every save. A 1 KB save is all fixed
    costs, and after a collection (``bench_stores.py`` times saves so) every object it
    makes costs microseconds. With the head passed in ``Write.head`` and ``chain_stats``,
    ``bench_stores.py --backends memory``: a 1 KB save 4.8x -> 3.7-3.8x the floor."""

    run_id: str
    version: int
    status: RunStatus
    node_id: str | None
    created_at: float
    updated_at: float
    expires_at: float | None
    chain: ChainStats
    rows: dict[int, StoredRow] = field(default_factory=dict)
    latest: _Latest | None = None
    """The latest version, from the plain full row a save wrote (a read cache)."""
    kept: _Kept | None = None
    """The latest version, from the state loads replayed from a chain (a read cache;
    history is untouched). At most one of ``latest`` and ``kept`` is set."""
    replayed: int = 0
    """The version a load last replayed from a chain without caching it."""
    made: RunInfo | None = None
    """The record as last built by :attr:`info` (None: changed since)."""

    @property
    def info(self) -> RunInfo:
        if self.made is None:
            self.made = RunInfo(
                run_id=self.run_id,
                status=self.status,
                version=self.version,
                node_id=self.node_id,
                created_at=_utc(self.created_at),
                updated_at=_utc(self.updated_at),
                expires_at=None if self.expires_at is None else _utc(self.expires_at),
                chain=self.chain,
            )
        return self.made


_SHARED: dict[str, tuple[dict[str, _Run], threading.Lock]] = {}


class InMemoryStore(CheckpointStore):
    """Keeps everything in a dict; nothing survives the process.

    ``InMemoryStore(name="x")`` (URL ``memory://x``) shares its data with every other
    store of that name in the process, like a second connection to one database.
    """

    scheme = "memory"
    _splits_state = True

    def __init__(self, name: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if name:
            self._runs, self._lock = _SHARED.setdefault(name, ({}, threading.Lock()))
        else:
            self._runs, self._lock = {}, threading.Lock()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> InMemoryStore:
        return cls(url.partition("://")[2] or None, **options)

    async def setup(self) -> None:
        return None

    def _live(self, run_id: str) -> _Run | None:
        run = self._runs.get(run_id)
        if run is not None and run.expires_at is not None and run.expires_at <= _now():
            del self._runs[run_id]
            return None
        return run

    async def _write(self, w: Write) -> tuple[int, ChainStats]:
        with self._lock:
            old = self._runs.get(w.run_id)
            run = self._live(w.run_id)
            if run is None and w.expected_version:  # the writer's run is gone: say why
                raise RunExpired(w.run_id) if old is not None else RunNotFound(w.run_id)
            current = run.version if run else 0
            if w.expected_version is not None and w.expected_version != current:
                raise VersionConflict(w.run_id, expected=w.expected_version, actual=current)
            if w.require_status is not None and (run is None or run.status is not w.require_status):
                raise RunNotPaused(w.run_id, str(run.status) if run else "missing")
            if run is None and w.kind != "full":
                raise RunNotFound(w.run_id)
            version = current + 1
            chain = w.chain_after(run.chain if run else NO_CHAIN, version)
            row = StoredRow(w.run_id, version, w.kind, w.node_id, w.status, w.created_at, w.payload)
            if run is None:
                run = self._runs[w.run_id] = _Run(
                    w.run_id, version, w.status, w.node_id, w.created_at, w.created_at, w.expires_at, chain
                )
            else:
                run.version, run.status, run.node_id, run.chain = version, w.status, w.node_id, chain
                run.updated_at, run.expires_at, run.made = w.created_at, w.expires_at, None
            run.rows[version] = row
            run.latest, run.kept = _latest_of(w, version) if w.state_at else None, None
            return version, chain

    async def _read(self, run_id: str, version: int | None) -> tuple[RunInfo | None, list[StoredRow]]:
        with self._lock:
            run = self._live(run_id)
            if run is None:
                return None, []
            rows = run.rows
            if version is None:
                version, base = run.version, run.chain.base_version
            elif version not in rows:
                return run.info, []
            else:
                base = max(v for v, r in rows.items() if v <= version and r.kind == "full")
            return run.info, [rows[v] for v in range(base, version + 1)]

    async def load(self, run_id: str, version: int | None = None) -> Checkpoint | None:
        """As every store's, with the latest checkpoint kept ready.

        With no I/O to hide behind, a load is all Python, so the latest version a save
        wrote is kept as a ``_Latest``: the state packed on its own (a view into the full
        row, found by ``Write.state_at``), the rest as objects. A load decodes the state
        and nothing else. This method is that path alone; everything else is in
        :meth:`_load_rest`. Timed cold, with a collection before each call (as
        ``bench_stores.py`` does), the checks and branches of the other paths cost as much
        as a 1 KB decode's third: a throwaway script interleaving both versions in one
        process put a 1 KB load at 1.58-1.81x the floor with them, 1.34-1.47x without.
        """
        run = self._runs.get(run_id)  # one dict read, atomic: writers swap whole values
        if run is not None and version is None:
            hit = run.latest
            if hit is not None and (run.expires_at is None or run.expires_at > _now()):
                number, decode, body, node, executed, meta, when, status = hit
                try:
                    state = decode(body)
                    extra = None if meta is None else _unpackb(meta, ext_hook=_ext_hook)
                except Exception as exc:  # bytes this process packed: only a bug lands here
                    raise CheckpointCorrupt(
                        f"cached state unreadable ({exc})", run_id=run_id, version=number
                    ) from exc
                # the ids as the cached tuple and no metadata as None: made a list and a dict when read
                return make_checkpoint(run_id, node, state, executed, when, number, status, extra)
        return await self._load_rest(run_id, version)

    async def _load_rest(self, run_id: str, version: int | None) -> Checkpoint | None:
        """A load the saved row cannot answer: an older version, or a run that ends in a
        chain of deltas.

        A chain's state is kept when a second load replays the same version (a run read
        once per save, commit, load, commit…, never pays for the copy), not packed but as
        a private copy that each load copies again (``values.copy_value``: new containers,
        the immutable strings shared). That copy is 1.6-2x cheaper than decoding the same
        state (``bench_stores.py``'s states, throwaway scripts on two machines: 10 MB 3.4 vs
        7.3 ms and 6.9 vs 10.8 ms; 1 MB 0.54 vs 0.99 ms). A save's full row stays packed:
        keeping it as objects too would add that copy to every save, on top of the packing.
        The cost: the kept containers are the cyclic GC's to walk.
        """
        if version is not None:
            return await super().load(run_id, version)
        run = self._runs.get(run_id)
        if run is None:
            return None
        kept = run.kept
        if kept is not None and (run.expires_at is None or run.expires_at > _now()):
            number, body, node, executed, meta, when, status = kept
            extra = None if meta is None else copy_value(meta)
            return make_checkpoint(run_id, node, copy_value(body), executed, when, number, status, extra)
        with self._lock:
            run = self._live(run_id)
            if run is None:
                return None
            chain = _latest_chain(run)
        cp = self.engine.checkpoint_of(run_id, chain)  # outside the lock: the replay is the slow part
        if not all(is_plain(p) for _, p in chain):
            return cp  # never cache in the clear what a key guards
        if run.replayed != cp.version:
            run.replayed = cp.version  # read once: not worth keeping yet
            return cp
        kept = (
            cp.version,
            copy_value(cp.state),
            cp.node_id,
            tuple(cp.executed_node_ids),
            copy_value(cp.metadata) if cp.metadata else None,
            cp.timestamp,
            cp.status,
        )
        with self._lock:
            if self._runs.get(run_id) is run and run.version == cp.version:
                run.kept = kept
        return cp

    async def _read_chain(self, run_id: str, version: int | None) -> list[tuple[int, bytes]]:
        if version is not None:
            return await super()._read_chain(run_id, version)
        with self._lock:
            run = self._live(run_id)
            return [] if run is None else _latest_chain(run)

    async def _history(self, run_id: str, *, before: int | None, limit: int | None) -> list[CheckpointInfo]:
        with self._lock:
            run = self._live(run_id)
            if run is None:
                return []
            versions = sorted((v for v in run.rows if before is None or v < before), reverse=True)
            if limit is not None:
                versions = versions[:limit]
            return [_info(run.rows[v]) for v in versions]

    async def get_run(self, run_id: str) -> RunInfo | None:
        with self._lock:
            run = self._live(run_id)
            return None if run is None else run.info

    async def _set_status(self, run_id: str, status: RunStatus, expires_at: float | None) -> None:
        with self._lock:
            run = self._live(run_id)
            if run is None:
                raise RunNotFound(run_id)
            run.status, run.updated_at, run.expires_at, run.made = status, _now(), expires_at, None

    async def list_runs(
        self, *, status: RunStatus | None = None, limit: int = 100, offset: int = 0
    ) -> list[RunInfo]:
        with self._lock:
            infos = [r.info for rid in list(self._runs) if (r := self._live(rid)) is not None]
        if status is not None:
            infos = [i for i in infos if i.status is RunStatus(status)]
        infos.sort(key=lambda i: (i.updated_at, i.run_id), reverse=True)
        return infos[offset : offset + limit]

    async def delete(self, run_id: str) -> bool:
        with self._lock:
            return self._runs.pop(run_id, None) is not None

    async def _rebase(self, run_id: str, version: int, payload: bytes, after: bytes = b"") -> int:
        if after:  # never: this store writes no segments (``_seals``)
            raise ValueError("the memory store holds no segments to cut")
        with self._lock:
            run = self._live(run_id)
            if run is None or version not in run.rows:
                raise RunNotFound(run_id, version)
            run.rows[version] = run.rows[version]._replace(kind="full", payload=payload)
            dropped = [v for v in run.rows if v < version]
            for v in dropped:
                del run.rows[v]
            chain = run.chain
            if chain.base_version < version:
                run.chain = replace(
                    chain,
                    base_version=version,
                    base_bytes=len(payload),
                    length=run.version - version,
                )
                run.made = None
            return len(dropped)

    async def purge_expired(self) -> int:
        with self._lock:
            now = _now()
            gone = [rid for rid, r in self._runs.items() if r.expires_at is not None and r.expires_at <= now]
            for rid in gone:
                del self._runs[rid]
            return len(gone)

    async def aclose(self) -> None:
        return None


def _latest_of(w: Write, version: int) -> _Latest | None:
    """The cache entry for a plain full row just written (its ``state_at`` and ``head``
    known: the head as the save encoded it, so nothing is decoded), unless that head is one
    a load would refuse."""
    head = w.head
    if head is None:
        return None
    if (
        head.get("v") != SCHEMA_VERSION
        or head.get("kind") != "full"
        or type(head.get("executed")) is not list
    ):
        return None
    meta = head.get("meta")
    payload = w.payload
    return (
        version,
        # chosen here, not tested at every load: a small plain state with unpackb itself,
        # no ext_hook keyword to parse (a cold 1 KB load's ratio to the floor 0.03-0.24
        # lower, a throwaway in-process A/B); a big one with the collector paused
        _unpack if len(payload) >= _BULK_BYTES else _unpack_dated if w.dated else _unpackb,
        # a small state copied out as bytes, which ormsgpack reads without the buffer
        # protocol (that ratio 0.03-0.1 lower, the copy ~0.1 us); a big one as a view
        payload[w.state_at :] if len(payload) < _SMALL_BYTES else memoryview(payload)[w.state_at :],
        w.node_id,
        tuple(head["executed"]),
        pack_plain(meta) if meta else None,
        w.created_at,
        w.status,
    )


def _unpack_dated(body: bytes | memoryview) -> Any:
    """A small state that may hold a datetime: its extension needs the hook."""
    return _unpackb(body, ext_hook=_ext_hook)


def _latest_chain(run: _Run) -> list[tuple[int, bytes]]:
    rows = run.rows
    return [(v, rows[v].payload) for v in range(run.chain.base_version, run.version + 1)]


def _info(row: StoredRow) -> CheckpointInfo:
    return CheckpointInfo(
        run_id=row.run_id,
        version=row.version,
        node_id=row.node_id,
        status=row.status,
        timestamp=_utc(row.created_at),
        kind=row.kind,
        size=len(row.payload),
    )
