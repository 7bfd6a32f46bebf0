"""The orchestrator: a durable workflow whose next step MAIN chooses.

Steps: ``main`` (MAIN decides), ``test`` / ``dev`` / ``review`` (a role works and
reports), ``finish_review`` → ``finish_check`` (FINISH), ``user`` (pause for a human),
and the fast-fix sub-loop ``subloop_dev`` ⇄ ``subloop_test``. Every step routes with
``StepContext.goto``, so the runner checkpoints after each stage and a run killed with
``kill -9`` resumes at the stage (and sub-loop round) it was in; no finished stage runs
again. ``project_history.md`` and ``dev_plan.md`` are rendered from the checkpointed state
on every stage, so a re-run stage never writes an entry twice.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from tether.agent.compaction import checkpoint_compaction
from tether.agent.watch import safe_emit
from tether.context.policy import ContextPolicy
from tether.errors import ConfigError
from tether.orchestrator import decisions, stages
from tether.orchestrator.blackboard import Blackboard
from tether.orchestrator.config import OrchestratorConfig
from tether.orchestrator.decisions import apply_plan
from tether.orchestrator.effects import settle
from tether.orchestrator.history import HISTORY
from tether.orchestrator.metrics import (
    METRICS,
    add_metrics,
    check_thresholds,
    empty_metrics,
    metrics_of,
    record,
)
from tether.orchestrator.roles import MainPolicy, RoleRunner
from tether.orchestrator.stage import LATEST, REPORT_INDEX, RETIRED, StageInput, StageOutcome
from tether.orchestrator.summaries import SummaryStore
from tether.runtime import Event, Runner, RunResult, Step, StepContext, Workflow
from tether.runtime.control import amend_pending_report
from tether.runtime.report import takeover_note
from tether.state import default_registry
from tether.stores.base import CheckpointStore

__all__ = ["Orchestrator", "OrchestratorConfig", "apply_plan", "initial_state"]

logger = logging.getLogger("tether.orchestrator")

Stage = Callable[[StageInput], Awaitable[StageOutcome]]


def initial_state(task: str, *, workdir: str, dev_plan: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The state a new orchestration starts from: what :meth:`Orchestrator.start` stores, and
    what a worker stores for a run it is asked to start (``tether submit``)."""
    return {
        "task": task,
        "iteration": 0,
        "dev_plan": list(dev_plan or []),
        "latest": {},
        "report_index": {},
        "history": {},
        "stall": [0, "", 0, 0],
        "finish_attempts": 0,
        "metrics": empty_metrics(),
        "subloop": None,
        "subloop_result": None,
        "workdir": workdir,
    }


