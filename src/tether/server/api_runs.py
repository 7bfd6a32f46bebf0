"""Runs: list, snapshot (read and update while PAUSED), start, pause, resume, cancel."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from tether.errors import RunNotFound, WrongRunStatus
from tether.runtime import Event
from tether.runtime.holders import Holder, held_by
from tether.server.auth import check_run
from tether.server.deps import (
    PACKERS,
    Encoded,
    Events,
    Exec,
    Operator,
    Reader,
    SnapshotCache,
    Store,
    body_response,
    encode,
    epoch_ms,
    incarnation,
    json_response,
    reducers,
)
from tether.server.diff import diff_states, diff_value
from tether.server.executor import Executor
from tether.server.problems import PROBLEM_RESPONSES
from tether.state import RunStatus
from tether.state.model import ExecutionContextSnapshot, RunInfo
from tether.state.reserved import runtime_get
from tether.stores.base import CheckpointStore

router = APIRouter(prefix="/api/runs", tags=["runs"], responses=PROBLEM_RESPONSES)

RUN_ID = r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}$"


class _Camel(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")


class HolderView(BaseModel):
    """The process that holds a RUNNING run's lease, wherever it runs."""

    owner: str
    host: str
    pid: int
    age: float | None = Field(description="seconds since the holder last renewed its lease")
    expiresIn: float = Field(description="seconds until the lease lapses unless renewed")


class RunSummary(BaseModel):
    runId: str
    status: str
    version: int
    nodeId: str | None
    createdAt: dt.datetime
    updatedAt: dt.datetime
    executing: bool
    holder: HolderView | None = Field(description="who executes it now (RUNNING runs only)")
    waitsFor: str | None = Field(
        default=None, description="what a PAUSED run waits on: decision, answer or approval (else null)"
    )
    pauseReason: str | None = Field(default=None, description="why a PAUSED run stopped, as recorded")


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


class SnapshotDelta(BaseModel):
    """What changed since the version a client holds (``226 IM Used``): the small fields in
    full, ``stateData`` and ``executionHistory`` as patches (the diff route's shape without
    the old values)."""

    fromVersion: int
    conversationId: str
    currentNodeId: str | None
    currentNodeName: str | None
    status: str
    stateData: dict[str, Any] = Field(description="keys added (values), removed (names), changed (patches)")
    executionHistory: dict[str, Any] = Field(
        description='{"op": "append", "appended": [...]} or {"op": "set", ...}'
    )
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


def summary(info: RunInfo, executing: bool, holder: Holder | None = None) -> dict[str, Any]:
    return {
        "runId": info.run_id,
        "status": str(info.status),
        "version": info.version,
        "nodeId": info.node_id,
        "createdAt": info.created_at.isoformat(),
        "updatedAt": info.updated_at.isoformat(),
        "executing": executing,
        "holder": holder_view(holder),
    }


async def _why_paused(store: CheckpointStore, run_id: str) -> dict[str, Any]:
    """What a paused run waits on and its recorded reason: the runs list's "why" column
    (one load per paused run on the page; running and finished runs need none)."""
    cp = await store.load(run_id)
    if cp is None:
        return {}
    state = cp.state
    pending = runtime_get(state, "pending_decision")
    if state.get("pending_approval"):
        waits = "approval"
    elif isinstance(pending, dict) and pending.get("options"):
        waits = "decision"
    elif state.get("pending_question"):
        waits = "answer"
    else:
        waits = None
    reason = runtime_get(state, "pause_reason")
    return {"waitsFor": waits, "pauseReason": reason if isinstance(reason, str) else None}


