"""Runs: list, snapshot (read and update while PAUSED), start, pause, resume, cancel."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import replace
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from tether.errors import RunNotFound, WrongRunStatus
from tether.runtime import Event
from tether.runtime.lease import live_status
from tether.server.auth import check_run
from tether.server.deps import (
    PACKERS,
    Events,
    Exec,
    Operator,
    Reader,
    SnapshotCache,
    Store,
    encode,
    epoch_ms,
    json_response,
    reducers,
)
from tether.server.problems import PROBLEM_RESPONSES
from tether.state import RunStatus
from tether.state.model import ExecutionContextSnapshot, RunInfo

router = APIRouter(prefix="/api/runs", tags=["runs"], responses=PROBLEM_RESPONSES)

RUN_ID = r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}$"


class _Camel(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")


class RunSummary(BaseModel):
    runId: str
    status: str
    version: int
    nodeId: str | None
    createdAt: dt.datetime
    updatedAt: dt.datetime
    executing: bool


class RunPage(BaseModel):
    items: list[RunSummary]
    limit: int
    offset: int
    nextOffset: int | None


class Snapshot(BaseModel):
    """A run as a human reviewing it sees it; ``?keys=snake`` gives snake_case keys."""

    conversationId: str
    currentNodeId: str | None
    currentNodeName: str | None
    status: str
    stateData: dict[str, Any]
    executionHistory: list[Any]
    timestamp: int = Field(description="milliseconds since the epoch")
    version: int
    executing: bool


class SnapshotUpdate(_Camel):
    node_id: str = Field(alias="nodeId", min_length=1, max_length=200)
    state_data: dict[str, Any] = Field(alias="stateData")


class StartRun(_Camel):
    workflow: str = Field(min_length=1, max_length=200)
    run_id: str | None = Field(default=None, alias="runId", pattern=RUN_ID)
    input: dict[str, Any] = Field(default_factory=dict)


class Accepted(BaseModel):
    runId: str
    status: str
    version: int | None = None


def summary(info: RunInfo, executing: bool) -> dict[str, Any]:
    return {
        "runId": info.run_id,
        "status": str(info.status),
        "version": info.version,
        "nodeId": info.node_id,
        "createdAt": info.created_at.isoformat(),
        "updatedAt": info.updated_at.isoformat(),
        "executing": executing,
    }


@router.get("", response_model=RunPage, summary="List runs, most recently updated first")
async def list_runs(
    token: Reader,
    store: Store,
    executor: Exec,
    status: RunStatus | None = None,
    updated_after: Annotated[dt.datetime | None, Query(alias="updatedAfter")] = None,
    updated_before: Annotated[dt.datetime | None, Query(alias="updatedBefore")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> Response:
    after = _aware(updated_after)
    before = _aware(updated_before)
    wanted: list[dict[str, Any]] = []
    skipped = 0
    page, at = 500, 0
    while len(wanted) <= limit:  # one extra tells whether there is a next page
        batch = await store.list_runs(status=status, limit=page, offset=at)
        for info in batch:
            if not token.owns(info.run_id):
                continue
            if after is not None and info.updated_at <= after:
                continue
            if before is not None and info.updated_at >= before:
                continue
            if skipped < offset:
                skipped += 1
                continue
            executing = executor.executing(info.run_id)
            if info.status is RunStatus.RUNNING and not executing:
                info = replace(info, status=await live_status(store, info))  # a dead holder: INTERRUPTED
            wanted.append(summary(info, executing))
            if len(wanted) > limit:
                break
        if len(batch) < page:
            break
        at += page
    more = len(wanted) > limit
    return json_response(
        {
            "items": wanted[:limit],
            "limit": limit,
            "offset": offset,
            "nextOffset": offset + limit if more else None,
        }
    )


def _aware(ts: dt.datetime | None) -> dt.datetime | None:
    if ts is not None and ts.tzinfo is None:
        return ts.replace(tzinfo=dt.UTC)
    return ts


@router.post("", status_code=202, response_model=Accepted, summary="Start a run of a registered workflow")
async def start_run(body: StartRun, token: Operator, executor: Exec) -> Response:
    run_id = body.run_id or f"{body.workflow}-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 100_000:05d}"
    if token.namespace is not None and not run_id.startswith(f"{token.namespace}:"):
        run_id = f"{token.namespace}:{run_id}" if body.run_id is None else run_id
    check_run(token, run_id)
    await executor.start(body.workflow, run_id, body.input)
    return json_response({"runId": run_id, "status": "RUNNING"}, 202)


def snapshot_dict(snap: ExecutionContextSnapshot, executing: bool, keys: str = "camel") -> dict[str, Any]:
    camel = {
        "conversationId": snap.run_id,
        "currentNodeId": snap.current_node_id,
        "currentNodeName": snap.current_node_name,
        "status": str(snap.status),
        "stateData": snap.state,
        "executionHistory": snap.execution_history,
        "timestamp": epoch_ms(snap.timestamp),
        "version": snap.version,
        "executing": executing,
    }
    if keys == "camel":
        return camel
    snake = {
        "conversationId": "run_id",
        "currentNodeId": "current_node_id",
        "currentNodeName": "current_node_name",
        "stateData": "state_data",
        "executionHistory": "execution_history",
    }
    return {snake.get(k, k): v for k, v in camel.items()}


@router.get(
    "/{run_id}/snapshot",
    response_model=Snapshot,
    summary="A run's latest snapshot",
    responses={304: {"description": "unchanged since the ETag sent in If-None-Match"}},
)
async def get_snapshot(
    run_id: str,
    request: Request,
    token: Reader,
    store: Store,
    executor: Exec,
    keys: Literal["camel", "snake"] = "camel",
) -> Response:
    check_run(token, run_id)
    info = await store.get_run(run_id)
    if info is None:
        raise RunNotFound(run_id)
    executing = executor.executing(run_id)
    variant = f"{info.status}-{int(executing)}-{keys}"
    tag = f"{info.version}-{variant}"
    headers = {"Cache-Control": "no-cache", "Vary": "Accept-Encoding"}
    wanted = negotiate(request.headers.get("accept-encoding", ""))
    matched = etag_matches(request.headers.get("if-none-match"), tag)
    if matched:
        headers["ETag"] = f'"{matched}"'  # the representation the client holds
        return Response(status_code=304, headers=headers)

    async def build() -> tuple[bytes, bool]:
        snap = await store.snapshot(run_id)
        if snap is None:
            raise RunNotFound(run_id)
        return encode(snapshot_dict(snap, executing, keys)), snap.version == info.version

    cache: SnapshotCache = request.app.state.snapshots
    entry = await cache.fetch(run_id, info.version, variant, build)
    body, coding = entry.body, "identity"
    if len(entry.body) >= GZIP_MIN:
        for choice in wanted:
            if choice == "identity":
                break
            if choice == "gzip":
                body, coding = await entry.gzipped(), choice
                cache.trim()
                break
            ready = cache.packed_if_ready(run_id, info.version, variant, entry, choice)
            if ready is not None:  # else the next choice: never wait for a slow build
                body, coding = ready, choice
                break
    headers["ETag"] = f'"{tag}{SUFFIX.get(coding, "")}"'
    if coding != "identity":
        headers["Content-Encoding"] = coding
    return Response(body, media_type="application/json", headers=headers)


GZIP_MIN = 1024
"""Smaller bodies go as they are: compressing them saves less than it costs."""

SUFFIX = {"gzip": "-gz", "zstd": "-zst"}
"""Each encoding's bytes have their own ETag (a strong tag names one byte sequence)."""

