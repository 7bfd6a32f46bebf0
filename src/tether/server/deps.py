"""Shared pieces of the routers: the store, the executor, JSON responses."""

from __future__ import annotations

import asyncio
import datetime as dt
import gzip
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import orjson
from fastapi import Depends, Request, Response

from tether.runtime import runtime_reducers
from tether.runtime.stream import EventBroadcaster
from tether.server.auth import ApiToken, require
from tether.server.executor import Executor
from tether.state import ReducerRegistry
from tether.stores.base import CheckpointStore

__all__ = [
    "Admin",
    "Encoded",
    "Events",
    "Exec",
    "Operator",
    "Reader",
    "SnapshotCache",
    "Store",
    "encode",
    "json_response",
    "reducers",
]


async def _store(request: Request) -> CheckpointStore:
    store: CheckpointStore = request.app.state.store
    return store


async def _executor(request: Request) -> Executor:
    executor: Executor = request.app.state.executor
    return executor


async def _events(request: Request) -> EventBroadcaster:
    events: EventBroadcaster = request.app.state.events
    return events


# async on purpose: FastAPI runs a plain ``def`` dependency in a worker thread, a thread
# hop per dependency per request
Store = Annotated[CheckpointStore, Depends(_store)]
Exec = Annotated[Executor, Depends(_executor)]
Events = Annotated[EventBroadcaster, Depends(_events)]
Reader = Annotated[ApiToken, Depends(require("read"))]
Operator = Annotated[ApiToken, Depends(require("operate"))]
Admin = Annotated[ApiToken, Depends(require("admin"))]


def reducers(executor: Executor) -> ReducerRegistry:
    return runtime_reducers(executor.reducers)


def _default(obj: Any) -> Any:
    if isinstance(obj, bytes):
        return {"$bytes": len(obj)}
    if isinstance(obj, dt.datetime | dt.date):
        return obj.isoformat()
    return str(obj)


def encode(data: Any) -> bytes:
    """orjson straight to bytes: a 10 MB state is encoded once, without pydantic."""
    return orjson.dumps(data, default=_default, option=orjson.OPT_NON_STR_KEYS)


def json_response(data: Any, status: int = 200) -> Response:
    return Response(encode(data), status_code=status, media_type="application/json")


class Encoded:
    """One snapshot encoded once: the JSON bytes and, made on first demand, their gzip."""

    __slots__ = ("_gz", "body")

    def __init__(self, body: bytes) -> None:
        self.body = body
        self._gz: asyncio.Future[bytes] | None = None

    @property
    def size(self) -> int:
        gz = self._gz
        done = gz is not None and gz.done() and not gz.cancelled() and gz.exception() is None
        return len(self.body) + (len(gz.result()) if gz is not None and done else 0)

    async def gzipped(self) -> bytes:
        """The body gzipped, compressed once by whichever request asks first; zlib drops
        the GIL, so it runs in a thread while the event loop keeps serving."""
        if self._gz is None:
            self._gz = asyncio.get_running_loop().create_future()
            try:
                packed = await asyncio.to_thread(gzip.compress, self.body, GZIP_LEVEL, mtime=0)
            except BaseException as exc:
                self._gz.set_exception(exc)
                self._gz.exception()  # retrieved: no "never retrieved" warning
                self._gz = None
                raise
            self._gz.set_result(packed)
        return await asyncio.shield(self._gz)


GZIP_LEVEL = 5
"""JSON of agent state shrinks 3-5x at this level; higher levels cost far more time for little."""


class SnapshotCache:
    """Encoded snapshots keyed by run id, version and variant (status, key style).

    Many dashboards watching one big run ask for the same version again and again: each
    version is read from the store, decoded and encoded once (even when 50 requests miss
    at the same moment: the later ones wait for the first), then served as the same
    bytes. A run's new version replaces its old entries. Bounded by total bytes, least
    recently used out first; a body larger than half the bound is served but not kept.
    """

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, int, str], Encoded] = OrderedDict()
        self._building: dict[tuple[str, int, str], asyncio.Future[Encoded]] = {}

    def get(self, run_id: str, version: int, variant: str) -> Encoded | None:
        key = (run_id, version, variant)
        found = self._items.get(key)
        if found is not None:
            self._items.move_to_end(key)
        return found

    async def fetch(
        self, run_id: str, version: int, variant: str, build: Callable[[], Awaitable[tuple[bytes, bool]]]
    ) -> Encoded:
        """The entry for ``(run_id, version, variant)``, built by ``build`` once however many ask.

        ``build`` returns the body and whether it may be kept (False when the store moved
        on between reading the version and reading the snapshot).
        """
        key = (run_id, version, variant)
        hit = self.get(run_id, version, variant)
        if hit is not None:
            return hit
        pending = self._building.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Encoded] = asyncio.get_running_loop().create_future()
        self._building[key] = future
        try:
            body, keep = await build()
            entry = Encoded(body)
            if keep:
                self._put(key, entry)
            future.set_result(entry)
            return entry
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # waiters get it; nobody waiting is fine too
            raise
        finally:
            self._building.pop(key, None)

    def _put(self, key: tuple[str, int, str], entry: Encoded) -> None:
        for old in [k for k in self._items if k[0] == key[0] and k[1] < key[1]]:
            del self._items[old]  # a new version makes the run's older ones useless
        if len(entry.body) > self.max_bytes // 2:
            return
        self._items[key] = entry
        self.trim()

    @property
    def size(self) -> int:
        return sum(e.size for e in self._items.values())

    def trim(self) -> None:
        """Drop the least recently used entries until the bound holds (gzip included)."""
        total = self.size
        while total > self.max_bytes and self._items:
            _, dropped = self._items.popitem(last=False)
            total -= dropped.size


def epoch_ms(ts: dt.datetime) -> int:
    return int(ts.timestamp() * 1000)
