"""A run's failure: the report (text and JSON), the options and the step's own suggestions,
and the decision the run then takes in a server task (retry, skip, replan, takeover with a
note of what a person did by hand, or abort)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict

from tether.errors import ConfigError, RunNotFound
from tether.runtime import Decision, FailureReport
from tether.runtime.control import amend_pending_report
from tether.runtime.report import _OPTIONS
from tether.server.api_runs import Accepted
from tether.server.auth import check_run
from tether.server.deps import Exec, Operator, Reader, Store, json_response, per_version
from tether.server.problems import PROBLEM_RESPONSES
from tether.state.reserved import runtime_get

router = APIRouter(prefix="/api/runs", tags=["failures"], responses=PROBLEM_RESPONSES)


class Option(BaseModel):
    decision: str
    description: str


class FailureView(BaseModel):
    pending: bool
    report: dict[str, Any] | None
    text: str | None
    options: list[Option]


class DecisionBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    decision: Decision
    note: str | None = None
    """What the person deciding says; required for ``takeover`` (what they did by hand).
    Recorded in the run's event log and its execution history."""


@router.get("/{run_id}/failure", response_model=FailureView, summary="The run's last failure report")
async def failure(run_id: str, request: Request, token: Reader, store: Store, executor: Exec) -> Response:
    check_run(token, run_id)

    async def build() -> tuple[dict[str, Any], int]:
        cp = await store.load(run_id)
        if cp is None:
            raise RunNotFound(run_id)
        data = runtime_get(cp.state, "failure_report")
        pending = runtime_get(cp.state, "pending_decision")
        if not isinstance(data, dict):
            return {"pending": False, "report": None, "text": None, "options": []}, cp.version
        report = FailureReport.from_dict(data)
        can = executor.options(run_id, cp.state, [str(o) for o in report.options]) if pending else []
        options = [{"decision": o, "description": _OPTIONS[Decision(o)]} for o in can]
        if pending:  # the text lists what this server can do, as the options do
            report = replace(report, options=[Decision(o) for o in can])
        answer = {
            "pending": bool(pending),
            "report": report.to_dict(),
            "text": report.render(symbols=False),  # no emoji: a page may lack the font
            "options": options,
        }
        return answer, cp.version

    return await per_version(request, store, run_id, "failure", build)


@router.post(
    "/{run_id}/failure/decision",
    status_code=202,
    response_model=Accepted,
    summary="Decide on a pending failure; the run continues in a server task",
)
async def decide(run_id: str, body: DecisionBody, token: Operator, store: Store, executor: Exec) -> Response:
    check_run(token, run_id)
    note = (body.note or "").strip()
    if body.decision is Decision.TAKEOVER and not note:
        raise ConfigError("takeover needs a note: say what you did by hand, the run continues from it")
    if note and not await amend_pending_report(store, run_id, note=note):
        raise ConfigError(f"run {run_id!r} is not paused on a failure report: nothing to decide")
    await executor.resume(run_id, decision=str(body.decision))
    return json_response({"runId": run_id, "status": "RUNNING"}, 202)