def holder_view(holder: Holder | None) -> dict[str, Any] | None:
    if holder is None:
        return None
    view = holder.to_dict()
    view["expiresIn"] = view.pop("expires_in")
    return view


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
        batch = await store.list_runs(
            status=status, limit=page, offset=at, updated_after=after, updated_before=before
        )
        for info in batch:
            if not token.owns(info.run_id):
                continue
            if skipped < offset:
                skipped += 1
                continue
            executing = executor.executing(info.run_id)
            shown, holder = await held_by(store, info)  # one load, RUNNING runs only
            if shown is not info.status and not executing:
                info = replace(info, status=shown)  # a dead holder: INTERRUPTED
            item = summary(info, executing, holder)
            if info.status is RunStatus.PAUSED and not executing:
                item.update(await _why_paused(store, info.run_id))
            wanted.append(item)
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


SNAKE = {
    "conversationId": "run_id",
    "currentNodeId": "current_node_id",
    "currentNodeName": "current_node_name",
    "stateData": "state_data",
    "executionHistory": "execution_history",
    "fromVersion": "from_version",
}


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
    return camel if keys == "camel" else {SNAKE.get(k, k): v for k, v in camel.items()}


def delta_dict(
    old_state: dict[str, Any], from_version: int, snap: ExecutionContextSnapshot, executing: bool, keys: str
) -> dict[str, Any]:
    """The snapshot as a patch over the one at ``from_version`` (whose state is ``old_state``)."""
    old_history = old_state.get("execution_history")
    camel = {
        "fromVersion": from_version,
        **snapshot_dict(snap, executing),
        "stateData": diff_states(old_state, snap.state, with_before=False),
        "executionHistory": diff_value(
            old_history if type(old_history) is list else [], snap.execution_history, with_before=False
        ),
    }
    return camel if keys == "camel" else {SNAKE.get(k, k): v for k, v in camel.items()}


DELTA_IM = "tether-diff"
"""The instance manipulation a client names in ``A-IM`` to get what changed (RFC 3229)."""


class _NoDelta(Exception):
    """The base version the client holds is gone or not older: it gets the full body."""


@router.get(
    "/{run_id}/snapshot",
    response_model=Snapshot,
    summary="A run's latest snapshot",
    responses={
        226: {
            "description": f"``A-IM: {DELTA_IM}`` with ``If-None-Match`` naming an older version: "
            "what changed since it (RFC 3229 delta)",
            "model": SnapshotDelta,
        },
        304: {"description": "unchanged since the ETag sent in If-None-Match"},
    },
)
async def get_snapshot(
    run_id: str,
    request: Request,
    token: Reader,
    store: Store,
    executor: Exec,
    keys: Literal["camel", "snake"] = "camel",
    a_im: Annotated[
        str | None,
        Header(
            alias="A-IM",
            description=f"``{DELTA_IM}``: answer 226 with what changed since the version named in "
            "If-None-Match, when the server still has it (else the full body)",
        ),
    ] = None,
) -> Response:
    check_run(token, run_id)
    return await answer_snapshot(
        request.app.state.snapshots, store, executor, run_id, keys, a_im, request.headers
    )


