"""Server-sent events, per run and for all runs, resumable with ``Last-Event-ID``.

Each message has an ``id`` (increasing), an ``event`` (the kind: step_started,
step_done, usage_crossed, compressed, step_failed, decision, …) and JSON ``data``.

Runs executed anywhere (this server, the CLI, a worker on another host) show up live:
:func:`relay_store_changes` listens to the store's change feed for the server's whole
life and publishes a ``checkpoint`` event (version, status, node; ``source: feed``)
whenever a run's version or status moves, so a watcher re-reads the run. The feed
resyncs after losing its connection, so a run that moved meanwhile gets its event too.

Ids are microseconds since the epoch, so they keep increasing across server restarts.
A client resuming with ``Last-Event-ID`` gets what it missed from two places: what
happened before the server's memory begins (an earlier server process, or events the
2,000 kept ones have pushed out) comes from the store, as the runs recorded it: one
``checkpoint`` event per stored version and the entries of the run's event log
(decisions, rollback actions); the rest comes from memory, as it was sent live.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from tether.errors import RunNotFound, StoreError
from tether.runtime import Event
from tether.runtime.stream import EventBroadcaster, SubscriberOverflow
from tether.server.auth import ApiToken, check_run
from tether.server.deps import Events, Reader, Store
from tether.server.problems import PROBLEM_RESPONSES
from tether.state.reserved import runtime_get
from tether.stores.backend import remember
from tether.stores.base import CheckpointStore
from tether.stores.feed import Feed, open_feed

router = APIRouter(prefix="/api", tags=["events"], responses=PROBLEM_RESPONSES)
logger = logging.getLogger(__name__)

HEARTBEAT = 15.0
EPOCH_IDS = 10**15
"""Ids below this are not times this server gave out (``0``: "everything you have"):
those replay from memory only, never the whole store."""
REPLAY_RUNS = 50
"""Runs the all-runs stream replays from the store at most (the most recently updated)."""
REPLAY_EVENTS = 2_000
"""Stored events replayed at most on one reconnection (the latest ones)."""
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


def _micros(ts: dt.datetime) -> int:
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.UTC)
    return int(ts.timestamp() * 1_000_000)


def _log_entries(state: dict[str, Any]) -> list[Any]:
    log = runtime_get(state, "event_log")
    return log if isinstance(log, list) else []


async def _stored(store: CheckpointStore, run_id: str, after: int, before: int) -> list[tuple[int, Event]]:
    """A run's stored events with ids in ``(after, before)``: its versions and event log."""
    found: list[tuple[int, Event]] = []
    for cp in await store.history(run_id, limit=REPLAY_EVENTS):
        at = _micros(cp.timestamp)
        if at <= after:
            break  # newest first: the rest are older still
        if at < before:
            detail = {"version": cp.version, "status": str(cp.status), "node": cp.node_id}
            found.append(
                (
                    at,
                    Event(
                        kind="checkpoint",
                        run_id=run_id,
                        step=cp.node_id,
                        detail=detail,
                        ts=cp.timestamp.isoformat(),
                    ),
                )
            )
    latest = await store.load(run_id)
    for entry in _log_entries(latest.state) if latest is not None else []:
        try:
            ts = dt.datetime.fromisoformat(entry["ts"])
            at = _micros(ts)
            if after < at < before:
                kind, step, detail = str(entry["kind"]), entry.get("step"), dict(entry.get("detail") or {})
                found.append(
                    (at, Event(kind=kind, run_id=run_id, step=step, detail=detail, ts=ts.isoformat()))
                )
        except (KeyError, TypeError, ValueError):
            continue  # an entry of another shape: not an event
    return found


async def replay_stored(
    store: CheckpointStore, token: ApiToken, run_id: str | None, after: int, before: int
) -> list[tuple[int, Event]]:
    """Events between ``after`` and ``before`` (ids) as the store recorded them, in order,
    each with a distinct increasing id."""
    if run_id is not None:
        runs = [run_id]
    else:
        since = dt.datetime.fromtimestamp(after / 1_000_000, dt.UTC)
        runs = []
        for info in await store.list_runs(limit=REPLAY_RUNS):
            if info.updated_at.replace(tzinfo=info.updated_at.tzinfo or dt.UTC) <= since:
                break  # most recently updated first
            if token.owns(info.run_id):
                runs.append(info.run_id)
    found: list[tuple[int, Event]] = []
    for rid in runs:
        found += await _stored(store, rid, after, before)
    found.sort(key=lambda item: item[0])
    out: list[tuple[int, Event]] = []
    last = after
    for at, event in found[-REPLAY_EVENTS:]:
        last = max(last + 1, at)
        if last >= before:
            break  # the memory's ids start here
        out.append((last, event))
    return out


async def _stream(
    request: Request,
    events: EventBroadcaster,
    token: ApiToken,
    run_id: str | None,
    last_id: int | None,
    store: CheckpointStore,
) -> AsyncIterator[bytes]:
    yield b"retry: 2000\n\n"
    floor = events.floor
    if last_id is not None and EPOCH_IDS <= last_id < floor:
        for stored in await replay_stored(store, token, run_id, last_id, floor):
            yield _frame(*stored)
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
    store: Store,
    last_event_id: Annotated[str | None, Header(max_length=20)] = None,
    since: Annotated[int | None, Query(ge=0, alias="lastEventId")] = None,
) -> StreamingResponse:
    return StreamingResponse(
        _stream(request, events, token, None, _last(last_event_id, since), store),
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
        _stream(request, events, token, run_id, _last(last_event_id, since), store),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@contextlib.asynccontextmanager
async def relay_store_changes(
    store: CheckpointStore, events: EventBroadcaster, *, interval: float | None = None
) -> AsyncIterator[Feed]:
    """For the life of the block, publish a ``checkpoint`` event whenever the store says a
    run moved, whoever moved it (``interval``: the feed's, see ``open_feed``)."""
    async with open_feed(store, interval=interval) as feed:
        task = asyncio.create_task(_relay(store, events, feed), name="tether change relay")
        try:
            yield feed
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _relay(store: CheckpointStore, events: EventBroadcaster, feed: Feed) -> None:
    published: dict[str, tuple[int, str]] = {}
    async for change in feed:
        try:
            info = await store.get_run(change.run_id)  # the change says which run, not how
        except StoreError as exc:
            logger.warning("change relay: cannot read run %s: %s", change.run_id, exc)
            continue  # the feed's resync after the store comes back repeats it
        except Exception:
            logger.exception("change relay: reading run %s failed", change.run_id)
            continue
        if info is None:
            continue
        key = (info.version, str(info.status))
        if published.get(info.run_id) == key:
            continue  # several changes read as one version: one event
        remember(published, info.run_id, key)
        events.publish(
            Event(
                kind="checkpoint",
                run_id=info.run_id,
                step=info.node_id,
                detail={
                    "version": info.version,
                    "status": str(info.status),
                    "node": info.node_id,
                    "source": "feed",
                },
                ts=info.updated_at.isoformat(),
            )
        )
