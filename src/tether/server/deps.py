"""Shared pieces of the routers: the store, the executor, JSON responses."""

from __future__ import annotations

import datetime as dt
from collections import OrderedDict
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


def _store(request: Request) -> CheckpointStore:
    store: CheckpointStore = request.app.state.store
    return store


def _executor(request: Request) -> Executor:
    executor: Executor = request.app.state.executor
    return executor


def _events(request: Request) -> EventBroadcaster:
    events: EventBroadcaster = request.app.state.events
    return events


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


class SnapshotCache:
    """Encoded snapshots by run, keyed by their ETag (version, status, executing).

    Many dashboards watching one big run ask for the same version again and again; a
    hot path (see benchmarks/README.md, "server"): one decode and encode per version
    instead of one per request. Bounded by total bytes, least recently used out first.
    """

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self._size = 0

    def get(self, run_id: str, tag: str) -> bytes | None:
        found = self._items.get(run_id)
        if found is None or found[0] != tag:
            return None
        self._items.move_to_end(run_id)
        return found[1]

    def put(self, run_id: str, tag: str, body: bytes) -> None:
        if len(body) > self.max_bytes // 2:
            return
        old = self._items.pop(run_id, None)
        if old is not None:
            self._size -= len(old[1])
        self._items[run_id] = (tag, body)
        self._size += len(body)
        while self._size > self.max_bytes:
            _, (_, dropped) = self._items.popitem(last=False)
            self._size -= len(dropped)


def epoch_ms(ts: dt.datetime) -> int:
    return int(ts.timestamp() * 1000)
