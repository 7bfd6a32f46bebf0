"""The plan orchestrator: a plan of steps, each run by the agent loop with the rolling
:class:`ExecutionSummary` and its predecessor's :class:`StepOutputs` in its prompt, each
finished by a ``step_done`` whose outputs are validated and folded into the summary.

The plan is a runtime workflow (one runtime step per plan step) and each plan step is
a nested agent run (``<run_id>.<step index>``), so both levels checkpoint, resume and
report failures the same way. A plan step whose agent fails raises :class:`DataError`,
which the runtime rolls back and reports (retry / skip / abort).

State keys of a plan run:

    plan_steps         one entry per finished step (append): step_id, step_name,
                       category, outputs, structured_outputs, run_id, done_at (and
                       phase_done when the step ended its phase): the only copy of what
                       each step handed on
    execution_summary  the rolling summary as of its ``folded_steps`` first entries of
                       ``plan_steps``; :func:`plan_summary` folds the entries after them
                       in. A step stores its outputs once, in its entry: the summary is
                       written whole only when the plan's last step finishes (and once
                       on a run whose summary has no ``folded_steps``), so the lines that
                       roll out of its capped lists are never stored (``fresh_summary``
                       keeps it current at every step instead)
    started_at         when the plan started (for the plan log)

When a run stops (completed, failed or paused) the plan log is written to
``<log_dir>/<run_id>.json`` (``version`` "2.0": steps with their structured outputs,
and the execution summary).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tether.agent.compaction import checkpoint_compaction
from tether.agent.loop import AgentLoop, LoopConfig
from tether.agent.replan import PlanReplanner, ReplanRequest, ask, plan_step_from
from tether.context.distill import step_outputs_from_commands
from tether.context.policy import ContextPolicy
from tether.context.summaries import ExecutionSummary, StepOutputs, SummaryManager, parse_step_outputs
from tether.errors import ConfigError
from tether.runtime import DataError, Event, LogicError, Runner, RunResult, Step, Workflow
from tether.runtime import StepContext as RuntimeStepContext
from tether.runtime.report import FailureReport
from tether.state import ExecutionContext, ReducerRegistry, RunStatus, default_registry, replayable
from tether.state.reserved import runtime_get
from tether.stores.base import CheckpointStore

__all__ = [
    "PLAN_LOG_VERSION",
    "PlanOrchestrator",
    "PlanStep",
    "StepContext",
    "StepExecutor",
    "StepResult",
    "attempt_runs",
    "nested_run_id",
    "nested_run_ids",
    "plan_reducers",
    "plan_summary",
    "step_prompt",
]

logger = logging.getLogger(__name__)

PLAN_LOG_VERSION = "2.0"

STEP_ROLE = "You are a deployment agent executing a specific deployment step."

STEP_DONE_INSTRUCTION = """When step is COMPLETE, you MUST provide:
{
  "action": "step_done",
  "outputs": {
    "summary": "REQUIRED: One sentence describing what was accomplished",
    "environment_changes": {"<name>": "<value>"},
    "new_configurations": {"<KEY>": "<value>"},
    "artifacts": ["<path of a key file you created>"],
    "services_started": [{"name": "<service>", "port": 0}],
    "custom_data": {},
    "issues_resolved": [{"issue": "<problem>", "resolution": "<how it was fixed>"}]
  }
}"""

ACTION_RULES = """Until then, answer every turn with ONE JSON object and nothing else:
  {"action": "execute", "command": "<one shell command>", "reasoning": "<why>"}
  {"action": "ask_user", "question": "...", "options": ["..."], "input_type": "choice|text|confirm|secret"}
  {"action": "failed", "message": "<why this step cannot be done>"}
Run non-interactive commands (-y, --no-input), never destructive ones; start long-running
services in the background and verify them; when a command fails, fix the cause.
An execute that changes the host may add "probe": a read-only command exiting 0 when its
effect is in place and 1 when not; after a crash it decides whether the command ran."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanStep:
    """One step of a plan, as the planner wrote it."""

    name: str
    goal: str
    category: str = "general"
    """Shown in the summary's completed actions as ``[CATEGORY]``."""
    success_criteria: str = ""


