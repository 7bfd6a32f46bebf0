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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.agent.watch import safe_emit
from tether.errors import ConfigError
from tether.orchestrator import stages
from tether.orchestrator.blackboard import Blackboard
from tether.orchestrator.history import (
    add_history,
    add_line,
    delta,
    history_of,
    mark_milestone,
    render_history,
)
from tether.orchestrator.metrics import check_thresholds, empty_metrics, rates
from tether.orchestrator.prompts import (
    PromptConfig,
    build_finish_check_prompt,
    build_main_prompt,
    build_role_prompt,
    plan_counts,
    render_plan,
)
from tether.orchestrator.roles import MainPolicy, MainRequest, RoleRequest, RoleRunner
from tether.runtime import Event, Runner, RunResult, Step, StepContext, Workflow
from tether.runtime.control import amend_pending_report
from tether.state import default_registry
from tether.stores.base import CheckpointStore

__all__ = ["Orchestrator", "OrchestratorConfig", "initial_state"]

logger = logging.getLogger("tether.orchestrator")

STAGE_STEPS = {"TEST": "test", "DEV": "dev", "REVIEW": "review", "FINISH": "finish_review", "USER": "user"}


def initial_state(task: str, *, workdir: str, dev_plan: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The state a new orchestration starts from: what :meth:`Orchestrator.start` stores, and
    what a worker stores for a run it is asked to start (``tether submit``)."""
    return {
        "task": task,
        "iteration": 0,
        "dev_plan": list(dev_plan or []),
        "latest": {},
        "report_index": {},
        "verdicts": {},
        "history": {},
        "stall": {"done": 0, "rounds": 0, "fail_sig": "", "repeats": 0},
        "finish_attempts": 0,
        "metrics": empty_metrics(),
        "subloop": None,
        "subloop_result": None,
        "workdir": workdir,
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class OrchestratorConfig:
    max_iterations: int = 30
    """MAIN rounds; one more ends the run FAILED with a report."""
    stall_rounds: int = 3
    """MAIN rounds without dev_plan progress (or with the same failing TEST) before a re-plan."""
    subloop: bool = True
    subloop_max_iterations: int = 3
    subloop_timeout: float = 600.0
    stage_timeout: float | None = None
    """Seconds one role may take outside the sub-loop (None: the runner's own limit)."""
    prompts: PromptConfig = field(default_factory=PromptConfig)
    acceptance: tuple[str, ...] = ()
    """Acceptance criteria, summarised in FINISH_CHECK."""

    def __post_init__(self) -> None:
        if self.max_iterations < 1 or self.subloop_max_iterations < 1 or self.stall_rounds < 1:
            raise ConfigError("max_iterations, subloop_max_iterations and stall_rounds must be >= 1")


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
        self._summaries: Any = None
        self._seen: dict[str, int] = {}

    # == entry points ===============================================================
    def workflow(self) -> Workflow:
        cfg = self.config
        rounds = cfg.max_iterations + 1
        steps = [
            Step(id="main", fn=self._main_step, max_visits=rounds + 1),
            Step(id="test", fn=self._test_step, max_visits=rounds),
            Step(id="dev", fn=self._dev_step, max_visits=rounds, idempotent=False),  # DEV edits files
            Step(id="review", fn=self._review_step, max_visits=rounds),
            Step(id="finish_review", fn=self._finish_review_step, max_visits=rounds),
            Step(id="finish_check", fn=self._finish_check_step, max_visits=rounds),
            Step(id="user", fn=self._user_step),
            Step(id="subloop_dev", fn=self._subloop_dev_step, idempotent=False),
            Step(id="subloop_test", fn=self._subloop_test_step),
        ]
        return Workflow(
            steps, name="orchestrator", max_routed=rounds * (4 + 2 * cfg.subloop_max_iterations) + 10
        )

    def runner(self) -> Runner:
        reducers = default_registry().register("stage_changes", "append").register("warnings", "append")
        for key in ("history", "latest", "verdicts", "report_index"):  # keyed: a stage writes what it changed
            reducers = reducers.register(key, "merge")
        return Runner(self.workflow(), self.store, reducers=reducers, on_event=self.on_event)

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
        from tether.orchestrator.effects import settle

        if note is not None:
            await amend_pending_report(self.store, run_id, note=note)
        return await settle(self, await self.runner().resume(run_id, decision=decision))

    async def answer(self, run_id: str, text: str) -> RunResult:
        """Answer the question MAIN asked the user (a paused run), then continue."""
        await self.store.update_state(run_id, {"user_answer": text})
        return await self.resume(run_id)

    # == MAIN ======================================================================
    async def _main_step(self, sc: StepContext) -> dict[str, Any]:
        began = time.perf_counter()
        cfg = self.config
        iteration = int(sc.get("iteration", 0)) + 1
        update: dict[str, Any] = {"iteration": iteration}
        if iteration > cfg.max_iterations:
            return self._give_up(sc, iteration, update)
        state = {**sc.state.snapshot(), "iteration": iteration}
        self.render({}, state)  # the history as the stages since the last MAIN left it
        replan, stall = self._stall(state)
        update["stall"] = stall
        store = self.summaries()
        prompt, level = build_main_prompt(store, state, cfg.prompts, replan=replan)
        size = len(prompt.encode())
        metrics = self.metrics_update(state, main_size=size, level=level)
        request = MainRequest(
            mode="main",
            iteration=iteration,
            prompt=prompt,
            task=str(state["task"]),
            verdicts=dict(state.get("verdicts") or {}),
            dev_plan=list(state.get("dev_plan") or []),
            replan=bool(replan),
            last_stage=str(state.get("last_stage", "")),
        )
        spent = time.perf_counter() - began
        before = int(getattr(self.main, "replies", 0) or 0)
        decision = await self.main.decide(request)
        began = time.perf_counter()
        plan, changed = apply_plan(state.get("dev_plan") or [], decision.dev_plan)
        title, milestone = decision.next_agent, ""
        if decision.next_agent == "FINISH":
            attempts = int(state.get("finish_attempts", 0)) + 1
            update["finish_attempts"] = attempts
            milestone = f"FINISH attempt #{attempts}"
        elif changed > 5:
            milestone = f"dev_plan: {changed} task statuses changed"
        lines = [
            f"next_agent: {decision.next_agent}",
            f"reason: {decision.reason}",
            f"dev_plan: {plan_counts(plan)}",
        ]
        if replan:
            lines.append(f"re-plan requested: {replan}")
        history = delta(state, add_history(history_of(state), iteration, title, lines, milestone))
        update |= {
            "main_replies": self._replies(state, before),  # a resumed scripted MAIN skips these
            "dev_plan": plan,
            "history": history,
            "last_decision": {"next_agent": decision.next_agent, "reason": decision.reason},
            "stage_changes": [
                f"iteration {iteration}: MAIN -> {decision.next_agent} ({decision.reason[:120]})"
            ],
            "metrics": metrics,
            "last_stage": "MAIN",
        }
        if decision.next_agent == "USER":
            update["pending_question"] = decision.question or decision.reason
        self.render(update, state, history=False)
        sc.goto(STAGE_STEPS[decision.next_agent], reason=decision.reason[:200])
        self.emit(sc, "MAIN", iteration=iteration, next=decision.next_agent, prompt_size=size, level=level)
        self.warn(sc, metrics, update)
        self.overhead.append(spent + time.perf_counter() - began)
        return update

    def _stall(self, state: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """A re-plan instruction when the plan made no progress for ``stall_rounds`` MAIN
        rounds, or the same failing TEST verdict repeated that often."""
        stall = dict(state.get("stall") or {})
        done = sum(1 for t in state.get("dev_plan") or [] if t.get("status") == "DONE")
        first = int(state.get("iteration", 1)) <= 1  # the first round has nothing to compare with
        progressed = done > int(stall.get("done", 0))
        stall["rounds"] = 0 if progressed or first else int(stall.get("rounds", 0)) + 1
        stall["done"] = max(done, int(stall.get("done", 0)))
        test = (state.get("latest") or {}).get("TEST") or {}
        failing = (state.get("verdicts") or {}).get("TEST") == "FAIL"
        sig = "|".join(sorted(test.get("blockers") or ["?"])) if failing else ""
        repeats = int(stall.get("repeats", 0))
        stall["repeats"] = (repeats + 1 if sig == stall.get("fail_sig") else 1) if sig else 0
        stall["fail_sig"] = sig
        reasons = []
        if stall["rounds"] >= self.config.stall_rounds:
            reasons.append(f"no dev_plan progress for {stall['rounds']} MAIN rounds")
        if int(stall.get("repeats", 0)) >= self.config.stall_rounds:
            reasons.append(f"the same TEST failure {stall['repeats']} times in a row")
        if not reasons:
            return "", stall
        stall["rounds"], stall["repeats"] = 0, 0
        text = (
            "; ".join(reasons) + ". Re-plan: question the approach, split or re-order the tasks, "
            "update dev_plan, and choose a different next step than before."
        )
        logger.warning("orchestrator: stall iter=%s %s", state.get("iteration"), "; ".join(reasons))
        return text, stall

    def _give_up(self, sc: StepContext, iteration: int, update: dict[str, Any]) -> dict[str, Any]:
        state = sc.state.snapshot()
        plan = state.get("dev_plan") or []
        text = "\n".join(
            [
                "# Orchestrator stopped: iteration limit",
                f"iteration: {iteration - 1}",
                "结论：BLOCKED",
                f"阻塞：reached max_iterations={self.config.max_iterations} without FINISH",
                "",
                f"## Task\n{state.get('task', '')}",
                f"## dev_plan ({plan_counts(plan)})\n{render_plan(plan)}",
                "## Latest verdicts\n"
                + "\n".join(f"- {k}: {v}" for k, v in (state.get("verdicts") or {}).items()),
                "## Stage changes\n" + "\n".join(state.get("stage_changes") or []),
            ]
        )
        path = self.board.write("reports/report_orchestrator.md", text + "\n")
        self.render({}, state, final=True)
        logger.warning("orchestrator: iteration limit %d reached; run FAILED", self.config.max_iterations)
        sc.finish(
            "FAILED", f"iteration limit {self.config.max_iterations} reached; see {self.board.relative(path)}"
        )
        return {**update, "iteration": iteration - 1, "final_report": self.board.relative(path)}

    # == role stages and the sub-loop (in stages.py) ================================
    async def _test_step(self, sc: StepContext) -> dict[str, Any]:
        return await stages.run_stage(self, sc, "TEST")

    async def _dev_step(self, sc: StepContext) -> dict[str, Any]:
        return await stages.run_stage(self, sc, "DEV")

    async def _review_step(self, sc: StepContext) -> dict[str, Any]:
        return await stages.run_stage(self, sc, "REVIEW")

    async def _finish_review_step(self, sc: StepContext) -> dict[str, Any]:
        return await stages.run_stage(self, sc, "FINISH_REVIEW")

    async def _subloop_dev_step(self, sc: StepContext) -> dict[str, Any]:
        return await stages.subloop_dev_step(self, sc)

    async def _subloop_test_step(self, sc: StepContext) -> dict[str, Any]:
        return await stages.subloop_test_step(self, sc)

    # == FINISH_CHECK and USER =====================================================
    async def _finish_check_step(self, sc: StepContext) -> dict[str, Any]:
        began = time.perf_counter()
        state = sc.state.snapshot()
        fc = build_finish_check_prompt(
            self.summaries(), state, self.config.prompts, acceptance=self.config.acceptance
        )
        request = MainRequest(
            mode="finish_check",
            iteration=int(state["iteration"]),
            prompt=fc.text,
            task=str(state["task"]),
            verdicts=dict(state.get("verdicts") or {}),
            dev_plan=list(state.get("dev_plan") or []),
            last_stage="FINISH_REVIEW",
        )
        spent = time.perf_counter() - began
        before = int(getattr(self.main, "replies", 0) or 0)
        decision = await self.main.decide(request)
        began = time.perf_counter()
        accepted = decision.next_agent == "FINISH"
        line = (
            f"FINISH_CHECK: {'accepted' if accepted else 'rejected -> ' + decision.next_agent} "
            f"({decision.reason}); prompt {fc.size} bytes"
            + (f", downgraded: {', '.join(fc.downgraded)}" if fc.downgraded else "")
        )
        update: dict[str, Any] = {
            "history": delta(state, add_line(history_of(state), line)),
            "finish_check": {"size": fc.size, "downgraded": list(fc.downgraded), "accepted": accepted},
            "stage_changes": [f"iteration {state['iteration']}: FINISH_CHECK -> {decision.next_agent}"],
            "last_stage": "FINISH_CHECK",
            "main_replies": self._replies(state, before),
        }
        self.render(update, state, final=accepted)
        if accepted:
            update["final_output"] = decision.reason or "finished"
            sc.finish("COMPLETED", decision.reason or "finished")
        else:
            sc.goto("main", reason=f"FINISH rejected: {decision.reason[:150]}")
        self.emit(
            sc, "FINISH_CHECK", iteration=state["iteration"], accepted=accepted, prompt_size=fc.size, level=3
        )
        self.overhead.append(spent + time.perf_counter() - began)
        return update

    async def _user_step(self, sc: StepContext) -> dict[str, Any]:
        state = sc.state.snapshot()
        answer = state.get("user_answer")
        question = str(state.get("pending_question") or "MAIN needs a decision")
        if answer is None:
            sc.goto("user", reason="waiting for the user's answer")
            sc.pause(f"question for the user: {question}")
            self.emit(sc, "USER", iteration=state["iteration"], question=question)
            return {}
        iteration = int(state["iteration"])
        history = mark_milestone(history_of(state), iteration, f"user decision - {str(answer)[:80]}")
        history = delta(state, add_line(history, f"user answered: {answer}"))
        update: dict[str, Any] = {
            "history": history,
            "user_answer": None,
            "pending_question": None,
            "user_decisions": [
                *(state.get("user_decisions") or []),
                {"question": question, "answer": answer},
            ],
            "last_stage": "USER",
        }
        self.render(update, state)
        sc.goto("main", reason="user answered")
        return update

    # == helpers ====================================================================
    def _replies(self, state: Mapping[str, Any], before: int) -> int:
        """MAIN replies the run has read, this decision's included (1 for a policy that
        does not count them)."""
        now = getattr(self.main, "replies", None)
        spent = now - before if isinstance(now, int) else 1
        return int(state.get("main_replies") or 0) + spent

    def summaries(self) -> Any:
        from tether.orchestrator.summaries import SummaryStore

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

    def role_request(self, sc: StepContext, role: str, prompt: str, path: Any, **kw: Any) -> RoleRequest:
        return RoleRequest(
            role=role,
            iteration=int(sc.get("iteration", 0)),
            prompt=prompt,
            workdir=self.board.root,
            report_path=path,
            run_id=sc.run_id,
            **kw,
        )

    def role_prompt(self, sc: StepContext, role: str, **kw: Any) -> str:
        state = sc.state.snapshot()
        instruction = (
            str((state.get("last_decision") or {}).get("reason", "")) if not kw.get("subloop_round") else ""
        )
        return build_role_prompt(
            self.summaries(),
            state,
            self.config.prompts,
            role=role,
            iteration=int(state.get("iteration", 0)),
            instruction=instruction,
            **kw,
        )

    def metrics_update(
        self, state: Mapping[str, Any], *, main_size: int | None = None, level: int | None = None, **add: int
    ) -> dict[str, Any]:
        m = {**empty_metrics(), **dict(state.get("metrics") or {})}
        if main_size is not None:
            m["main_prompt_bytes"] = [*m["main_prompt_bytes"], main_size][-100:]
            m["main_levels"] = [*m["main_levels"], level][-100:]
        for key, value in add.items():
            m[key] = int(m.get(key, 0)) + value
        store = self.summaries()
        # the store counts for this process; the state accumulates what it added since last time
        seen = dict(self._seen)
        now = {"extractions": store.extractions, "extraction_failures": store.failures}
        now |= {"cache_hits": store.hits, "cache_misses": store.misses}
        for key, value in now.items():
            m[key] = int(m[key]) + value - seen.get(key, 0)
        self._seen = now
        m["rates"] = rates(m)
        return m

    def warn(self, sc: StepContext, metrics: dict[str, Any], update: dict[str, Any]) -> None:
        active = set(metrics.get("active_warnings") or [])
        now = {t.name for t in check_thresholds(metrics)}
        for t in check_thresholds(metrics):
            if t.name not in active:
                level = logging.WARNING if t.level == "warning" else logging.INFO
                logger.log(level, "orchestrator: metric_%s %s (%s)", t.level, t.name, t.message)
                self.emit(sc, "WARNING", metric=t.name, level=t.level, message=t.message)
                update["warnings"] = [
                    *update.get("warnings", []),
                    {"metric": t.name, "level": t.level, "message": t.message},
                ]
        metrics["active_warnings"] = sorted(now)

    def render(
        self,
        update: Mapping[str, Any],
        state: Mapping[str, Any],
        *,
        history: bool = True,
        final: bool = False,
    ) -> None:
        """Rewrite dev_plan.md (when it changed) and, with ``history``, project_history.md
        and the summary cache, from the state being committed. Role stages skip the history:
        MAIN renders it before reading it (a hot path: see benchmarks/README.md)."""
        plan = update.get("dev_plan", state.get("dev_plan") or [])
        self.board.write_if_changed(
            "dev_plan.md", f"# dev_plan ({plan_counts(plan)})\n\n{render_plan(plan)}\n"
        )
        if history:
            self.board.write_if_changed("project_history.md", render_history(history_of(state, update)))
            self.summaries().flush(every=1 if final else 5)

    def emit(self, sc: StepContext, stage: str, **detail: Any) -> None:
        """Tell the subscriber; what it raises is logged, never the stage's failure."""
        event = Event(
            kind="orchestrator", run_id=sc.run_id, step=sc.step.id, detail={"stage": stage, **detail}
        )
        safe_emit(self.on_event, event)


# == plan (pure) ================================================================
def apply_plan(
    plan: list[dict[str, Any]], updates: list[dict[str, Any]] | None
) -> tuple[list[dict[str, Any]], int]:
    """The plan with ``updates`` applied by task id, and how many task statuses changed."""
    if not updates:
        return [dict(t) for t in plan], 0
    by_id = {str(t.get("id")): dict(t) for t in plan}
    order = [str(t.get("id")) for t in plan]
    changed = 0
    for u in updates:
        tid = str(u.get("id") or f"t{len(order) + 1}")
        old = by_id.get(tid)
        status = str(u.get("status", old.get("status", "TODO") if old else "TODO")).upper()
        if old is None:
            order.append(tid)
            by_id[tid] = {"id": tid, "title": str(u.get("title", "")), "status": status}
            changed += 1
            continue
        if old.get("status") != status:
            changed += 1
        by_id[tid] = {**old, **{k: v for k, v in u.items() if k in ("title",)}, "status": status}
    return [by_id[t] for t in order], changed
