"""What a stage is given and what it gives back: the contract between the engine and the
stage functions (``stages.py``, ``decisions.py``).

The engine reads the run's state once per stage into a :class:`StageInput`, calls one stage
function with it, and applies the :class:`StageOutcome` it returns (the state update, where
the run goes next, the events to publish, the metrics counters to add). A stage never sees
the engine nor the runtime's step context, so the data goes down once and comes back once,
and a stage can be called on its own (tests, benchmarks).

Also here: the helpers every stage shares (the state as an update will leave it, the
blackboard's rendered files, a role's prompt, request and call with its time limit).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.errors import InvalidStateValue
from tether.orchestrator.blackboard import Blackboard
from tether.orchestrator.config import OrchestratorConfig
from tether.orchestrator.history import add_lines, delta, history_of, last_decision, render_history
from tether.orchestrator.prompts import build_role_prompt, plan_counts, render_plan
from tether.orchestrator.roles import RoleOutput, RoleRequest, RoleRunner
from tether.orchestrator.summaries import SummaryStore
from tether.state.reducers import replayable

__all__ = [
    "LATEST",
    "REPORT_INDEX",
    "StageInput",
    "StageOutcome",
    "overlay",
    "render_board",
    "last_stage",
    "report_record",
    "role_prompt",
    "run_role",
    "verdicts_of",
]

APPENDED_KEYS = ("stage_changes", "warnings")
REPORTS_KEPT = 20
"""Report references ``report_index`` keeps per role: the last ones."""


def add_report(old: Any, update: Any) -> dict[str, Any]:
    """``latest``'s reducer. A stage's report is a :func:`report_record`, a short list that
    sets its role's entry: written as the entry's changed fields by name, each stage stored
    the names again. A dict merges entries by role (the sub-loop's exit, a run from before)."""
    latest = dict(old) if type(old) is dict else {}
    if type(update) is dict:
        latest.update(update)
        return latest
    if type(update) is not list or not 3 <= len(update) <= 6:
        raise InvalidStateValue(f"latest takes a report record or a dict, got {update!r}")
    role, iteration, verdict, *rest = update
    entry: dict[str, Any] = {
        "iteration": iteration,
        "verdict": verdict,
        "blockers": list(rest[0]) if rest else [],
        "subloop": rest[1] if len(rest) > 1 else 0,
    }
    if len(rest) > 2:
        entry["path"] = rest[2]
    latest[str(role)] = entry
    return latest


def report_record(role: str, entry: Mapping[str, Any]) -> list[Any]:
    """What a stage writes to ``latest`` for ``role``'s new ``entry`` (defaults at the end
    left out): ``[role, iteration, verdict, blockers, subloop, path]``."""
    out = [
        role,
        entry["iteration"],
        entry["verdict"],
        list(entry.get("blockers") or []),
        entry.get("subloop", 0),
    ]
    if entry.get("path"):
        return [*out, entry["path"]]
    while len(out) > 3 and not out[-1]:
        out.pop()
    return out


def add_reference(old: Any, update: Any) -> dict[str, Any]:
    """``report_index``'s reducer: ``[role, reference]`` adds a report to the role's last
    :data:`REPORTS_KEPT` (a stage writes the one reference, not the role's list again); a
    dict merges lists by role."""
    index = dict(old) if type(old) is dict else {}
    if type(update) is dict:
        index.update(update)
        return index
    if type(update) is not list or len(update) != 2:
        raise InvalidStateValue(f"report_index takes [role, reference] or a dict, got {update!r}")
    role, ref = update
    index[str(role)] = [*(index.get(role) or []), ref][-REPORTS_KEPT:]
    return index


LATEST = replayable("tether.orchestrator.stage:latest", add_report)
REPORT_INDEX = replayable("tether.orchestrator.stage:report_index", add_reference)
REDUCED = {"history": add_lines, "latest": add_report, "report_index": add_reference}
"""State keys whose stage updates are records their reducer folds in (see above)."""


RETIRED = ("last_decision", "last_stage", "verdicts")
"""Keys a run from before kept and its readers now derive (:func:`last_decision`,
:func:`last_stage`, :func:`verdicts_of`): the first stage after a resume clears them, as
they would no longer follow the run. (A sub-loop that exits before its step reported keeps
``last_stage`` for the stage after it, which clears it.)"""
STAGE_OF_STEP = {
    "main": "MAIN",
    "test": "TEST",
    "dev": "DEV",
    "review": "REVIEW",
    "finish_review": "FINISH_REVIEW",
    "finish_check": "FINISH_CHECK",
    "user": "USER",
    "subloop_dev": "DEV",
    "subloop_test": "TEST",
}


def last_stage(state: Mapping[str, Any]) -> str:
    """The stage that ran last (``MAIN``, ``TEST``, …): the last step the runtime's
    ``execution_history`` has done, rather than a key each stage rewrote (a run from before
    holds it as ``last_stage``)."""
    kept = state.get("last_stage")
    if kept:
        return str(kept)
    for entry in reversed(state.get("execution_history") or []):
        if (
            isinstance(entry, Mapping)
            and entry.get("status") == "done"
            and entry.get("node") in STAGE_OF_STEP
        ):
            return STAGE_OF_STEP[str(entry["node"])]
    return ""


def verdicts_of(state: Mapping[str, Any]) -> dict[str, str]:
    """Each role's latest verdict, read from its ``latest`` entry rather than kept as a key
    of its own that every stage rewrote (a run from before holds them as ``verdicts``)."""
    out = {str(k): str(v) for k, v in (state.get("verdicts") or {}).items()}
    for role, entry in (state.get("latest") or {}).items():
        if isinstance(entry, Mapping) and entry.get("verdict"):
            out[str(role)] = str(entry["verdict"])
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class StageInput:
    """What a stage reads: the state as the last checkpoint left it and where to work."""

    run_id: str
    step: str
    """The runtime step this stage runs as (``test``, ``subloop_dev``, …)."""
    state: Mapping[str, Any]
    board: Blackboard
    summaries: SummaryStore
    config: OrchestratorConfig
    takeover: str | None = None
    """A person's (or a probe's) note when they settled this step after a crash cut it."""

    @property
    def iteration(self) -> int:
        return int(self.state.get("iteration", 0) or 0)


@dataclass(slots=True, kw_only=True)
class StageOutcome:
    """What changed: the update the engine commits and what it does next."""

    update: dict[str, Any]
    goto: tuple[str, str] | None = None
    """(step, reason): the stage that runs next."""
    finish: tuple[str, str] | None = None
    """(status, reason): the run ends."""
    pause: str | None = None
    """The run pauses with this reason (``goto`` says what runs on resume)."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """``orchestrator`` events to publish: ``{"stage": ..., **detail}``."""
    counters: dict[str, int] | None = None
    """Metrics counters to add; None or empty leaves the metrics as they are until a stage
    that has some (MAIN's, every round), which adds the summary cache's counts since."""
    main_prompt: tuple[int, int] | None = None
    """(bytes, level) of MAIN's prompt, for the metrics."""
    waited: float = 0.0
    """Seconds spent in the role's or MAIN's call: the stage's time minus this is overhead."""


def overlay(state: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """The state as ``update`` will leave it once committed (merged, appended and reduced
    keys too)."""
    out = dict(state)
    for key, value in update.items():
        if key in REDUCED:
            out[key] = REDUCED[key](state.get(key), value)
        elif key in APPENDED_KEYS and isinstance(value, list):
            out[key] = [*(state.get(key) or []), *value]
        else:
            out[key] = value
    return out


def combine(state: Mapping[str, Any], first: Mapping[str, Any], then: Mapping[str, Any]) -> dict[str, Any]:
    """Two updates of one stage on ``state`` as one: appended keys appended, a reduced key
    written as the value both leave it at (the history: its entries that changed)."""
    out = {**first, **then}
    for key in APPENDED_KEYS:
        if key in first and key in then:
            out[key] = [*first[key], *then[key]]
    for key, fn in REDUCED.items():
        if key in first and key in then:
            out[key] = fn(fn(state.get(key), first[key]), then[key])
    if "history" in first and "history" in then:
        out["history"] = delta(state, out["history"])
    return out


def render_board(
    inp: StageInput,
    update: Mapping[str, Any],
    *,
    history: bool = True,
    final: bool = False,
    state: Mapping[str, Any] | None = None,
) -> None:
    """Rewrite dev_plan.md (when it changed) and, with ``history``, project_history.md and
    the summary cache, from the state being committed. Role stages skip the history: MAIN
    renders it before reading it (a hot path: see benchmarks/README.md)."""
    base = inp.state if state is None else state
    plan = update.get("dev_plan", base.get("dev_plan") or [])
    inp.board.write_if_changed("dev_plan.md", f"# dev_plan ({plan_counts(plan)})\n\n{render_plan(plan)}\n")
    if history:
        inp.board.write_if_changed("project_history.md", render_history(history_of(base, update)))
        inp.summaries.flush(every=1 if final else 5)


def role_prompt(inp: StageInput, role: str, **kw: Any) -> str:
    """A role's prompt from the state (MAIN's reason is its instruction outside the sub-loop)."""
    state = inp.state
    instruction = last_decision(state).get("reason", "") if not kw.get("subloop_round") else ""
    return build_role_prompt(
        inp.summaries,
        state,
        inp.config.prompts,
        role=role,
        iteration=inp.iteration,
        instruction=instruction,
        **kw,
    )


def role_request(inp: StageInput, role: str, prompt: str, path: Any, **kw: Any) -> RoleRequest:
    return RoleRequest(
        role=role,
        iteration=inp.iteration,
        prompt=prompt,
        workdir=inp.board.root,
        report_path=path,
        run_id=inp.run_id,
        **kw,
    )


async def run_role(runner: RoleRunner, request: RoleRequest, limit: float | None) -> tuple[RoleOutput, float]:
    """The role's output and the seconds it took; past ``limit`` a :class:`TimeoutError`."""
    began = time.perf_counter()
    if limit is None:
        return await runner.run(request), time.perf_counter() - began
    try:
        output = await asyncio.wait_for(runner.run(request), limit)
    except TimeoutError as exc:
        raise TimeoutError(f"{request.role} took longer than {limit:.0f}s") from exc
    return output, time.perf_counter() - began