@dataclass(slots=True, kw_only=True)
class StepContext:
    """What a plan step is given: its own description plus what came before.

    Not the runtime's :class:`tether.runtime.StepContext` (one per runtime step): this
    one is the plan level's, built from the plan run's state before the step runs.
    """

    step_id: int
    """1-based position in the plan."""
    step_name: str
    goal: str
    category: str = "general"
    success_criteria: str = ""
    run_id: str = ""
    """The id of the nested run that executes this step (``<plan run id>.<step_id>``)."""
    structured_outputs: StepOutputs | None = None
    """This step's own outputs once it finished (None before)."""
    execution_summary: ExecutionSummary | None = None
    """The rolling summary of the steps before this one."""
    predecessor_outputs: dict[int, StepOutputs] = field(default_factory=dict)
    """The previous step's outputs by step id (empty for step 1)."""


@dataclass(slots=True, kw_only=True)
class StepResult:
    """How a plan step ended."""

    success: bool
    message: str = ""
    outputs: dict[str, Any] = field(default_factory=dict)
    """Free key/values (kept for callers that read plain dicts)."""
    structured_outputs: StepOutputs | None = None
    """What the step hands to the steps after it; merged into the rolling summary."""

    @classmethod
    def succeeded(
        cls,
        outputs: Mapping[str, Any] | None = None,
        structured_outputs: StepOutputs | None = None,
        *,
        message: str = "",
    ) -> StepResult:
        return cls(
            success=True,
            message=message,
            outputs=dict(outputs or {}),
            structured_outputs=structured_outputs,
        )

    @classmethod
    def failed(cls, message: str, outputs: Mapping[str, Any] | None = None) -> StepResult:
        return cls(success=False, message=message, outputs=dict(outputs or {}))


StepExecutor = Callable[[StepContext], Awaitable[StepResult]]
"""Runs one plan step; the default runs the agent loop as a nested durable run."""


def step_prompt(ctx: StepContext) -> str:
    """The system prompt of one plan step: role, the rolling summary (and the previous
    step's outputs), the step itself, and what ``step_done`` must carry."""
    summary = ctx.execution_summary or ExecutionSummary()
    state = summary.to_prompt_context()
    for step_id, outputs in sorted(ctx.predecessor_outputs.items()):
        shown = json.dumps(_non_empty(outputs.to_dict()), ensure_ascii=False, default=str)
        state += f"\n\n## Outputs of Step {step_id}\n{shown}"
    current = [f"- **Step {ctx.step_id}**: {ctx.step_name}", f"- **Goal**: {ctx.goal}"]
    if ctx.success_criteria:
        current.append(f"- **Success Criteria**: {ctx.success_criteria}")
    return "\n\n".join(
        [STEP_ROLE, state, "---", "# Current Step\n" + "\n".join(current), "---", STEP_DONE_INSTRUCTION]
    )


def _step_summary(entry: Mapping[str, Any]) -> str:
    outputs = entry.get("structured_outputs") or {}
    return str(outputs.get("summary") or (entry.get("outputs") or {}).get("message") or "done")


def _non_empty(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v not in ({}, [], "", None)}


# == the rolling summary as a reducer ===============================================
FOLDED = "folded_steps"
"""In ``execution_summary``: how many ``plan_steps`` entries it holds (absent: all of them,
as in runs stored before the summary was written only at the end)."""


def _reduce_summary(old: Any, update: Any) -> dict[str, Any]:
    """Fold ``{"step_name", "step_category", "outputs", "now"}`` into the summary; an
    update without ``outputs`` is a whole summary and replaces it (a human's edit, or the
    plan writing the summary it folded from its step log)."""
    if not isinstance(update, Mapping):
        raise ConfigError("an execution_summary update is a dict (a step's outputs or a whole summary)")
    if "outputs" not in update:
        return _with_folded(ExecutionSummary.from_dict(update), update.get(FOLDED))
    base = old if isinstance(old, Mapping) else {}
    manager = SummaryManager.from_state(base)
    manager.merge_step_outputs(
        str(update.get("step_name", "")),
        str(update.get("step_category", "")),
        parse_step_outputs(update["outputs"]),
        now=update.get("now"),
        phase_done=bool(update.get("phase_done")),  # phase compression (see docs/context.md)
    )
    folded = base.get(FOLDED)
    return _with_folded(manager.get_summary(), folded + 1 if isinstance(folded, int) else None)