PREFERENCE = ("zstd", "gzip", "identity")
"""Among codings the client accepts equally: the smallest body first."""


def negotiate(header: str) -> list[str]:
    """The codings this server can send that ``Accept-Encoding`` allows, best first:
    higher q first, then smaller bodies. No header means identity (RFC 9110 lets a
    server pick any; clients without the header rarely decode anything). A ``q=0``
    refuses a coding; ``*`` stands for the codings not named."""
    offered = [c for c in PREFERENCE if c == "identity" or c in PACKERS]
    if not header.strip():
        return ["identity"]
    q: dict[str, float] = {}
    star: float | None = None
    for part in header.lower().split(","):
        name, _, params = part.strip().partition(";")
        name = name.strip()
        weight = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.strip() == "q":
                try:
                    weight = min(1.0, max(0.0, float(value)))
                except ValueError:
                    weight = 0.0
        if name == "*":
            star = weight
        elif name:
            q[name] = weight
    if "identity" not in q:
        q["identity"] = star if star is not None and star == 0.0 else 0.001  # acceptable, but last
    for coding in offered:
        if coding not in q and star is not None:
            q[coding] = star
    allowed = [c for c in offered if q.get(c, 0.0) > 0.0]
    return sorted(allowed, key=lambda c: (-q[c], PREFERENCE.index(c)))


