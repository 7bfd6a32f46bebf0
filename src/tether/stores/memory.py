"""In-process store: for tests, demos and runs that need no durability.

The reference backend: rows and run records in dicts, the write checks and everything
else done by the store around it, so it reads as the protocol itself does.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from time import time as _now
from typing import Any
from urllib.parse import parse_qsl

from tether.errors import ConfigError, RunExpired, RunNotFound
from tether.state.model import NO_CHAIN, ChainStats, CheckpointInfo, RunInfo, RunStatus
from tether.stores._chain import Write, check_write
from tether.stores.backend import Capabilities, StoredRow
from tether.stores.base import CheckpointStore

__all__ = ["InMemoryStore", "MemoryBackend"]


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, dt.UTC)


@dataclass(slots=True)
class _Run:
    """A run's record and rows."""

    info: RunInfo
    rows: dict[int, StoredRow] = field(default_factory=dict)
    write_id: str = ""

    @property
    def expired(self) -> bool:
        return self.info.expires_at is not None and self.info.expires_at.timestamp() <= _now()


_SHARED: dict[str, tuple[dict[str, _Run], threading.Lock]] = {}


class MemoryBackend:
    """Keeps everything in a dict; nothing survives the process.

    ``MemoryBackend("x")`` shares its data with every other one of that name in the
    process, like a second connection to one database.
    """

    capabilities = Capabilities()

    def __init__(self, name: str | None = None) -> None:
        if name:
            self._runs, self._lock = _SHARED.setdefault(name, ({}, threading.Lock()))
        else:
            self._runs, self._lock = {}, threading.Lock()

    async def setup(self) -> None:
        return None

    def _live(self, run_id: str) -> _Run | None:
        """The run, unless it expired (kept until purged, so that it reads as expired)."""
        run = self._runs.get(run_id)
        return None if run is None or run.expired else run

    async def append(self, w: Write) -> tuple[int, ChainStats]:
        with self._lock:
            old = self._runs.get(w.run_id)
            run = self._live(w.run_id)
            if run is None and old is not None:
                if w.expected_version:  # gone under its writer
                    raise RunExpired(w.run_id)
                del self._runs[w.run_id]  # the id starts again from scratch
            info = None if run is None else run.info
            if check_write(w, info, write_id=run.write_id if run else None):
                assert info is not None
                return info.version, info.chain
            version = (info.version if info else 0) + 1
            chain = w.chain_after(info.chain if info else NO_CHAIN, version)
            created = info.created_at if info else _utc(w.created_at)
            new = RunInfo(
                run_id=w.run_id,
                status=w.status,
                version=version,
                node_id=w.node_id,
                created_at=created,
                updated_at=_utc(w.created_at),
                expires_at=None if w.expires_at is None else _utc(w.expires_at),
                chain=chain,
            )
            if run is None:
                run = self._runs[w.run_id] = _Run(new)
            run.info, run.write_id = new, w.write_id
            kind, payload = w.kind, w.payload
            if kind == "segment":
                run.rows[w.seal_from] = run.rows[w.seal_from]._replace(kind="segment", payload=payload)
                for v in range(w.seal_from + 1, version):
                    run.rows[v] = run.rows[v]._replace(kind="sealed", payload=b"")
                kind, payload = "sealed", b""
            run.rows[version] = StoredRow(w.run_id, version, kind, w.node_id, w.status, w.created_at, payload)
            return version, chain

    async def read(self, run_id: str, version: int | None) -> tuple[RunInfo | None, list[StoredRow]]:
        with self._lock:
            run = self._live(run_id)
            if run is None:
                return None, []
            rows = run.rows
            if version is None:
                version = run.info.version
            elif version not in rows:
                return run.info, []
            base = max(v for v, r in rows.items() if v <= version and r.kind == "full")
            return run.info, [rows[v] for v in range(base, version + 1)]

    async def read_chain(self, run_id: str, version: int | None) -> list[tuple[int, bytes]]:
        _info, rows = await self.read(run_id, version)
        return [(r.version, r.payload) for r in rows]

    async def history(self, run_id: str, *, before: int | None, limit: int | None) -> list[CheckpointInfo]:
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
            run.info = replace(
                run.info,
                status=status,
                updated_at=_utc(_now()),
                expires_at=None if expires_at is None else _utc(expires_at),
            )

    async def is_expired(self, run_id: str) -> bool:
        with self._lock:
            run = self._runs.get(run_id)
            return run is not None and run.expired

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
            chain = run.info.chain
            if chain.base_version < version:
                length = run.info.version - version
                new = replace(chain, base_version=version, base_bytes=len(payload), length=length)
                run.info = replace(run.info, chain=new)
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
            if run.info.version != expected_version:
                return False
            missing = [v for v in payloads if v not in run.rows]
            if missing:
                raise RunNotFound(run_id, missing[0])
            for v, payload in payloads.items():
                run.rows[v] = run.rows[v]._replace(payload=payload)
            return True

    async def purge_expired(self) -> int:
        with self._lock:
            gone = [rid for rid, r in self._runs.items() if r.expired]
            for rid in gone:
                del self._runs[rid]
            return len(gone)

    async def aclose(self) -> None:
        return None


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
        timestamp=_utc(row.created_at),
        kind=row.kind,
        size=len(row.payload),
    )
