"""Workers: the processes executing runs now, wherever they run, each with its runs.

Derived from the leases of recently updated RUNNING runs (see
:mod:`tether.runtime.holders`: a bounded read), so a worker shows while it holds a run;
a run it holds that the token may not see is left out, and so is a worker left with none.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, Field

from tether.runtime.holders import live_workers
from tether.server.deps import Reader, Store, json_response
from tether.server.problems import PROBLEM_RESPONSES

router = APIRouter(prefix="/api/workers", tags=["workers"], responses=PROBLEM_RESPONSES)


class HeldRun(BaseModel):
    runId: str
    version: int
    nodeId: str | None
    age: float | None = Field(description="seconds since the holder last renewed this run's lease")
    expiresIn: float = Field(description="seconds until the lease lapses unless renewed")


class WorkerView(BaseModel):
    host: str
    pid: int
    owners: list[str] = Field(description="the runners inside the process")
    runs: list[HeldRun]


class WorkerList(BaseModel):
    items: list[WorkerView]
    complete: bool = Field(
        description="false when the reading stopped at the limit or its 2 s budget: "
        "holders of older RUNNING runs may be missing"
    )


@router.get("", response_model=WorkerList, summary="Live workers and the runs each holds")
async def workers(
    token: Reader,
    store: Store,
    limit: Annotated[
        int, Query(ge=1, le=1_000, description="RUNNING runs whose leases are read, newest first")
    ] = 200,
) -> Response:
    items = []
    found = await live_workers(store, limit=limit)
    for worker in found.workers:
        runs = [
            {
                "runId": r.run_id,
                "version": r.version,
                "nodeId": r.node_id,
                "age": r.holder.to_dict()["age"],
                "expiresIn": r.holder.to_dict()["expires_in"],
            }
            for r in worker.runs
            if token.owns(r.run_id)
        ]
        if runs:
            items.append(
                {"host": worker.host, "pid": worker.pid, "owners": list(worker.owners), "runs": runs}
            )
    return json_response({"items": items, "complete": found.complete})