def etag_matches(header: str | None, tag: str) -> str | None:
    """The tag in ``If-None-Match`` that names this version, whatever encoding it was
    received in (weak comparison, as RFC 9110 asks for If-None-Match), else None."""
    if not header:
        return None
    for raw in header.split(","):
        candidate = raw.strip().removeprefix("W/").strip('"')
        if candidate == "*":
            return tag
        if candidate == tag or candidate in {tag + s for s in SUFFIX.values()}:
            return candidate
    return None


@router.patch(
    "/{run_id}/snapshot",
    response_model=Accepted,
    summary="Merge state data into a PAUSED run through its reducers (409 otherwise)",
)
async def update_snapshot(
    run_id: str, body: SnapshotUpdate, token: Operator, store: Store, executor: Exec, events: Events
) -> Response:
    check_run(token, run_id)
    version = await store.update_state(
        run_id, body.state_data, reducers=reducers(executor), node_id=body.node_id
    )
    events.publish(
        Event(
            kind="state_updated", run_id=run_id, step=body.node_id, detail={"keys": sorted(body.state_data)}
        )
    )
    return json_response({"runId": run_id, "status": "PAUSED", "version": version})


@router.post(
    "/{run_id}/pause", status_code=202, response_model=Accepted, summary="Pause after the current step"
)
async def pause(run_id: str, token: Operator, executor: Exec) -> Response:
    check_run(token, run_id)
    return json_response({"runId": run_id, "status": await executor.stop(run_id, RunStatus.PAUSED)}, 202)


@router.post(
    "/{run_id}/cancel", status_code=202, response_model=Accepted, summary="Cancel after the current step"
)
async def cancel(run_id: str, token: Operator, executor: Exec) -> Response:
    check_run(token, run_id)
    return json_response({"runId": run_id, "status": await executor.stop(run_id, RunStatus.CANCELLED)}, 202)


@router.post("/{run_id}/resume", status_code=202, response_model=Accepted, summary="Resume in a server task")
async def resume(run_id: str, token: Operator, executor: Exec) -> Response:
    check_run(token, run_id)
    await executor.resume(run_id)
    return json_response({"runId": run_id, "status": "RUNNING"}, 202)


@router.delete("/{run_id}", status_code=204, summary="Delete a run, its checkpoints and its agent artefacts")
async def delete_run(run_id: str, token: Operator, store: Store, executor: Exec) -> Response:
    from tether.agent.config import delete_artifacts  # on use: the server loads the agent package only here

    check_run(token, run_id)
    if executor.executing(run_id):
        raise WrongRunStatus(run_id, "RUNNING", "delete", "cancel it first")
    found = await store.delete(run_id)
    delete_artifacts(store, run_id)  # also the leftovers of a run deleted without them
    if not found:
        raise RunNotFound(run_id)
    return Response(status_code=204)
