"""An orchestrator run as the dashboard shows it: the dev plan with item states, each role's
latest report (summary; the full text on demand), the sub-loop's round and result, and the
milestones (see :mod:`tether.orchestrator.view`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel

from tether.errors import RunNotFound
from tether.orchestrator.view import orchestration_view, report_text
from tether.server.auth import check_run
from tether.server.deps import Reader, Store, json_response, per_version
from tether.server.problems import PROBLEM_RESPONSES, problem

router = APIRouter(prefix="/api/runs", tags=["orchestrator"], responses=PROBLEM_RESPONSES)


class ReportText(BaseModel):
    role: str
    iteration: int
    path: str
    text: str


@router.get(
    "/{run_id}/orchestrator",
    response_model=dict[str, Any],
    summary="The orchestrator view of a run (orchestration: false for other runs)",
)
async def orchestrator(run_id: str, request: Request, token: Reader, store: Store) -> Response:
    check_run(token, run_id)

    async def build() -> tuple[dict[str, Any], int]:
        cp = await store.load(run_id)
        if cp is None:
            raise RunNotFound(run_id)
        return orchestration_view(cp.state), cp.version

    return await per_version(request, store, run_id, "orchestrator", build)


@router.get(
    "/{run_id}/orchestrator/reports/{role}",
    response_model=ReportText,
    summary="The full text of a role's latest report",
)
async def report(run_id: str, role: str, token: Reader, store: Store) -> Response:
    check_run(token, run_id)
    cp = await store.load(run_id)
    if cp is None:
        raise RunNotFound(run_id)
    found = report_text(cp.state, role)
    if found is None:
        detail = f"run {run_id!r} has no {role.upper()} report readable on this server"
        return problem(404, "report-not-found", "Report not found", detail)
    return json_response(found)
