"""A run's context window: usage by layer against the 70/85/90% thresholds, and
compression with a preview first (nothing changes until ``apply`` is true)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from tether.context import ContextWindow, Layer, window_from_run_state
from tether.context.window import LAYER_TITLES
from tether.errors import ContextError, RunNotFound, RunNotPaused, VersionConflict
from tether.runtime import Event
from tether.runtime.context_hooks import WINDOW_KEY
from tether.server.auth import check_run
from tether.server.deps import Events, Exec, Operator, Reader, Store, json_response, per_version, reducers
from tether.server.problems import PROBLEM_RESPONSES
from tether.state import RunStatus

router = APIRouter(prefix="/api/runs", tags=["context"], responses=PROBLEM_RESPONSES)


class ItemView(BaseModel):
    id: str
    kind: str
    tokens: int
    pinned: bool
    phase: str | None
    preview: str


class LayerView(BaseModel):
    layer: int
    name: str
    tokens: int
    budget: int
    items: list[ItemView]


class ContextUsage(BaseModel):
    hasWindow: bool
    phases: list[str] = Field(
        default_factory=list, description="phases that items belong to (for level=phase)"
    )
    version: int
    tokens: int
    budget: int
    ratio: float
    level: Literal["ok", "warn", "standard", "deep"]
    thresholds: dict[str, float]
    layers: list[LayerView]


class CompressRequest(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")
    level: Literal["standard", "deep", "phase"] = "standard"
    phase: str | None = Field(default=None, max_length=200, description="for level=phase")
    apply: bool = Field(default=False, description="false: preview only")
    expected_version: int | None = Field(
        default=None, alias="expectedVersion", description="apply only if the run is still at this version"
    )


class CompressResult(BaseModel):
    applied: bool
    level: str
    beforeTokens: int
    afterTokens: int
    budget: int
    summarized: list[dict[str, Any]]
    dropped: list[dict[str, Any]]
    summary: str | None
    version: int


def _level(ratio: float, thresholds: dict[str, float]) -> str:
    for name in ("deep", "standard", "warn"):
        if ratio > thresholds[name]:
            return name
    return "ok"


async def _loaded(store: Any, run_id: str) -> tuple[ContextWindow | None, int, RunStatus, bool]:
    info = await store.get_run(run_id)
    cp = await store.load(run_id) if info is not None else None
    if info is None or cp is None:
        raise RunNotFound(run_id)
    logged = isinstance(cp.state.get("context_meta"), dict)
    return window_from_run_state(cp.state, WINDOW_KEY), cp.version, info.status, logged


async def _window(store: Any, run_id: str) -> tuple[ContextWindow | None, int, RunStatus]:
    window, version, status, _logged = await _loaded(store, run_id)
    return window, version, status


def _state_update(window: ContextWindow, before: set[str], logged: bool) -> dict[str, Any]:
    """What applying a compression writes: an agent run keeps its window as ``context_meta``
    plus a log of changes (the removals, then every item: right whether the run appends to
    its log or replaces it); other runs keep one window dict."""
    if not logged:
        return {WINDOW_KEY: window.to_state()}
    now = window.item_dicts()
    gone = [{"id": i, "removed": True} for i in sorted(before - {d["id"] for d in now})]
    return {"context_meta": window.meta_state(), "context_log": gone + now}


def _preview(item: Any) -> str:
    text = " ".join(str(item.content).split())
    return text[:160] + ("…" if len(text) > 160 else "")


@router.get("/{run_id}/context", response_model=ContextUsage, summary="Context usage by layer, with items")
async def context_usage(
    run_id: str, request: Request, token: Reader, store: Store, executor: Exec
) -> Response:
    check_run(token, run_id)

    async def build() -> tuple[dict[str, Any], int]:
        window, version, _status = await _window(store, run_id)
        return usage_dict(window, version, executor), version

    return await per_version(request, store, run_id, "context", build)


def usage_dict(window: ContextWindow | None, version: int, executor: Any) -> dict[str, Any]:
    """The usage answer for a window at ``version`` (the thresholds are the server's)."""
    th = executor.thresholds
    thresholds = {"warn": th.warn, "standard": th.standard, "deep": th.deep}
    if window is None:
        return {
            "hasWindow": False,
            "version": version,
            "tokens": 0,
            "budget": 0,
            "ratio": 0.0,
            "level": "ok",
            "thresholds": thresholds,
            "layers": [],
            "phases": [],
        }
    usage = window.usage()
    phases = sorted({str(i.phase) for i in window.items() if i.phase and i.kind != "todo"})
    layers = []
    for layer in Layer:
        lu = usage.layers[layer]
        items = [
            {
                "id": it.id,
                "kind": it.kind,
                "tokens": it.tokens,
                "pinned": it.pinned,
                "phase": it.phase,
                "preview": _preview(it),
            }
            for it in window.items(layer)
        ]
        layers.append(
            {
                "layer": int(layer),
                "name": LAYER_TITLES[layer],
                "tokens": lu.tokens,
                "budget": lu.budget,
                "items": items,
            }
        )
    return {
        "hasWindow": True,
        "version": version,
        "tokens": usage.tokens,
        "budget": usage.budget,
        "ratio": round(usage.ratio, 4),
        "level": _level(usage.ratio, thresholds),
        "thresholds": thresholds,
        "layers": layers,
        "phases": phases,
    }


@router.post(
    "/{run_id}/context/compress",
    response_model=CompressResult,
    summary="Preview a compression, or apply it to a PAUSED run",
)
async def compress(
    run_id: str, body: CompressRequest, token: Operator, store: Store, executor: Exec, events: Events
) -> Response:
    check_run(token, run_id)
    window, version, status, logged = await _loaded(store, run_id)
    if window is None:
        raise ContextError(f"run {run_id!r} keeps no context window (state key {WINDOW_KEY!r})")
    if body.apply:
        if executor.executing(run_id) or status is not RunStatus.PAUSED:
            raise RunNotPaused(run_id, "RUNNING" if executor.executing(run_id) else str(status))
        if body.expected_version is not None and body.expected_version != version:
            raise VersionConflict(run_id, expected=body.expected_version, actual=version)
    before = {it.id: it for it in window.items()}
    if body.level == "phase":
        if not body.phase:
            raise ContextError("level 'phase' needs the phase to fold (field 'phase')")
        if not any(i.phase == body.phase for i in window.items()):
            known = sorted({str(i.phase) for i in window.items() if i.phase})
            raise ContextError(
                f"no items of phase {body.phase!r} in the window; its phases: {known or 'none'}"
            )
        result = window.compress_phase(body.phase)
    else:
        result = window.compress(body.level)

    def described(ids: tuple[str, ...]) -> list[dict[str, Any]]:
        return [{"id": i, "kind": before[i].kind, "preview": _preview(before[i])} for i in ids if i in before]

    summary_item = window.get(result.summary_id) if result.summary_id else None
    new_version = version
    if body.apply:
        new_version = await store.update_state(
            run_id, _state_update(window, set(before), logged), reducers=reducers(executor)
        )
        events.publish(
            Event(
                kind="compressed",
                run_id=run_id,
                detail={"level": result.level, "before": result.before_tokens, "after": result.after_tokens},
            )
        )
    return json_response(
        {
            "applied": body.apply,
            "level": result.level,
            "beforeTokens": result.before_tokens,
            "afterTokens": result.after_tokens,
            "budget": window.budget,
            "summarized": described(result.summarized_ids),
            "dropped": described(result.dropped_ids),
            "summary": summary_item.content if summary_item is not None else None,
            "version": new_version,
        }
    )
