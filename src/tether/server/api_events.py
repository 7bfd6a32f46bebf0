"""Server-sent events, per run and for all runs, resumable with ``Last-Event-ID``.

Each message has an ``id`` (increasing), an ``event`` (the kind: step_started,
step_done, usage_crossed, compressed, step_failed, decision, …) and JSON ``data``.
The last 2,000 events are kept in memory for replay; after a server restart ids start
again, and the run's own event log (in its state) keeps its rollback actions and decisions.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from tether.errors import RunNotFound
from tether.runtime import Event
from tether.runtime.stream import EventBroadcaster, SubscriberOverflow
from tether.server.auth import ApiToken, check_run
from tether.server.deps import Events, Reader, Store
from tether.server.problems import PROBLEM_RESPONSES

router = APIRouter(prefix="/api", tags=["events"], responses=PROBLEM_RESPONSES)

HEARTBEAT = 15.0
_SSE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "a stream of server-sent events"}
}


def _frame(event_id: int, event: Event) -> bytes:
    data = orjson.dumps(
        {
            "id": event_id,
            "kind": event.kind,
            "runId": event.run_id,
            "step": event.step,
            "detail": event.detail,
            "ts": event.ts,
        },
        default=str,
    )
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (event_id, event.kind.encode(), data)


async def _stream(
    request: Request, events: EventBroadcaster, token: ApiToken, run_id: str | None, last_id: int | None
) -> AsyncIterator[bytes]:
    yield b"retry: 2000\n\n"
    try:
        async for item in events.watch(run_id=run_id, last_id=last_id, idle=HEARTBEAT):
            if item is None:
                if await request.is_disconnected():
                    return
                yield b": keep-alive\n\n"
            elif token.owns(item[1].run_id):
                yield _frame(*item)
    except SubscriberOverflow:
        return  # the client reconnects with Last-Event-ID and replays


def _last(header: str | None, query: int | None) -> int | None:
    if header is not None and header.strip().isdigit():
        return int(header.strip())
    return query


@router.get("/events", summary="Events of every run the token may see", responses=_SSE)
async def all_events(
    request: Request,
    token: Reader,
    events: Events,
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
    since: Annotated[int | None, Query(ge=0, alias="lastEventId")] = None,
) -> StreamingResponse:
    return StreamingResponse(
        _stream(request, events, token, None, _last(last_event_id, since)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get("/runs/{run_id}/events", summary="One run's events", responses=_SSE)
async def run_events(
    run_id: str,
    request: Request,
    token: Reader,
    events: Events,
    store: Store,
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
    since: Annotated[int | None, Query(ge=0, alias="lastEventId")] = None,
) -> StreamingResponse:
    check_run(token, run_id)
    if await store.get_run(run_id) is None:
        raise RunNotFound(run_id)
    return StreamingResponse(
        _stream(request, events, token, run_id, _last(last_event_id, since)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