class Orchestrator:
    """MAIN and the roles on a blackboard in ``workdir``, durable on ``store``.

    Args:
        workdir: the project the roles work on; the blackboard files go there.
        main: who decides (``ScriptedMain`` or ``ModelMain``).
        runners: one runner for every role, or a mapping role → runner.
        on_event: receives the runner's events and ``orchestrator`` events (the live view).
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        store: CheckpointStore,
        *,
        main: MainPolicy,
        runners: RoleRunner | Mapping[str, RoleRunner],
        config: OrchestratorConfig | None = None,
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        self.board = Blackboard(workdir)
        self.store = store
        self.main = main
        self.runners = runners
        self.config = config or OrchestratorConfig()
        self.on_event = on_event
        self.overhead: list[float] = []
        """Seconds per stage spent outside the role and MAIN calls (measurements)."""
        self._summaries: SummaryStore | None = None
        self.context_policy = ContextPolicy()
        """Checkpoint compression of the run's context window (its monitor spans the runs)."""
        self._seen: dict[str, int] = {}

    # == entry points ===============================================================
    def workflow(self) -> Workflow:
        cfg = self.config
        rounds = cfg.max_iterations + 1
        role = self._role_stage
        steps = [
            Step(
                id="main",
                fn=self._drive(lambda inp: decisions.main_stage(inp, self.main)),
                max_visits=rounds + 1,
            ),
            Step(id="test", fn=role("TEST"), max_visits=rounds),
            Step(id="dev", fn=role("DEV"), max_visits=rounds, idempotent=False),  # DEV edits files
            Step(id="review", fn=role("REVIEW"), max_visits=rounds),
            Step(id="finish_review", fn=role("FINISH_REVIEW"), max_visits=rounds),
            Step(
                id="finish_check",
                fn=self._drive(lambda inp: decisions.finish_check_stage(inp, self.main)),
                max_visits=rounds,
            ),
            Step(id="user", fn=self._drive(decisions.user_stage)),
            Step(
                id="subloop_dev",
                fn=self._drive(lambda inp: stages.subloop_dev(inp, self.runner_for("DEV"))),
                idempotent=False,
            ),
            Step(
                id="subloop_test",
                fn=self._drive(lambda inp: stages.subloop_test(inp, self.runner_for("TEST"))),
            ),
        ]
        return Workflow(
            steps, name="orchestrator", max_routed=rounds * (4 + 2 * cfg.subloop_max_iterations) + 10
        )

    def runner(self) -> Runner:
        reducers = default_registry().register("stage_changes", "append").register("warnings", "append")
        # records: a stage writes what to add (history lines, a report, a reference, counters),
        # not the values they make
        reducers = reducers.register("history", HISTORY)
        reducers = reducers.register("latest", LATEST).register("report_index", REPORT_INDEX)
        reducers = reducers.register("metrics", METRICS)
        hook = checkpoint_compaction(self.context_policy, on_event=self.on_event)
        return Runner(
            self.workflow(),
            self.store,
            reducers=reducers,
            on_event=self.on_event,
            on_checkpoint=hook if self.config.checkpoint_compression else None,
        )

    async def start(
        self,
        run_id: str,
        task: str,
        *,
        dev_plan: list[dict[str, Any]] | None = None,
        origin: dict[str, Any] | None = None,
    ) -> RunResult:
        """Start a run; ``origin`` (what started it) is kept as ``_origin`` for ``tether resume``."""
        if not task.strip():
            raise ConfigError("the orchestrator needs a task: what should the agents achieve?")
        inputs = initial_state(task, workdir=str(self.board.root), dev_plan=dev_plan)
        if origin is not None:
            inputs["_origin"] = dict(origin)
        return await self.runner().start(run_id, inputs)

    async def resume(self, run_id: str, *, decision: str | None = None, note: str | None = None) -> RunResult:
        """Continue a run; ``decision`` (and a takeover's ``note``) answers a pending report,
        and a DEV stage a crash cut is probed before anything runs it again (``effects.py``)."""
        if note is not None:
            await amend_pending_report(self.store, run_id, note=note)
        result = await self.runner().resume(run_id, decision=decision)
        dev = (
            self.runners
            if not isinstance(self.runners, Mapping)
            else self.runners.get("DEV") or self.runners.get("*")
        )
        return await settle(
            result,
            board=self.board,
            store=self.store,
            dev=dev,
            resume=lambda rid, choice: self.resume(rid, decision=choice),
        )

    async def answer(self, run_id: str, text: str) -> RunResult:
        """Answer the question MAIN asked the user (a paused run), then continue."""
        await self.store.update_state(run_id, {"user_answer": text})
        return await self.resume(run_id)

    # == the driver: one stage function per step ======================================
    def _role_stage(self, role: str) -> Callable[[StepContext], Awaitable[dict[str, Any]]]:
        return self._drive(lambda inp: stages.role_stage(inp, role, self.runner_for(role)))

    def _drive(self, stage: Stage) -> Callable[[StepContext], Awaitable[dict[str, Any]]]:
        """A runtime step that reads the state once, runs ``stage`` and commits its outcome."""

        async def step(sc: StepContext) -> dict[str, Any]:
            began = time.perf_counter()
            inp = StageInput(
                run_id=sc.run_id,
                step=sc.step.id,
                state=sc.state.snapshot(),
                board=self.board,
                summaries=self.summaries(),
                config=self.config,
                takeover=takeover_note(sc.state, sc.step.id),
            )
            out = await stage(inp)
            update = out.update
            update |= {key: None for key in RETIRED if key not in update and inp.state.get(key) is not None}
            # metrics change on MAIN's rounds, counted events and the run's end; the summary
            # cache's counts of the stages between are folded in then (not a write a stage)
            metrics = None
            if out.counters or out.main_prompt is not None or out.finish is not None:
                size, level = out.main_prompt or (None, None)
                update["metrics"] = self.metrics_update(main_size=size, level=level, **(out.counters or {}))
                metrics = metrics_of(inp.state), add_metrics(inp.state.get("metrics"), update["metrics"])
            if out.finish is not None:
                sc.finish(out.finish[0], out.finish[1])
            elif out.goto is not None:
                sc.goto(out.goto[0], reason=out.goto[1])
            if out.pause is not None:
                sc.pause(out.pause)
            for detail in out.events:
                self.emit(sc, **detail)
            if metrics is not None:
                self.warn(sc, *metrics, update)
            self.overhead.append(time.perf_counter() - began - out.waited)
            return update

        return step

    # == helpers ====================================================================
    def summaries(self) -> SummaryStore:
        if self._summaries is None:
            self._summaries = SummaryStore(self.board)
        return self._summaries

    def runner_for(self, role: str) -> RoleRunner:
        if isinstance(self.runners, Mapping):
            runner = self.runners.get(role) or self.runners.get("*")
            if runner is None:
                raise ConfigError(
                    f"no runner for role {role}: pass runners={{'{role}': ...}} or a '*' default"
                )
            return runner
        return self.runners

    def metrics_update(
        self, *, main_size: int | None = None, level: int | None = None, **add: int
    ) -> list[Any]:
        """The metrics record a stage writes (see ``metrics.record``): its counters, MAIN's
        prompt sample, and the summary cache's counts since the last record."""
        store = self.summaries()
        # the store counts for this process; the state accumulates what it added since last time
        now = {"extractions": store.extractions, "extraction_failures": store.failures}
        now |= {"cache_hits": store.hits, "cache_misses": store.misses}
        for key, value in now.items():
            add[key] = add.get(key, 0) + value - self._seen.get(key, 0)
        self._seen = now
        return record(main_size=main_size, level=level, **add)

    def warn(
        self, sc: StepContext, before: dict[str, Any], after: dict[str, Any], update: dict[str, Any]
    ) -> None:
        """One warning event per threshold crossed: past it ``after`` the stage, not ``before``
        (what the metrics were past before is derived, not kept)."""
        active = {t.name for t in check_thresholds(before)}
        for t in check_thresholds(after):
            if t.name not in active:
                level = logging.WARNING if t.level == "warning" else logging.INFO
                logger.log(level, "orchestrator: metric_%s %s (%s)", t.level, t.name, t.message)
                self.emit(sc, "WARNING", metric=t.name, level=t.level, message=t.message)
                update["warnings"] = [
                    *update.get("warnings", []),
                    {"metric": t.name, "level": t.level, "message": t.message},
                ]

    def emit(self, sc: StepContext, stage: str, **detail: Any) -> None:
        """Tell the subscriber; what it raises is logged, never the stage's failure."""
        event = Event(
            kind="orchestrator", run_id=sc.run_id, step=sc.step.id, detail={"stage": stage, **detail}
        )
        safe_emit(self.on_event, event)
