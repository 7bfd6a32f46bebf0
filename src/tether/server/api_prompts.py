"""A run's model calls as the model saw them: per call the layers and token counts, the
exact messages, the diff to another call, and a replay of one call on the side.

The agent loop records each call as a delta against the call before (state key
``prompt_log``); these routes rebuild the messages from those records. A replay never
touches the run. It answers with a scripted reply given in the request, or with the
model the application holds in ``app.state.replay_model`` (none by default, so an open
dashboard cannot spend money on a provider).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from tether.agent.replay import load_records, pick_call, prompt_diff, replay_call, validate_messages
from tether.context.records import find_record
from tether.errors import ConfigError
from tether.server.auth import check_run
from tether.server.deps import Operator, Reader, Store, json_response
from tether.server.problems import PROBLEM_RESPONSES

router = APIRouter(prefix="/api/runs", tags=["prompts"], responses=PROBLEM_RESPONSES)


class CallSummary(BaseModel):
    index: int
    iteration: int | None
    provider: str | None
    model: str | None
    tokens: int
    budget: int | None
    layers: dict[str, int]
    messages: int
    usage: dict[str, int] | None
    reply: str
    ts: str | None


class PromptList(BaseModel):
    runId: str
    calls: list[CallSummary]


class PromptView(BaseModel):
    runId: str
    iteration: int | None
    provider: str | None
    model: str | None
    settings: dict[str, Any]
    tokens: int
    budget: int | None
    layers: dict[str, int]
    reply: str
    messages: list[dict[str, Any]]
    items: list[dict[str, Any]]


class PromptDiffView(BaseModel):
    before: int
    after: int
    entered: list[dict[str, Any]]
    left: list[dict[str, Any]]
    compressed: list[dict[str, Any]]
    changed: list[dict[str, Any]]
    kept: int
    tokensBefore: int
    tokensAfter: int


class ReplayRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    messages: list[dict[str, Any]] | None = Field(
        default=None, description="send these instead of the recorded messages (an edited prompt)"
    )
    reply: str | dict[str, Any] | None = Field(
        default=None, description="offline: the scripted model's reply (else the server's replay model)"
    )


class ReplayView(BaseModel):
    iteration: int | None
    edited: bool
    oldReply: str
    newReply: str
    model: str
    finishReason: str | None
    usage: dict[str, int] | None
    seconds: float


def _summary(index: int, record: dict[str, Any]) -> dict[str, Any]:
    reply = str(record.get("reply") or "")
    return {
        "index": index,
        "iteration": record.get("iteration"),
        "provider": record.get("provider"),
        "model": record.get("model"),
        "tokens": int(record.get("tokens") or 0),
        "budget": record.get("budget"),
        "layers": dict(record.get("layers") or {}),
        "messages": int(record.get("count") or 0),
        "usage": record.get("usage"),
        "reply": reply[:300],
        "ts": record.get("ts"),
    }


@router.get(
    "/{run_id}/prompts",
    response_model=PromptList,
    summary="Every recorded model call, with layers and tokens",
)
async def list_prompts(run_id: str, token: Reader, store: Store) -> Response:
    check_run(token, run_id)
    records = await load_records(store, run_id)
    return json_response({"runId": run_id, "calls": [_summary(i, dict(r)) for i, r in enumerate(records)]})


@router.get(
    "/{run_id}/prompts/{iteration}", response_model=PromptView, summary="The exact messages of one model call"
)
async def get_prompt(run_id: str, iteration: int, token: Reader, store: Store) -> Response:
    check_run(token, run_id)
    call = pick_call(await load_records(store, run_id), iteration)
    rec = call.record
    return json_response(
        {
            "runId": run_id,
            "iteration": call.iteration,
            "provider": rec.get("provider"),
            "model": rec.get("model"),
            "settings": rec.get("settings") or {},
            "tokens": int(rec.get("tokens") or 0),
            "budget": rec.get("budget"),
            "layers": rec.get("layers") or {},
            "reply": str(rec.get("reply") or ""),
            "messages": call.messages,
            "items": call.meta,
        }
    )


@router.get(
    "/{run_id}/prompts/{iteration}/diff",
    response_model=PromptDiffView,
    summary="What entered, left or was compressed since another call",
)
async def diff_prompt(
    run_id: str,
    iteration: int,
    token: Reader,
    store: Store,
    against: int | None = Query(default=None, description="the earlier iteration (default: the call before)"),
) -> Response:
    check_run(token, run_id)
    records = await load_records(store, run_id)
    if against is None:
        index = find_record(records, iteration)
        earlier = [r.get("iteration") for r in records[:index] if r.get("iteration") != iteration]
        if not earlier:
            raise ConfigError(f"iteration {iteration} is the run's first model call: nothing to compare with")
        against = int(earlier[-1])  # type: ignore[arg-type]
    return json_response(prompt_diff(records, against, iteration))


@router.post(
    "/{run_id}/prompts/{iteration}/replay",
    response_model=ReplayView,
    summary="Re-run one model call on the side (the run is not changed)",
)
async def replay_prompt(
    run_id: str, iteration: int, body: ReplayRequest, request: Request, token: Operator, store: Store
) -> Response:
    check_run(token, run_id)
    call = pick_call(await load_records(store, run_id), iteration)
    messages = validate_messages(body.messages) if body.messages is not None else None
    if body.reply is not None:
        from tether.models import ScriptedModel

        model: Any = ScriptedModel([body.reply], model=str(call.record.get("model") or "scripted"))
    else:
        model = getattr(request.app.state, "replay_model", None)
        if model is None:
            raise ConfigError(
                'this server has no replay model: send a scripted "reply", or set app.state.replay_model'
            )
    result = await replay_call(model, call, messages=messages)
    return json_response(result.to_dict())