async def answer_snapshot(
    cache: SnapshotCache,
    store: CheckpointStore,
    executor: Executor,
    run_id: str,
    keys: str,
    a_im: str | None,
    headers_in: Mapping[str, str],
) -> Response:
    """The answer to a snapshot read by a caller already allowed to read ``run_id``: 304,
    a delta (226) or the full body, from bytes encoded once per version.

    Shared by the route and the fast path (``tether.server.fastpath``) so both answer
    alike; raises ``RunNotFound`` when the run does not exist.
    """
    info = await store.get_run(run_id)
    if info is None:
        raise RunNotFound(run_id)
    executing = executor.executing(run_id)
    born = incarnation(info)
    variant = f"{info.status}-{int(executing)}-{keys}-{born}"
    tag = f"{info.version}-{variant}"
    headers = {"Cache-Control": "no-cache", "Vary": "Accept-Encoding"}
    if_none_match = headers_in.get("if-none-match")
    wanted = negotiate(headers_in.get("accept-encoding", ""))
    matched = etag_matches(if_none_match, tag)
    if matched:
        headers["ETag"] = f'"{matched}"'  # the representation the client holds
        return Response(status_code=304, headers=headers)

    async def build() -> tuple[bytes, bool]:
        snap = await store.snapshot(run_id)
        if snap is None:
            raise RunNotFound(run_id)
        return encode(snapshot_dict(snap, executing, keys)), snap.version == info.version

    base = delta_base(if_none_match, keys, info.version, born) if wants_delta(a_im) else None
    if base is not None:
        from_version = base

        async def build_delta() -> tuple[bytes, bool]:
            old = await store.load(run_id, from_version)
            if old is None:
                raise _NoDelta
            snap = await store.snapshot(run_id)
            if snap is None:
                raise RunNotFound(run_id)
            body = encode(delta_dict(old.state, from_version, snap, executing, keys))
            return body, snap.version == info.version

        try:
            delta = await cache.fetch(run_id, info.version, f"{variant}<{from_version}", build_delta)
        except _NoDelta:
            pass
        else:
            body, coding = await pick_encoding(
                cache, delta, wanted, (run_id, info.version, f"{variant}<{from_version}")
            )
            headers.update({"ETag": f'"{tag}"', "IM": DELTA_IM, "Cache-Control": "no-store, im"})
            headers["Delta-Base"] = f'"{request_tag(if_none_match, from_version)}"'
            if coding != "identity":
                headers["Content-Encoding"] = coding
            return body_response(body, 226, headers)
    entry = await cache.fetch(run_id, info.version, variant, build)
    body, coding = await pick_encoding(cache, entry, wanted, (run_id, info.version, variant))
    headers["ETag"] = f'"{tag}{SUFFIX.get(coding, "")}"'
    if coding != "identity":
        headers["Content-Encoding"] = coding
    return body_response(body, 200, headers)


async def pick_encoding(
    cache: SnapshotCache, entry: Encoded, wanted: list[str], key: tuple[str, int, str]
) -> tuple[bytes, str]:
    """The body to send and its coding: the first of ``wanted`` that is ready (gzip is
    made and awaited; a slow coding is only started, and the next choice goes)."""
    if len(entry.body) < GZIP_MIN:
        return entry.body, "identity"
    for choice in wanted:
        if choice == "identity":
            break
        if choice == "gzip":
            body = await entry.gzipped()
            cache.trim()
            return body, choice
        ready = cache.packed_if_ready(*key, entry, choice)
        if ready is not None:  # else the next choice: never wait for a slow build
            return ready, choice
    return entry.body, "identity"


def wants_delta(a_im: str | None) -> bool:
    """Whether ``A-IM`` names the diff (names are compared without case; q=0 refuses)."""
    for part in (a_im or "").lower().split(","):
        name, _, params = part.strip().partition(";")
        if name.strip() != DELTA_IM:
            continue
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.strip() == "q":
                try:
                    return float(value) > 0.0
                except ValueError:
                    return False
        return True
    return False


def delta_base(header: str | None, keys: str, version: int, born: str) -> int | None:
    """The newest version older than ``version`` named in ``If-None-Match`` by one of this
    server's snapshot tags with the same key style, of the same run (not one deleted and
    created again under its id: ``born``), or None."""
    best = None
    for raw in (header or "").split(","):
        candidate = raw.strip().removeprefix("W/").strip('"')
        for suffix in SUFFIX.values():
            candidate = candidate.removesuffix(suffix)
        parts = candidate.split("-")
        if len(parts) != 5 or not parts[0].isdigit() or len(parts[0]) > 18 or parts[3:] != [keys, born]:
            continue
        found = int(parts[0])
        if 1 <= found < version and (best is None or found > best):
            best = found
    return best


def request_tag(if_none_match: str | None, version: int) -> str:
    """The tag in the request's ``If-None-Match`` that named ``version`` (the delta's base)."""
    for raw in (if_none_match or "").split(","):
        candidate = raw.strip().removeprefix("W/").strip('"')
        if candidate.split("-", 1)[0] == str(version):
            return candidate
    return str(version)


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