def _with_folded(summary: ExecutionSummary, folded: Any) -> dict[str, Any]:
    data = summary.to_dict()
    if isinstance(folded, int) and not isinstance(folded, bool):
        data[FOLDED] = folded
    return data


SUMMARY_REDUCER = replayable("tether.agent.plan:execution_summary", _reduce_summary)
"""``SummaryManager.merge_step_outputs`` as the reducer of ``execution_summary``."""


def plan_reducers(base: ReducerRegistry | None = None) -> ReducerRegistry:
    """The reducers a plan run needs (register them on any run that keeps a summary)."""
    reg = (base or default_registry()).copy()
    return reg.register("execution_summary", SUMMARY_REDUCER).register("plan_steps", "append")


def summary_update(step: PlanStep, outputs: StepOutputs, *, phase_done: bool = False) -> dict[str, Any]:
    """The delta one step adds to ``execution_summary`` (``phase_done``: it ends its phase)."""
    return {
        "step_name": step.name,
        "step_category": step.category,
        "outputs": outputs.to_dict(),
        "now": _now(),
        "phase_done": phase_done,
    }


def _entries(state: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [e for e in state.get("plan_steps") or () if isinstance(e, Mapping)]


Fold = tuple[Any, int, Any, ExecutionSummary]
"""A summary folded from a run's step log: the stored summary it started from, how many
entries it holds, the last of them, and the summary."""


def _live(state: Mapping[str, Any], known: Fold | None = None) -> Fold:
    """The current summary of a plan run's state: the stored summary with the ``plan_steps``
    entries after its ``folded_steps`` folded in (from ``known``, an earlier fold of the
    same run, when the stored summary and its entries are still the ones it folded)."""
    data = state.get("execution_summary")
    data = data if isinstance(data, Mapping) else {}
    entries = _entries(state)
    folded = data.get(FOLDED)
    start = folded if isinstance(folded, int) and 0 <= folded <= len(entries) else len(entries)
    manager = SummaryManager.from_state(data)
    if known is not None:
        base, count, last, summary = known
        if (
            start <= count <= len(entries)
            and (base is data or base == data)
            and (count == start or entries[count - 1] == last)
        ):
            manager, start = SummaryManager(summary=summary), count
    for entry in entries[start:]:
        outputs = entry.get("structured_outputs")
        if not outputs:
            continue
        manager.merge_step_outputs(
            str(entry.get("step_name") or ""),
            str(entry.get("category") or ""),
            parse_step_outputs(outputs),
            now=str(entry.get("done_at") or data.get("last_updated") or ""),
            phase_done=bool(entry.get("phase_done")),
            warn=False,  # its step logged it when it was folded first
        )
    return data, len(entries), entries[-1] if entries else None, manager.get_summary()


def plan_summary(state: Mapping[str, Any]) -> dict[str, Any]:
    """A plan run's current ``execution_summary`` (with ``folded_steps``), whatever it
    stored: the stored one is written whole only when the plan ends (see the module
    docstring), so a reader of a run in progress folds the step log's newer entries in."""
    _, folded, _, summary = _live(state)
    return _with_folded(summary, folded)


def _current(result: RunResult) -> RunResult:
    """``result`` with its state's summary brought up to date (a run that stopped before
    its last step, paused or failed, stored it as of an earlier step)."""
    data = result.state.get("execution_summary")
    done = len(_entries(result.state))
    if not isinstance(data, Mapping) or data.get(FOLDED, done) == done:
        return result
    return replace(result, state={**result.state, "execution_summary": plan_summary(result.state)})


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


# == the orchestrator ================================================================
REVISED = "plan revised after a step: continuing with the new steps"
"""The pause reason of a success-time revision (the orchestrator continues at once)."""


def nested_run_id(run_id: str, step_id: str) -> str:
    """The nested agent run of a plan step: ``<run>.3`` for ``step-3``, ``<run>.3r1`` for the
    ``step-3-r1`` a first revision added."""
    return f"{run_id}.{step_id.removeprefix('step-').replace('-', '')}"


def nested_run_ids(state: Mapping[str, Any], run_id: str, steps: int = 0) -> list[str]:
    """Every plan step's nested run id, revisions included (``steps``: the original count, for
    a run stored before plans were recorded in the state)."""
    plan = state.get("plan") if isinstance(state.get("plan"), Mapping) else None
    ids = [str(e["id"]) for e in plan.get("steps") or ()] if plan else []
    ids += [f"step-{i}" for i in range(1, steps + 1)]
    return list(dict.fromkeys(nested_run_id(run_id, sid) for sid in ids))


async def attempt_runs(store: CheckpointStore, nested: str) -> list[str]:
    """The nested runs of one plan step, oldest first: ``<run>.3``, then ``<run>.3-2``, … (a
    retried step whose agent ended FAILED runs again as a fresh attempt)."""
    runs = [nested]
    while await store.get_run(f"{nested}-{len(runs) + 1}") is not None:
        runs.append(f"{nested}-{len(runs) + 1}")
    return runs


def _plan_state(revision: int, entries: list[tuple[str, PlanStep]]) -> dict[str, Any]:
    steps = [
        {
            "id": sid,
            "name": s.name,
            "goal": s.goal,
            "category": s.category,
            "success_criteria": s.success_criteria,
        }
        for sid, s in entries
    ]
    return {"revision": revision, "steps": steps}


@dataclass(slots=True, kw_only=True)
class PlanOrchestrator:
    """Runs a plan durably.

    Give either ``loop_factory`` (builds the agent loop of each step from its
    :class:`LoopConfig`: model, session, store…) or a custom ``step_executor``. With a
    ``replanner``, a failed step's report offers ``replan`` (and a successful step may revise
    the steps after it): see :mod:`tether.agent.replan`.
    """

    store: CheckpointStore
    steps: list[PlanStep]
    loop_factory: Callable[[LoopConfig], AgentLoop] | None = None
    step_executor: StepExecutor | None = None
    project_name: str = ""
    deploy_dir: str = ""
    strategy: str = ""
    base_config: LoopConfig = field(default_factory=LoopConfig)
    log_dir: str | Path | None = "agent_logs"
    """Where the plan log goes (``<run_id>.json``); None writes none."""
    on_event: Callable[[Event], None] | None = None
    current_log_file: Path | None = None
    replanner: PlanReplanner | None = None
    """Revises the remaining steps after a failure (the ``replan`` decision) or a step's result."""
    replan_failures: bool = False
    """Re-plan a failed step at once (a LOGIC failure) instead of pausing with its report."""
    checkpoint_compression: bool = True
    """After each step's checkpoint, compress what precedes it in the context window the
    plan run's state keeps (``context_window``); each step's own agent loop follows
    ``base_config.checkpoint_compression``."""
    context_policy: ContextPolicy = field(default_factory=ContextPolicy)
    fresh_summary: bool = False
    """Fold each step's outputs into the stored ``execution_summary`` at every step, for
    readers of a running plan's raw state: each step then stores its outputs twice (its
    ``plan_steps`` entry and the summary's fold) and the summary's capped lists store every
    line that rolls out of them. By default the summary is stored when the plan ends and
    :func:`plan_summary` (the step prompts, the plan log, ``start``/``resume`` results)
    folds the newer steps in."""
    _fold: tuple[str, Fold] | None = field(default=None, init=False, repr=False)
    """The run whose summary was folded last, and that fold (see ``_summary``)."""

    def __post_init__(self) -> None:
        if self.loop_factory is None and self.step_executor is None:
            raise ConfigError("PlanOrchestrator needs loop_factory= (agent steps) or step_executor=")
        if not self.steps:
            raise ConfigError("a plan needs at least one step")

    def entries(self, state: Mapping[str, Any] | None = None) -> list[tuple[str, PlanStep]]:
        """(runtime step id, step) of the plan a run follows: its latest revision, else ``steps``."""
        plan = (state or {}).get("plan")
        if isinstance(plan, Mapping) and plan.get("steps"):
            return [(str(e["id"]), plan_step_from(e)) for e in plan["steps"]]
        return [(f"step-{i}", s) for i, s in enumerate(self.steps, 1)]

    def workflow(self, entries: list[tuple[str, PlanStep]] | None = None) -> Workflow:
        entries = entries or self.entries()
        return Workflow.plan(self._steps(entries, entries), name="plan")

    def _steps(self, chosen: list[tuple[str, PlanStep]], entries: list[tuple[str, PlanStep]]) -> list[Step]:
        position = {sid: i for i, (sid, _) in enumerate(entries, 1)}
        return [
            Step(id=sid, name=s.name, fn=self._make(position[sid], s, entries), phase=s.category)
            for sid, s in chosen
        ]

    def runner(self, entries: list[tuple[str, PlanStep]] | None = None) -> Runner:
        return Runner(
            self.workflow(entries),
            self.store,
            reducers=plan_reducers(),
            on_event=self.on_event,
            replan=self._replan if self.replanner is not None else None,
            on_checkpoint=checkpoint_compaction(self.context_policy, on_event=self.on_event)
            if self.checkpoint_compression
            else None,
        )

    async def start(self, run_id: str, *, origin: Mapping[str, Any] | None = None) -> RunResult:
        """Start the plan; ``origin`` is recorded as ``_origin`` (what ``tether resume`` reads)."""
        manager = SummaryManager(self.project_name, self.deploy_dir, self.strategy)
        inputs: dict[str, Any] = {
            "execution_summary": {**manager.to_state(), FOLDED: 0},
            "started_at": _now(),
            "plan": _plan_state(0, self.entries()),
        }
        if origin is not None:
            inputs["_origin"] = dict(origin)
        result = _current(await self._continue(await self.runner().start(run_id, inputs)))
        self.write_log(result)
        return result

    async def resume(self, run_id: str, *, decision: str | None = None) -> RunResult:
        cp = await self.store.load(run_id)
        entries = self.entries(cp.state if cp is not None else None)
        result = _current(await self._continue(await self.runner(entries).resume(run_id, decision=decision)))
        self.write_log(result)
        return result

    async def _continue(self, result: RunResult) -> RunResult:
        """A run paused by a success-time revision goes on at once, on its revised plan."""
        while result.status is RunStatus.PAUSED and runtime_get(result.state, "pause_reason") == REVISED:
            runner = self.runner(self.entries(result.state))
            result = await runner.resume(result.run_id)
        return result

    # -- re-planning ---------------------------------------------------------------
    def _request(
        self,
        state: Mapping[str, Any],
        entries: list[tuple[str, PlanStep]],
        index: int,
        run_id: str,
        **kw: Any,
    ) -> ReplanRequest:
        done = [(str(e.get("step_name")), _step_summary(e)) for e in state.get("plan_steps") or ()]
        summary = self._summary(state, run_id).to_prompt_context()
        start = index - 1 if kw.get("trigger") == "failure" else index
        return ReplanRequest(
            step=entries[index - 1][1],
            position=index,
            done=done,
            remaining=[s for _, s in entries[start:]],
            summary=summary,
            **kw,
        )

    async def _replan(self, report: FailureReport, ctx: ExecutionContext) -> list[Step] | None:
        """The runner's re-planner: the failed step and those after it, as the replanner revises them."""
        assert self.replanner is not None
        state = ctx.snapshot()
        entries = self.entries(state)
        ids = [sid for sid, _ in entries]
        if report.item_id not in ids:
            return None
        index = ids.index(report.item_id) + 1
        request = self._request(state, entries, index, ctx.run_id, trigger="failure", error=report.error)
        new = await ask(self.replanner, request)
        if not new:
            return None
        executed = set(ctx.executed_node_ids)
        kept = [(sid, s) for sid, s in entries if sid in executed]
        plan = self._revise(state, kept, new)
        ctx.merge({"plan": plan})
        revised = self.entries({"plan": plan})
        logger.info("plan revised after %s failed: %d new steps", report.item_id, len(new))
        return self._chained(revised, len(kept))

    def _revise(
        self, state: Mapping[str, Any], kept: list[tuple[str, PlanStep]], new: list[PlanStep]
    ) -> dict[str, Any]:
        revision = int((state.get("plan") or {}).get("revision") or 0) + 1
        fresh = [(f"step-{len(kept) + i}-r{revision}", s) for i, s in enumerate(new, 1)]
        return _plan_state(revision, kept + fresh)

    def _chained(self, entries: list[tuple[str, PlanStep]], kept: int) -> list[Step]:
        """The runtime steps of ``entries[kept:]``, each after the one before it."""
        steps = self._steps(entries[kept:], entries)
        previous = entries[kept - 1][0] if kept else None
        chained = []
        for step in steps:
            chained.append(replace(step, deps=(previous,) if previous else ()))
            previous = step.id
        return chained

    # -- one step ------------------------------------------------------------------
    def _summary(self, state: Mapping[str, Any], run_id: str) -> ExecutionSummary:
        """The run's current summary, folding only the entries this orchestrator has not
        folded yet (a plan of N steps would otherwise fold N * N / 2 entries)."""
        known = self._fold[1] if self._fold is not None and self._fold[0] == run_id else None
        fold = _live(state, known)
        self._fold = (run_id, fold)
        return fold[3]

    def step_context(
        self, index: int, plan_step: PlanStep, state: Mapping[str, Any], run_id: str, step_id: str = ""
    ) -> StepContext:
        """Step N's context: the rolling summary plus step N-1's outputs."""
        done = {int(e["step_id"]): e for e in state.get("plan_steps") or () if isinstance(e, Mapping)}
        previous = done.get(index - 1)
        predecessors = (
            {index - 1: parse_step_outputs(previous.get("structured_outputs"))}
            if previous is not None and previous.get("structured_outputs")
            else {}
        )
        return StepContext(
            step_id=index,
            step_name=plan_step.name,
            goal=plan_step.goal,
            category=plan_step.category,
            success_criteria=plan_step.success_criteria,
            run_id=nested_run_id(run_id, step_id or f"step-{index}"),
            execution_summary=self._summary(state, run_id),
            predecessor_outputs=predecessors,
        )

    def _make(
        self, index: int, plan_step: PlanStep, entries: list[tuple[str, PlanStep]]
    ) -> Callable[[RuntimeStepContext], Any]:
        step_id = entries[index - 1][0]

        async def run_step(sc: RuntimeStepContext) -> Mapping[str, Any]:
            state = {k: sc.get(k) for k in ("plan_steps", "execution_summary", "plan")}
            ctx = self.step_context(index, plan_step, state, sc.run_id, step_id)
            execute = self.step_executor or self._agent_step
            result = await execute(ctx)
            if not result.success:
                error = LogicError if self.replan_failures and self.replanner is not None else DataError
                raise error(
                    f"plan step {plan_step.name!r} did not complete: {result.message or 'no message'}"
                )
            ctx.structured_outputs = outputs = result.structured_outputs
            entry = {
                "step_id": index,
                "step_name": plan_step.name,
                "category": plan_step.category,
                "outputs": result.outputs,
                "structured_outputs": outputs.to_dict() if outputs else None,
                "run_id": ctx.run_id,
                "done_at": _now(),
            }
            ends = index == len(entries) or entries[index][1].category != plan_step.category
            if outputs is not None and ends and self.base_config.phase_compression:
                entry["phase_done"] = True
            update: dict[str, Any] = {"plan_steps": [entry]}
            summary = self._summary_write(state, plan_step, ctx, entry, last=index == len(entries))
            if summary is not None:
                update["execution_summary"] = summary
            if self.replanner is not None and index < len(entries):
                done_state = {**state, "plan_steps": [*(state.get("plan_steps") or []), entry]}
                request = self._request(
                    done_state,
                    entries,
                    index,
                    sc.run_id,
                    trigger="step_done",
                    outputs=entry["structured_outputs"] or {},
                )
                new = await ask(self.replanner, request)
                if new:
                    kept = entries[:index]
                    update["plan"] = self._revise(state, kept, new)
                    sc.pause(REVISED)
                    logger.info("plan revised after step %d: %d new steps", index, len(new))
            logger.info("plan step %d %s done", index, plan_step.name, extra={"run_id": sc.run_id})
            return update

        return run_step

    def _summary_write(
        self,
        state: Mapping[str, Any],
        step: PlanStep,
        ctx: StepContext,
        entry: Mapping[str, Any],
        *,
        last: bool,
    ) -> dict[str, Any] | None:
        """What a finished step writes to ``execution_summary``: by default nothing (its
        ``plan_steps`` entry is the only copy of its outputs), the whole summary when the
        plan ends or the stored one says no ``folded_steps`` (a run stored before, a human's
        edit: it is taken as holding the entries there are); with ``fresh_summary``, the
        step's fold (or the whole summary, when the stored one is behind the step log)."""
        data = state.get("execution_summary")
        folded = data.get(FOLDED) if isinstance(data, Mapping) else None
        done = len(_entries(state))
        outputs = ctx.structured_outputs
        phase_done = bool(entry.get("phase_done"))
        if self.fresh_summary and outputs is not None and folded in (None, done):
            fold = summary_update(step, outputs, phase_done=phase_done)  # (its reducer warns)
            return {**fold, "now": entry["done_at"]}
        after = ctx.execution_summary or ExecutionSummary()
        if outputs is not None:  # (folded even when not stored: a summary growing past its caps warns once)
            manager = SummaryManager(summary=after)
            after = manager.merge_step_outputs(
                step.name, step.category, outputs, now=str(entry["done_at"]), phase_done=phase_done
            )
        if last or self.fresh_summary or not isinstance(folded, int):
            return _with_folded(after, done + 1)
        return None

    async def _agent_step(self, ctx: StepContext) -> StepResult:
        """The default executor: the agent loop as the nested run ``ctx.run_id``."""
        assert self.loop_factory is not None
        config = replace(self.base_config, system_prompt=step_prompt(ctx) + "\n\n" + ACTION_RULES)
        loop = self.loop_factory(config)
        runs = await attempt_runs(self.store, ctx.run_id)
        nested = runs[-1]
        info = await self.store.get_run(nested)
        if info is not None and info.status in (RunStatus.FAILED, RunStatus.CANCELLED):
            nested, info = f"{ctx.run_id}-{len(runs) + 1}", None  # a retry: a fresh attempt
        ctx.run_id = nested
        if info is None:
            result = await loop.start(nested, ctx.goal)
        elif info.status is RunStatus.COMPLETED:  # finished before a crash of the plan
            cp = await self.store.load(nested)
            assert cp is not None
            result = RunResult(run_id=nested, status=info.status, version=cp.version, state=cp.state)
        else:
            result = await loop.resume(nested)
        message = str(result.state.get("final_output") or "")
        if (
            result.status is not RunStatus.COMPLETED
        ):  # the nested run's report says why (a command a crash cut…)
            why = f": {result.report.error}" if result.report is not None else ""
            return StepResult.failed(f"{message or 'no message'} ({result.status}{why})")
        raw = result.state.get("step_outputs")
        if raw:
            structured = parse_step_outputs(raw, fallback_summary=message or "Step completed")
        else:  # no step_done outputs: read them from what the step's commands did
            structured = step_outputs_from_commands(
                result.state.get("command_history") or [], summary=message or "Step completed"
            )
        return StepResult.succeeded(
            outputs={"message": message, **(raw if isinstance(raw, Mapping) else {})},
            structured_outputs=structured,
            message=message,
        )

    # -- the plan log ----------------------------------------------------------------
    def plan_log(self, result: RunResult) -> dict[str, Any]:
        """The plan log of a run as it stands (see the module docstring)."""
        state = result.state
        status = {RunStatus.COMPLETED: "success", RunStatus.FAILED: "failed"}.get(
            result.status, str(result.status).lower()
        )
        return {
            "version": PLAN_LOG_VERSION,
            "run_id": result.run_id,
            "project_name": self.project_name,
            "deploy_dir": self.deploy_dir,
            "strategy": self.strategy,
            "start_time": state.get("started_at"),
            "end_time": _now(),
            "status": status,
            "steps": [
                {k: e.get(k) for k in ("step_id", "step_name", "outputs", "structured_outputs")}
                for e in state.get("plan_steps") or ()
            ],
            "execution_summary": plan_summary(state),
        }

    def write_log(self, result: RunResult) -> Path | None:
        if self.log_dir is None:
            return None
        path = Path(self.log_dir) / f"{result.run_id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(self.plan_log(result), indent=2, ensure_ascii=False, default=str), encoding="utf-8"
        )
        self.current_log_file = path
        return path
