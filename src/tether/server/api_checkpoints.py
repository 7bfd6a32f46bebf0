"""Checkpoints: list, get one version, diff two, fork at one, roll back to one."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from tether.errors import RunNotFound, WrongRunStatus
from tether.runtime import Event
from tether.server.api_runs import RUN_ID, Accepted
from tether.server.auth import check_run
from tether.server.deps import Events, Exec, Operator, Reader, Store, epoch_ms, json_response
from tether.server.diff import diff_states
from tether.server.problems import PROBLEM_RESPONSES
from tether.state import RunStatus

MAX_VERSION = 2**63 - 1
"""Versions are 64-bit integers in every store: a larger number in a URL is a 422, not a
driver's overflow."""
Version = Annotated[int, Path(ge=1, le=MAX_VERSION, description="A version number of the run (1, 2, ...).")]

router = APIRouter(prefix="/api/runs", tags=["checkpoints"], responses=PROBLEM_RESPONSES)


class CheckpointLine(BaseModel):
    version: int
    nodeId: str | None
    status: str
    timestamp: dt.datetime
    kind: str
    size: int


class CheckpointPage(BaseModel):
    items: list[CheckpointLine]
    nextBefore: int | None


class CheckpointBody(BaseModel):
    version: int
    nodeId: str | None
    status: str
    stateData: dict[str, Any]
    executedNodeIds: list[str]
    timestamp: int
    metadata: dict[str, Any]


class StateDiff(BaseModel):
    fromVersion: int
    toVersion: int
    added: dict[str, Any]
    removed: list[str]
    changed: dict[str, Any]


class Fork(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")
    new_run_id: str = Field(alias="newRunId", pattern=RUN_ID)


@router.get("/{run_id}/checkpoints", response_model=CheckpointPage, summary="A run's versions, newest first")
async def list_checkpoints(
    run_id: str,
    token: Reader,
    store: Store,
    before: Annotated[int | None, Query(ge=1, le=MAX_VERSION)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> Response:
    check_run(token, run_id)
    if await store.get_run(run_id) is None:
        raise RunNotFound(run_id)
    lines = await store.history(run_id, before=before, limit=limit + 1)
    items = [
        {
            "version": h.version,
            "nodeId": h.node_id,
            "status": str(h.status),
            "timestamp": h.timestamp.isoformat(),
            "kind": h.kind,
            "size": h.size,
        }
        for h in lines[:limit]
    ]
    more = len(lines) > limit
    return json_response({"items": items, "nextBefore": items[-1]["version"] if more else None})


@router.get("/{run_id}/checkpoints/{version}", response_model=CheckpointBody, summary="One version's state")
async def get_checkpoint(run_id: str, version: Version, token: Reader, store: Store) -> Response:
    check_run(token, run_id)
    cp = await store.load(run_id, version)
    if cp is None:
        raise RunNotFound(run_id, version)
    return json_response(
        {
            "version": cp.version,
            "nodeId": cp.node_id,
            "status": str(cp.status),
            "stateData": cp.state,
            "executedNodeIds": list(cp.executed_node_ids),
            "timestamp": epoch_ms(cp.timestamp),
            "metadata": dict(cp.metadata),
        }
    )


@router.get("/{run_id}/diff", response_model=StateDiff, summary="What changed between two versions")
async def diff(
    run_id: str,
    token: Reader,
    store: Store,
    from_version: Annotated[int, Query(alias="from", ge=1, le=MAX_VERSION)],
    to_version: Annotated[int | None, Query(alias="to", ge=1, le=MAX_VERSION)] = None,
) -> Response:
    check_run(token, run_id)
    old = await store.load(run_id, from_version)
    if old is None:
        raise RunNotFound(run_id, from_version)
    new = await store.load(run_id, to_version)
    if new is None:
        raise RunNotFound(run_id, to_version)
    return json_response(
        {"fromVersion": old.version, "toVersion": new.version, **diff_states(old.state, new.state)}
    )


@router.post(
    "/{run_id}/checkpoints/{version}/fork",
    status_code=201,
    response_model=Accepted,
    summary="Copy the run at this version into a new run",
)
async def fork(
    run_id: str, version: Version, body: Fork, token: Operator, store: Store, events: Events
) -> Response:
    check_run(token, run_id)
    check_run(token, body.new_run_id)
    await store.copy(run_id, body.new_run_id, version=version)
    info = await store.get_run(body.new_run_id)
    events.publish(Event(kind="forked", run_id=body.new_run_id, detail={"from": run_id, "version": version}))
    status = str(info.status) if info else "PAUSED"
    return json_response({"runId": body.new_run_id, "status": status, "version": 1}, 201)


@router.post(
    "/{run_id}/checkpoints/{version}/rollback",
    response_model=Accepted,
    summary="Make this version the latest again (not while the run is executing)",
)
async def rollback(
    run_id: str, version: Version, token: Operator, store: Store, executor: Exec, events: Events
) -> Response:
    check_run(token, run_id)
    info = await store.get_run(run_id)
    if info is None:
        raise RunNotFound(run_id)
    if executor.executing(run_id) or info.status in (RunStatus.RUNNING, RunStatus.PENDING):
        raise WrongRunStatus(run_id, str(info.status), "roll back", "pause it first")
    new_version = await store.rollback(run_id, version)
    events.publish(Event(kind="rolled_back", run_id=run_id, detail={"to": version, "version": new_version}))
    return json_response({"runId": run_id, "status": str(info.status), "version": new_version})
