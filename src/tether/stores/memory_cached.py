"""An in-process backend with a read cache of each run's latest checkpoint (opt-in).

``memory://?cache=1`` or ``InMemoryStore(cache=True)``. It behaves as :class:`MemoryBackend`
does; with no I/O to hide behind, a memory load is all Python, so this one keeps the
latest version ready: after a full save, the state packed on its own (a view into the
row, found by ``Write.state_at``) that each load decodes; after a chain a load replayed
twice, the state as objects that each load copies. Benchmarks use it to measure the
store's own overhead; the reference backend stays plain (see ``memory.py``).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from time import time as _now
from typing import Any

from tether.errors import CheckpointCorrupt, RunExpired, RunNotFound
from tether.state.model import (
    NO_CHAIN,
    ChainStats,
    Checkpoint,
    CheckpointInfo,
    RunInfo,
    RunStatus,
    make_checkpoint,
)
from tether.state.serde import SCHEMA_VERSION, pack_plain, plain_decoder, unpack_dated
from tether.state.values import copy_value
from tether.stores._chain import Write, check_write
from tether.stores.backend import Capabilities, StoredRow, utc

__all__ = ["CachedMemoryBackend"]

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
"""The latest checkpoint as a save wrote it: (version, the state's decoder, state, node_id,
executed node ids, metadata packed or None, timestamp, status). A plain tuple: a load
unpacks it."""

_Kept = tuple[
    int, dict[str, Any], str | None, tuple[str, ...], dict[str, Any] | None, dt.datetime | float, RunStatus
]
"""As :data:`_Latest`, for a state replayed from a chain, kept as a private copy."""

_SMALL_BYTES = 16 * 1024
"""Up to this size a saved state is kept as its own bytes, beyond it as a view."""


@dataclass(slots=True)
class _Run:
    """A run's record as plain values (its :class:`RunInfo` built when asked for), its rows
    and what the cache keeps of its latest version."""

    run_id: str
    version: int
    status: RunStatus
    node_id: str | None
    created_at: float
    updated_at: float
    expires_at: float | None
    chain: ChainStats
    write_id: str = ""
    rows: dict[int, StoredRow] = field(default_factory=dict)
    latest: _Latest | None = None
    kept: _Kept | None = None
    replayed: int = 0
    """The version a load last replayed from a chain without keeping it."""
    made: RunInfo | None = None

    @property
    def info(self) -> RunInfo:
        if self.made is None:
            self.made = RunInfo(
                run_id=self.run_id,
                status=self.status,
                version=self.version,
                node_id=self.node_id,
                created_at=utc(self.created_at),
                updated_at=utc(self.updated_at),
                expires_at=None if self.expires_at is None else utc(self.expires_at),
                chain=self.chain,
            )
        return self.made

    def live(self, now: float) -> bool:
        return self.expires_at is None or self.expires_at > now


_SHARED: dict[str, tuple[dict[str, _Run], threading.Lock]] = {}


class CachedMemoryBackend:
    """:class:`~tether.stores.memory.MemoryBackend` with the latest checkpoint kept ready."""

    capabilities = Capabilities(splits_state=True)

    def __init__(self, name: str | None = None) -> None:
        if name:
            self._runs, self._lock = _SHARED.setdefault(name, ({}, threading.Lock()))
        else:
            self._runs, self._lock = {}, threading.Lock()

    async def setup(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def _live(self, run_id: str) -> _Run | None:
        """The run, unless it expired (kept until purged, so that it reads as expired)."""
        run = self._runs.get(run_id)
        return None if run is None or not run.live(_now()) else run

    async def append(self, w: Write) -> tuple[int, ChainStats]:
        with self._lock:
            old = self._runs.get(w.run_id)
            run = self._live(w.run_id)
            if run is None and old is not None:
                if w.expected_version:  # gone under its writer
                    raise RunExpired(w.run_id)
                del self._runs[w.run_id]  # the id starts again from scratch
            if check_write(w, run, write_id=run.write_id if run else None):  # no RunInfo built
                assert run is not None
                return run.version, run.chain
            current = run.version if run else 0
            version = current + 1
            chain = w.chain_after(run.chain if run else NO_CHAIN, version)
            if run is None:
                run = self._runs[w.run_id] = _Run(
                    w.run_id, version, w.status, w.node_id, w.created_at, w.created_at, w.expires_at, chain
                )
            else:
                run.version, run.status, run.node_id, run.chain = version, w.status, w.node_id, chain
                run.updated_at, run.expires_at, run.made = w.created_at, w.expires_at, None
            run.write_id = w.write_id
            run.rows[version] = StoredRow(
                w.run_id, version, w.kind, w.node_id, w.status, w.created_at, w.payload
            )
            run.latest, run.kept = _latest_of(w, version) if w.state_at else None, None
            return version, chain

    async def read(self, run_id: str, version: int | None) -> tuple[RunInfo | None, list[StoredRow]]:
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

    async def read_chain(self, run_id: str, version: int | None) -> list[tuple[int, bytes]]:
        if version is not None:
            _info, rows = await self.read(run_id, version)
            return [(r.version, r.payload) for r in rows]
        with self._lock:
            run = self._live(run_id)
            if run is None:
                return []
            kept = run.rows
            return [(v, kept[v].payload) for v in range(run.chain.base_version, run.version + 1)]

    # -- the cache (``CheckpointStore.load`` asks it first) ---------------------------
    def cached_latest(self, run_id: str) -> Checkpoint | None:
        """The latest checkpoint from the cache, or None when it holds nothing for the run."""
        run = self._runs.get(run_id)  # one dict read, atomic: writers swap whole values
        if run is None:
            return None
        hit, expires = run.latest, run.expires_at
        if hit is not None and (expires is None or expires > _now()):
            number, decode, body, node, executed, meta, when, status = hit
            try:
                state = decode(body)
                extra = None if meta is None else unpack_dated(meta)
            except Exception as exc:  # bytes this process packed: only a bug lands here
                raise CheckpointCorrupt(
                    f"cached state unreadable ({exc})", run_id=run_id, version=number
                ) from exc
            return make_checkpoint(run_id, node, state, executed, when, number, status, extra)
        kept = run.kept
        if kept is not None and run.live(_now()):
            number, state, node, executed, kmeta, when, status = kept
            copied = None if kmeta is None else copy_value(kmeta)
            return make_checkpoint(run_id, node, copy_value(state), executed, when, number, status, copied)
        return None

    def loaded_latest(self, run_id: str, cp: Checkpoint, plain: bool) -> None:
        """A load replayed the latest chain into ``cp``: keep a copy once it is read twice
        (a run read once per save never pays for it), never in the clear what a key guards."""
        run = self._runs.get(run_id)
        if run is None or not plain:
            return
        if run.replayed != cp.version:
            run.replayed = cp.version
            return
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

    # -- the rest, as the reference backend does it -------------------------------------
    async def history(self, run_id: str, *, before: int | None, limit: int | None) -> list[CheckpointInfo]:
        with self._lock:
            run = self._live(run_id)
            if run is None:
                return []
            versions = sorted((v for v in run.rows if before is None or v < before), reverse=True)
            picked = [run.rows[v] for v in (versions[:limit] if limit is not None else versions)]
        return [
            CheckpointInfo(
                run_id=r.run_id,
                version=r.version,
                node_id=r.node_id,
                status=r.status,
                timestamp=utc(r.created_at),
                kind=r.kind,
                size=len(r.payload),
            )
            for r in picked
        ]

    async def get_run(self, run_id: str) -> RunInfo | None:
        with self._lock:
            run = self._live(run_id)
            return None if run is None else run.info

    async def list_runs(self, *, status: RunStatus | None, limit: int, offset: int) -> list[RunInfo]:
        with self._lock:
            infos = [r.info for rid in list(self._runs) if (r := self._live(rid)) is not None]
        if status is not None:
            infos = [i for i in infos if i.status is RunStatus(status)]
        infos.sort(key=lambda i: (i.updated_at, i.run_id), reverse=True)
        return infos[offset : offset + limit]

    async def set_status(self, run_id: str, status: RunStatus, expires_at: float | None) -> None:
        with self._lock:
            run = self._live(run_id)
            if run is None:
                raise RunNotFound(run_id) if run_id not in self._runs else RunExpired(run_id)
            run.status, run.updated_at, run.expires_at, run.made = status, _now(), expires_at, None

    async def is_expired(self, run_id: str) -> bool:
        with self._lock:
            run = self._runs.get(run_id)
            return run is not None and not run.live(_now())

    async def delete(self, run_id: str) -> bool:
        with self._lock:
            return self._runs.pop(run_id, None) is not None

    async def rebase(self, run_id: str, version: int, payload: bytes, after: bytes = b"") -> int:
        if after:  # never: this backend takes no segments
            raise ValueError("the memory backend holds no segments to cut")
        with self._lock:
            run = self._live(run_id)
            if run is None or version not in run.rows:
                raise RunNotFound(run_id, version)
            run.rows[version] = run.rows[version]._replace(kind="full", payload=payload)
            dropped = [v for v in run.rows if v < version]
            for v in dropped:
                del run.rows[v]
            if run.chain.base_version < version:
                length = run.version - version
                run.chain = replace(run.chain, base_version=version, base_bytes=len(payload), length=length)
                run.made = None
            return len(dropped)

    async def read_rows(self, run_id: str) -> tuple[RunInfo | None, list[StoredRow]]:
        with self._lock:
            run = self._live(run_id)
            if run is None:
                return None, []
            return run.info, [run.rows[v] for v in sorted(run.rows)]

    async def rewrite_rows(self, run_id: str, payloads: Mapping[int, bytes], expected_version: int) -> bool:
        # what the cache keeps is the decoded state, which a rewrite does not change
        with self._lock:
            run = self._live(run_id)
            if run is None:
                raise RunNotFound(run_id)
            if run.version != expected_version:
                return False
            missing = [v for v in payloads if v not in run.rows]
            if missing:
                raise RunNotFound(run_id, missing[0])
            for v, payload in payloads.items():
                run.rows[v] = run.rows[v]._replace(payload=payload)
            return True

    async def purge_expired(self) -> int:
        with self._lock:
            now = _now()
            gone = [rid for rid, r in self._runs.items() if not r.live(now)]
            for rid in gone:
                del self._runs[rid]
            return len(gone)


def _latest_of(w: Write, version: int) -> _Latest | None:
    """The cache entry for a plain full row just written (its head as the save encoded
    it, so nothing is decoded), unless that head is one a load would refuse."""
    head = w.head
    if head is None or head.get("v") != SCHEMA_VERSION or head.get("kind") != "full":
        return None
    if type(head.get("executed")) is not list:
        return None
    meta = head.get("meta")
    payload = w.payload
    return (
        version,
        plain_decoder(len(payload), datetimes=w.dated),
        # a small state copied out as bytes (read without the buffer protocol), a big one a view
        payload[w.state_at :] if len(payload) < _SMALL_BYTES else memoryview(payload)[w.state_at :],
        w.node_id,
        tuple(head["executed"]),
        pack_plain(meta) if meta else None,
        w.created_at,
        w.status,
    )
