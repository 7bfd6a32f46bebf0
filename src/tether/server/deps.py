"""Shared pieces of the routers: the store, the executor, JSON responses."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

import orjson
from fastapi import Depends, Request, Response

from tether.runtime import runtime_reducers
from tether.runtime.stream import EventBroadcaster
from tether.server.auth import ApiToken, require
from tether.server.executor import Executor
from tether.state import ReducerRegistry
from tether.stores.base import CheckpointStore

__all__ = ["Admin", "Events", "Exec", "Operator", "Reader", "Store", "json_response", "reducers"]


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


def json_response(data: Any, status: int = 200) -> Response:
    """orjson straight to bytes: a 10 MB state is encoded once, without pydantic."""
    body = orjson.dumps(data, default=_default, option=orjson.OPT_NON_STR_KEYS)
    return Response(body, status_code=status, media_type="application/json")


def epoch_ms(ts: dt.datetime) -> int:
    return int(ts.timestamp() * 1000)
