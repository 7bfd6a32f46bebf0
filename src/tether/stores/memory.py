"""In-process store: for tests, demos and runs that need no durability.

The reference backend: rows and run records in dicts, the write checks and everything
else done by the store around it, so it reads as the protocol itself does.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from time import time as _now
from typing import Any, ClassVar
from urllib.parse import parse_qsl

from tether.errors import ConfigError, LeaseLost, RunExpired, RunNotFound
from tether.state.model import NO_CHAIN, ChainStats, CheckpointInfo, RunInfo, RunStatus
from tether.stores._chain import Write, check_write, next_fence
from tether.stores.backend import Capabilities, StoredRow, utc
from tether.stores.base import CheckpointStore

__all__ = ["InMemoryStore", "MemoryBackend"]

_new_tuple = tuple.__new__


@dataclass(slots=True)
class MemoryRun:
    """A run's record as plain values (its :class:`RunInfo` built when asked for) and its rows."""

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
    made: RunInfo | None = None
    fence: int = 0
    lease_until: float | None = None

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
                fence=self.fence,
                lease_until=self.lease_until,
            )
        return self.made

    def live(self, now: float) -> bool:
        return self.expires_at is None or self.expires_at > now


class MemoryBackend:
    """Keeps everything in a dict; nothing survives the process.

    ``MemoryBackend("x")`` shares its data with every other one of that name in the
    process (and class), like a second connection to one database.
    """

    capabilities = Capabilities()
    _run_type: ClassVar[type[MemoryRun]] = MemoryRun
    _shared: ClassVar[dict[str, tuple[dict[str, Any], threading.Lock]]] = {}
    """Named data, per class: a subclass keeps its own (its runs hold more)."""

    def __init__(self, name: str | None = None) -> None:
        self._runs: dict[str, MemoryRun]
        if name:
            self._runs, self._lock = type(self)._shared.setdefault(name, ({}, threading.Lock()))
        else:
            self._runs, self._lock = {}, threading.Lock()

    async def setup(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def _live(self, run_id: str) -> MemoryRun | None:
        """The run, unless it expired (kept until purged, so that it reads as expired)."""
        run = self._runs.get(run_id)
        return None if run is None or not run.live(_now()) else run

    def _written(self, run: MemoryRun, w: Write, version: int) -> None:
        """A hook for a subclass, called under the lock once ``w`` is stored as ``version``."""

    async def append(self, w: Write) -> tuple[int, ChainStats]:
        with self._lock:
            old = self._runs.get(w.run_id)
            run = old if old is None or old.live(_now()) else None
            if run is None and old is not None:
                if w.expected_version:  # gone under its writer
                    raise RunExpired(w.run_id)
                del self._runs[w.run_id]  # the id starts again from scratch
            fence = run.fence if run else 0
            if check_write(w, run, write_id=run.write_id if run else None, fence=fence):  # no RunInfo built
                assert run is not None
                if w.take:
                    w.fence = run.fence
                return run.version, run.chain
            version = (run.version if run else 0) + 1
            chain = w.chain_after(run.chain if run else NO_CHAIN, version)
            if run is None:
                run = self._runs[w.run_id] = self._run_type(
                    w.run_id, version, w.status, w.node_id, w.created_at, w.created_at, w.expires_at, chain
                )
            else:
                run.version, run.status, run.node_id, run.chain = version, w.status, w.node_id, chain
                run.updated_at, run.expires_at, run.made = w.created_at, w.expires_at, None
            run.write_id = w.write_id
            if w.take:
                run.fence = w.fence = next_fence(fence, w.created_at)
            if (w.take or w.fence) and w.lease_until is not None:
                run.lease_until = w.lease_until or None
            kind, payload = w.kind, w.payload
            if kind == "segment":
                run.rows[w.seal_from] = run.rows[w.seal_from]._replace(kind="segment", payload=payload)
                for v in range(w.seal_from + 1, version):
                    run.rows[v] = run.rows[v]._replace(kind="sealed", payload=b"")
                kind, payload = "sealed", b""
            row = (w.run_id, version, kind, w.node_id, w.status, w.created_at, payload)
            run.rows[version] = _new_tuple(StoredRow, row)  # (all fields: no Python ``__new__``)
            self._written(run, w, version)
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

    async def history(self, run_id: str, *, before: int | None, limit: int | None) -> list[CheckpointInfo]:
        with self._lock:
            run = self._live(run_id)
            if run is None:
                return []
            versions = sorted((v for v in run.rows if before is None or v < before), reverse=True)
            picked = [run.rows[v] for v in (versions[:limit] if limit is not None else versions)]
        return [_info(r) for r in picked]

    async def get_run(self, run_id: str) -> RunInfo | None:
        with self._lock:
            run = self._live(run_id)
            return None if run is None else run.info

    async def list_runs(
        self,
        *,
        status: RunStatus | None,
        limit: int,
        offset: int,
        updated_after: float | None = None,
        updated_before: float | None = None,
    ) -> list[RunInfo]:
        with self._lock:
            infos = [r.info for rid in list(self._runs) if (r := self._live(rid)) is not None]
        if status is not None:
            infos = [i for i in infos if i.status is RunStatus(status)]
        if updated_after is not None:
            infos = [i for i in infos if i.updated_at.timestamp() > updated_after]
        if updated_before is not None:
            infos = [i for i in infos if i.updated_at.timestamp() < updated_before]
        infos.sort(key=lambda i: (i.updated_at, i.run_id), reverse=True)
        return infos[offset : offset + limit]

    async def set_status(self, run_id: str, status: RunStatus, expires_at: float | None) -> None:
        with self._lock:
            run = self._live(run_id)
            if run is None:
                raise RunNotFound(run_id) if run_id not in self._runs else RunExpired(run_id)
            run.status, run.updated_at, run.expires_at, run.made = status, _now(), expires_at, None

    async def renew_lease(self, run_id: str, fence: int, until: float) -> None:
        with self._lock:
            run = self._live(run_id)
            if run is None or run.fence != fence or run.lease_until is None:  # (None: released)
                raise LeaseLost(run_id, held=fence, current=run.fence if run else 0)
            run.lease_until, run.made = until, None

    async def is_expired(self, run_id: str) -> bool:
        with self._lock:
            run = self._runs.get(run_id)
            return run is not None and not run.live(_now())

    async def delete(self, run_id: str) -> bool:
        with self._lock:
            return self._runs.pop(run_id, None) is not None

    async def rebase(self, run_id: str, version: int, payload: bytes, after: bytes = b"") -> int:
        with self._lock:
            run = self._live(run_id)
            if run is None or version not in run.rows:
                raise RunNotFound(run_id, version)
            run.rows[version] = run.rows[version]._replace(kind="full", payload=payload)
            if after:
                run.rows[version + 1] = run.rows[version + 1]._replace(kind="segment", payload=after)
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


class InMemoryStore(CheckpointStore):
    """A :class:`CheckpointStore` on a :class:`MemoryBackend` (URL ``memory://[name]``).

    ``cache=True`` (``memory://[name]?cache=1``): on a
    :class:`~tether.stores.memory_cached.CachedMemoryBackend` instead, which keeps each
    run's latest checkpoint ready for loads.
    """

    scheme = "memory"

    def __init__(self, name: str | None = None, *, cache: bool = False, **kwargs: Any) -> None:
        if cache:
            from tether.stores.memory_cached import CachedMemoryBackend

            super().__init__(CachedMemoryBackend(name), **kwargs)
        else:
            super().__init__(MemoryBackend(name), **kwargs)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> InMemoryStore:
        name, _, query = url.partition("://")[2].partition("?")
        for key, value in parse_qsl(query, keep_blank_values=True):
            if key != "cache":
                raise ConfigError(f"unknown memory URL option {key!r}; known: cache")
            options.setdefault("cache", value.lower() in {"1", "true", "yes", "on"})
        return cls(name or None, **options)


def _info(row: StoredRow) -> CheckpointInfo:
    return CheckpointInfo(
        run_id=row.run_id,
        version=row.version,
        node_id=row.node_id,
        status=row.status,
        timestamp=utc(row.created_at),
        kind=row.kind,
        size=len(row.payload),
    )
