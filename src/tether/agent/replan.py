"""Dynamic plan adjustment: when a plan step fails, or its result changes what should come
next, a replanner may revise the steps that remain.

A :class:`PlanReplanner` gets a :class:`ReplanRequest` (what triggered it, the steps done
with their summaries, the step that failed or just finished, the remaining steps, the
rolling execution summary) and returns the new remaining steps, or None to keep the plan.
:class:`ModelReplanner` asks a chat model (tests use the scripted model); the plan
orchestrator records every revision in the run's state (``plan``), so a resumed run keeps
the revised plan.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tether.errors import ModelOutputError
from tether.models.base import ChatModel
from tether.models.replies import parse_json_reply

__all__ = ["ModelReplanner", "PlanReplanner", "ReplanRequest", "plan_step_from", "render_request"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplanRequest:
    """What a replanner decides on."""

    trigger: Literal["failure", "step_done"]
    """``failure``: the step failed (a decision or a LOGIC failure asked for a re-plan);
    ``step_done``: it finished, and its outputs may change what comes next."""
    step: Any
    """The :class:`~tether.agent.plan.PlanStep` that failed or just finished."""
    position: int
    """Its 1-based position in the plan."""
    error: str = ""
    """Why it failed (``failure``)."""
    outputs: Mapping[str, Any] | None = None
    """Its StepOutputs as a dict (``step_done``)."""
    done: list[tuple[str, str]] = field(default_factory=list)
    """(name, summary) of each finished step, in order."""
    remaining: list[Any] = field(default_factory=list)
    """The PlanSteps after ``step`` (for ``failure``: ``step`` itself first)."""
    summary: str = ""
    """The rolling execution summary in its prompt form."""


PlanReplanner = Callable[[ReplanRequest], "list[Any] | None | Awaitable[list[Any] | None]"]
"""Returns the new remaining steps (PlanSteps or dicts), or None to keep the plan."""


def plan_step_from(data: Mapping[str, Any]) -> Any:
    """A PlanStep from a dict with ``name`` and ``goal`` (``category``, ``success_criteria``)."""
    from tether.agent.plan import PlanStep

    if not data.get("name") or not data.get("goal"):
        raise ModelOutputError(f'every step needs a "name" and a "goal": {dict(data)!r}'[:300])
    return PlanStep(
        name=str(data["name"]),
        goal=str(data["goal"]),
        category=str(data.get("category") or "general"),
        success_criteria=str(data.get("success_criteria") or ""),
    )


def render_request(request: ReplanRequest) -> str:
    """The request as the model reads it."""
    lines = [f"# Plan revision ({request.trigger})", "", request.summary.strip() or "(no summary yet)", ""]
    lines.append("## Steps done")
    lines += [f"- {name}: {summary}" for name, summary in request.done] or ["- none"]
    step = request.step
    if request.trigger == "failure":
        lines += ["", f"## Step {request.position} failed: {step.name}", f"Goal: {step.goal}"]
        lines.append(f"Error: {request.error}")
    else:
        shown = json.dumps(dict(request.outputs or {}), ensure_ascii=False, default=str)
        lines += ["", f"## Step {request.position} finished: {step.name}", f"Outputs: {shown}"]
    lines += ["", "## Remaining steps"]
    lines += [f"- {s.name} [{s.category}]: {s.goal}" for s in request.remaining] or ["- none"]
    return "\n".join(lines)


FORMAT = (
    'Answer with ONE JSON object: {"keep": true} to keep the remaining steps, or '
    '{"reason": "...", "steps": [{"name": "...", "goal": "...", "category": "...", '
    '"success_criteria": "..."}]} with the new remaining steps (they replace all of them'
    "; after a failure, the failed step too)."
)


class ModelReplanner:
    """A chat model revises the remaining steps; an invalid reply is sent back (up to 2 times).

    Args:
        model: the chat model (the plan's own, or another).
        after_steps: also ask after every successful step that has steps after it (each
            such step costs one model call); by default only failures are re-planned.
    """

    def __init__(self, model: ChatModel, *, after_steps: bool = False, retries: int = 2) -> None:
        self.model = model
        self.after_steps = after_steps
        self.retries = retries
        self.calls = 0

    async def __call__(self, request: ReplanRequest) -> list[Any] | None:
        if request.trigger == "step_done" and not self.after_steps:
            return None
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You revise deployment plans when reality differs from them."},
            {"role": "user", "content": render_request(request) + "\n\n" + FORMAT},
        ]
        for attempt in range(self.retries + 1):
            reply = await self.model.complete(messages, json_mode=True)
            self.calls += 1
            try:
                return _steps_of(parse_json_reply(reply.text))
            except ModelOutputError as exc:
                if attempt == self.retries:
                    raise ModelOutputError(f"the replanner gave no valid plan: {exc}") from exc
                messages += [
                    {"role": "assistant", "content": reply.text},
                    {"role": "user", "content": f"Invalid reply ({exc}). {FORMAT}"},
                ]
        raise AssertionError("unreachable")  # pragma: no cover


def _steps_of(data: Mapping[str, Any]) -> list[Any] | None:
    if data.get("keep") is True and "steps" not in data:
        return None
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps:
        raise ModelOutputError('"steps" must be a non-empty list (or answer {"keep": true})')
    return [plan_step_from(s) if isinstance(s, Mapping) else _bad(s) for s in steps]


def _bad(value: Any) -> Any:
    raise ModelOutputError(f"a step is an object with name and goal, not {value!r}"[:200])


async def ask(replanner: PlanReplanner, request: ReplanRequest) -> list[Any] | None:
    """Call ``replanner`` (sync or async) and turn dicts into PlanSteps."""
    out = replanner(request)
    if inspect.isawaitable(out):
        out = await out
    if out is None:
        return None
    return [plan_step_from(s) if isinstance(s, Mapping) else s for s in out]
