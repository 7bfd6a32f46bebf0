"""The runner: executes a workflow's steps, checkpointing after every one.

State keys it keeps (all checkpointed with the run):

    todo              {step id: {name, phase, status, attempts}} in plan order;
                      status pending|done|failed|skipped (dict-merged: cheap per step)
    execution_history one entry per finished step (append)
    event_log         retries, rollback actions, decisions (append)
    failure_report    the last FailureReport (dict) or None
    pending_decision  a FailureReport waiting for retry/skip/replan/abort, or None
    _lease            who executes the run now: {owner, host, pid, expires_at}

Resume after a crash: the latest checkpoint is loaded, the executed step ids rebuild
the dependency tracker, and the step that was running when the process died runs
again (steps must be idempotent or compensable). A live lease held by another runner
makes ``start``/``resume`` raise :class:`RunInProgress`; a lease whose process is gone
(same host) or whose time ran out is taken over.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from tether.errors import RunInProgress, RunNotFound, VersionConflict
from tether.runtime.events import Event
from tether.runtime.failures import Classifier, FailureKind
from tether.runtime.lease import HOST, check_lease, new_lease
from tether.runtime.report import Decision, DecisionHandler, FailureReport, possible_causes
from tether.runtime.workflow import Phase, RetryPolicy, Step, StepContext, Workflow
from tether.state import ExecutionContext, ReducerRegistry, RunStatus, default_registry
from tether.stores.base import CheckpointStore

__all__ = ["RunResult", "Runner", "StepTimeout", "runtime_reducers"]

logger = logging.getLogger(__name__)

Replanner = Callable[[FailureReport, ExecutionContext], "list[Step] | None | Awaitable[list[Step] | None]"]
Alert = Callable[[FailureReport], Any]
PhaseHook = Callable[
    [Phase, ExecutionContext], "Mapping[str, Any] | None | Awaitable[Mapping[str, Any] | None]"
]
CheckpointHook = Callable[
    [int, ExecutionContext], "Mapping[str, Any] | None | Awaitable[Mapping[str, Any] | None]"
]


class StepTimeout(TimeoutError):
    """A step ran past its ``timeout`` or went silent past its ``idle_timeout``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """How a ``start``/``resume`` call ended. ``state`` is the run's final state itself
    (not a copy: a 10 MB state is not duplicated just to be returned)."""

    run_id: str
    status: RunStatus
    version: int
    state: dict[str, Any]
    report: FailureReport | None = None


def runtime_reducers(base: ReducerRegistry | None = None) -> ReducerRegistry:
    """The reducers the runner's own keys need, on top of ``base`` (or the defaults)."""
    reg = (base or default_registry()).copy()
    return reg.register("todo", "merge").register("event_log", "append")


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class _Stop(Exception):
    """Internal: the drive loop ends with this status."""

    def __init__(self, status: RunStatus, report: FailureReport | None = None) -> None:
        self.status = status
        self.report = report


@dataclass(slots=True, eq=False)
class _Run:
    """What a Runner keeps per run it drives, so that one Runner drives many runs at once."""

    ctx: ExecutionContext
    workflow: Workflow
    """This run's workflow: the runner's, or what a re-plan made of it."""
    hint: int = 0
    """Steps before this index are settled: next_step need not rescan them."""
    settled_cache: tuple[set[str], set[str]] | None = None


class Runner:
    """Runs a :class:`Workflow` durably on a :class:`CheckpointStore`.

    Args:
        decisions: chooses retry/skip/replan/abort after a failure; None (or a handler
            returning None) pauses the run until ``resume(run_id, decision=...)``.
        replan: called for LOGIC failures (and REPLAN decisions) with the report; returns
            the new remaining steps, or None to fall back to roll back and report.
        alert: called for SYSTEM failures.
        on_phase_complete / on_checkpoint: context hooks; may return a state update
            (e.g. a phase-compressed context window) committed with the run.
        on_event: receives every :class:`Event` (progress views, logs, tests).
    """

    def __init__(
        self,
        workflow: Workflow,
        store: CheckpointStore,
        *,
        reducers: ReducerRegistry | None = None,
        classifier: Classifier | None = None,
        decisions: DecisionHandler | None = None,
        replan: Replanner | None = None,
        alert: Alert | None = None,
        retry: RetryPolicy | None = None,
        on_phase_complete: PhaseHook | None = None,
        on_checkpoint: CheckpointHook | None = None,
        on_event: Callable[[Event], None] | None = None,
        lease_ttl: float = 600.0,
    ) -> None:
        self.workflow = workflow
        self.store = store
        self.reducers = runtime_reducers(reducers)
        self.classifier = classifier or Classifier()
        self.decisions = decisions
        self.replan = replan
        self.alert = alert
        self.retry = retry or RetryPolicy()
        self.on_phase_complete = on_phase_complete
        self.on_checkpoint = on_checkpoint
        self.on_event = on_event
        self.lease_ttl = lease_ttl
        self.owner = f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    # == entry points ===============================================================
    async def start(self, run_id: str, inputs: Mapping[str, Any] | None = None) -> RunResult:
        """Start a new run; raises VersionConflict if ``run_id`` already exists."""
        ctx = ExecutionContext(run_id, dict(inputs or {}), reducers=self.reducers)
        ctx.merge({"todo": self._todos(self.workflow.steps, "pending")})
        ctx.put("_lease", self._lease())
        ctx.put("failure_report", None)
        ctx.put("pending_decision", None)
        await self.store.commit(ctx, status=RunStatus.RUNNING)
        self._emit("run_started", run_id, steps=len(self.workflow))
        return await self._drive(_Run(ctx, self.workflow))

    async def resume(
        self, run_id: str, *, decision: Decision | str | None = None, force: bool = False
    ) -> RunResult:
        """Continue a paused or crashed run from its latest checkpoint.

        A FAILED run is left as it is unless a ``decision`` is given (after a human
        fixed what its failure report asked for); COMPLETED and CANCELLED runs are final.
        """
        ctx = await self.store.load_context(run_id, reducers=self.reducers)
        info = await self.store.get_run(run_id)
        if ctx is None or info is None:
            raise RunNotFound(run_id)
        finished = info.status in (RunStatus.COMPLETED, RunStatus.CANCELLED)
        if finished or (info.status is RunStatus.FAILED and decision is None):
            return RunResult(run_id=run_id, status=info.status, version=ctx.version, state=ctx._state_ref())
        check_lease(run_id, ctx.get("_lease"), owner=self.owner, force=force)
        ctx.put("_lease", self._lease())
        try:
            await self.store.commit(
                ctx, node_id=ctx.node_id, status=RunStatus.RUNNING, metadata={"resumed": True}
            )
        except VersionConflict as exc:
            raise RunInProgress(run_id, "another runner", " (it resumed first)") from exc
        self._emit("run_resumed", run_id, version=ctx.version, executed=ctx.executed_node_ids)
        run = _Run(ctx, self.workflow)
        pending = ctx.get("pending_decision")
        if pending:
            report = FailureReport.from_dict(pending)
            choice = Decision(decision) if decision else await self._decide(report)
            if choice is None:
                return await self._finish(run, RunStatus.PAUSED, report)
            try:
                await self._apply_decision(run, report, choice)
            except _Stop as stop:
                return await self._finish(run, stop.status, stop.report)
        return await self._drive(run)

    # == the loop ===================================================================
    async def _drive(self, run: _Run) -> RunResult:
        try:
            while True:
                settled, skipped = self._settled(run)
                run.hint = run.workflow.settled_prefix(settled | skipped, run.hint)
                step = run.workflow.next_step(settled, skipped, hint=run.hint, route=run.ctx.get("_route"))
                if step is None:
                    return await self._finish(run, RunStatus.COMPLETED)
                await self._run_item(run, step)
        except _Stop as stop:
            return await self._finish(run, stop.status, stop.report)

    def _settled(self, run: _Run) -> tuple[set[str], set[str]]:
        """Executed and skipped step ids, cached until a step or a decision changes them."""
        if run.settled_cache is None:
            todo = run.ctx.get("todo") or {}
            skipped = {sid for sid, t in todo.items() if t.get("status") == "skipped"}
            run.settled_cache = (set(run.ctx.executed_node_ids), skipped)
        return run.settled_cache

    async def _run_item(self, run: _Run, step: Step) -> None:
        ctx = run.ctx
        start_version = ctx.version
        self._emit("step_started", ctx.run_id, step.id, name=step.title)
        sc = StepContext(run_id=ctx.run_id, step=step, state=ctx, workflow=run.workflow)
        began = time.monotonic()
        try:
            update = await self._attempts(step, sc)
        except Exception as exc:
            await self._fail(run, step, exc, sc, start_version)
            return
        ctx.merge(dict(update or {}))
        ctx._merge_checked(
            {
                "todo": self._todos([step], "done", sc.attempt),
                "execution_history": [
                    {
                        "node": step.id,
                        "name": step.title,
                        "status": "done",
                        "attempts": sc.attempt,
                        "seconds": round(time.monotonic() - began, 3),
                    }
                ],
            }
        )
        ctx.mark_executed(step.id)
        lease = ctx.get("_lease")
        if not isinstance(lease, dict) or lease.get("expires_at", 0) - time.time() < self.lease_ttl / 2:
            ctx.put("_lease", self._lease())
        if run.settled_cache is not None:
            run.settled_cache[0].add(step.id)
        version = await self.store.commit(ctx, node_id=step.id, metadata={"node_name": step.title})
        self._emit("step_done", ctx.run_id, step.id, version=version, attempts=sc.attempt)
        await self._after_checkpoint(run, step, version)
        if sc.finish_requested is not None:
            await self._finish_early(run, step, *sc.finish_requested)
        if sc.pause_requested or step.pause_after:
            reason = sc.pause_requested or f"review after {step.title}"
            self._emit("pause_requested", ctx.run_id, step.id, reason=reason)
            raise _Stop(RunStatus.PAUSED)

    async def _attempts(self, step: Step, sc: StepContext) -> Mapping[str, Any] | None:
        """The first try runs directly (the common case costs nothing extra); only a
        TRANSIENT failure sets up tenacity for the remaining tries."""
        policy = step.retry or self.retry
        try:
            return await self._once(step, sc, 1)
        except Exception as exc:
            if policy.attempts <= 1 or not self._transient(step, exc):
                raise
            self._emit("step_retry", sc.run_id, step.id, attempt=1, error=repr(exc))

        def before_sleep(state: Any) -> None:
            exc = state.outcome.exception() if state.outcome else None
            self._emit("step_retry", sc.run_id, step.id, attempt=state.attempt_number + 1, error=repr(exc))

        retrying = AsyncRetrying(
            stop=stop_after_attempt(policy.attempts - 1),
            wait=wait_exponential_jitter(multiplier=policy.initial, max=policy.maximum, jitter=policy.jitter),
            retry=retry_if_exception(lambda e: self._transient(step, e)),
            before_sleep=before_sleep,
            reraise=True,
        )
        await asyncio.sleep(min(policy.maximum, policy.initial))
        async for attempt in retrying:
            with attempt:
                return await self._once(step, sc, attempt.retry_state.attempt_number + 1)
        raise AssertionError("unreachable")  # pragma: no cover

    def _transient(self, step: Step, exc: BaseException) -> bool:
        return step.on_error is None and self.classifier.classify(exc) is FailureKind.TRANSIENT

    async def _once(self, step: Step, sc: StepContext, attempt: int) -> Mapping[str, Any] | None:
        sc.attempt = attempt
        sc.compensations.clear()
        try:
            return await self._call(step, sc)
        except Exception as exc:
            if step.on_error is not None:
                handled: Mapping[str, Any] | None = await _maybe_await(step.on_error(exc, sc))
                if handled is not None:
                    return handled
            raise

    async def _call(self, step: Step, sc: StepContext) -> Mapping[str, Any] | None:
        if inspect.iscoroutinefunction(step.fn):
            work: Awaitable[Any] = step.fn(sc)
        else:
            work = asyncio.to_thread(step.fn, sc)
        if step.timeout is None and step.idle_timeout is None:  # no watchdog needed
            result: Mapping[str, Any] | None = await _maybe_await(await work)
            return result
        task = asyncio.ensure_future(work)
        deadline = None if step.timeout is None else time.monotonic() + step.timeout
        sc.heartbeat()
        try:
            while True:
                waits = [1.0]
                if deadline is not None:
                    waits.append(deadline - time.monotonic())
                if step.idle_timeout is not None:
                    waits.append(sc.last_heartbeat + step.idle_timeout - time.monotonic())
                done, _ = await asyncio.wait({task}, timeout=max(0.0, min(waits)))
                if done:
                    finished: Mapping[str, Any] | None = await _maybe_await(task.result())
                    return finished
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    raise StepTimeout(f"step {step.id!r} timed out after {step.timeout}s")
                if step.idle_timeout is not None and now - sc.last_heartbeat >= step.idle_timeout:
                    raise StepTimeout(f"step {step.id!r} sent no heartbeat for {step.idle_timeout}s")
        finally:
            if not task.done():
                task.cancel()

    async def _finish_early(self, run: _Run, step: Step, status: str, message: str) -> None:
        ctx = run.ctx
        done, skipped = self._settled(run)
        rest = [s for s in run.workflow.steps if s.id not in done and s.id not in skipped]
        if rest:
            ctx.merge({"todo": self._todos(rest, "skipped")})
        ctx.put("final_output", message)
        self._emit("finish_requested", ctx.run_id, step.id, status=status, message=message)
        raise _Stop(RunStatus(status))

    # == failures ===================================================================
    async def _fail(
        self, run: _Run, step: Step, exc: BaseException, sc: StepContext, start_version: int
    ) -> None:
        ctx = run.ctx
        kind = self.classifier.classify(exc)
        logger.info("step %s failed (%s): %r", step.id, kind, exc, extra={"run_id": ctx.run_id})
        self._emit(
            "step_failed", ctx.run_id, step.id, failure=str(kind), error=repr(exc), attempts=sc.attempt
        )
        events: list[dict[str, Any]] = []
        rolled, failures = await self._compensate(ctx, step, sc, events)
        rolled.append(await self._restore(run, step, start_version, events))
        report = self._report(run, step, exc, kind, sc.attempt, rolled, failures)
        ctx.merge(
            {
                "todo": self._todos([step], "failed", sc.attempt),
                "execution_history": [
                    {
                        "node": step.id,
                        "name": step.title,
                        "status": "failed",
                        "kind": str(kind),
                        "error": repr(exc),
                    }
                ],
                "event_log": events,
            }
        )
        ctx.put("failure_report", report.to_dict())
        if failures:  # a broken rollback is never papered over: stop, FAILED, consistent
            raise _Stop(RunStatus.FAILED, report)
        if kind is FailureKind.SYSTEM and self.alert is not None:
            await _maybe_await(self.alert(report))
        if kind is FailureKind.LOGIC and self.replan is not None and await self._replan(run, report):
            return
        choice = await self._decide(report)
        if choice is None:
            ctx.put("pending_decision", report.to_dict())
            raise _Stop(RunStatus.PAUSED, report)
        await self._apply_decision(run, report, choice)

    async def _compensate(
        self, ctx: ExecutionContext, step: Step, sc: StepContext, events: list[dict[str, Any]]
    ) -> tuple[list[str], list[str]]:
        rolled: list[str] = []
        failures: list[str] = []
        for comp in reversed(sc.compensations):
            label = f"{comp.kind}: {comp.description}"
            try:
                await _maybe_await(comp.fn())
            except Exception as exc:
                failures.append(f"{label} FAILED: {exc!r}")
                events.append(
                    Event(
                        kind="rollback_failed",
                        run_id=ctx.run_id,
                        step=step.id,
                        detail={"action": label, "error": repr(exc)},
                    ).to_dict()
                )
                self._emit("rollback_failed", ctx.run_id, step.id, action=label, error=repr(exc))
                continue
            rolled.append(label)
            events.append(
                Event(
                    kind="rollback_action", run_id=ctx.run_id, step=step.id, detail={"action": label}
                ).to_dict()
            )
            self._emit("rollback_action", ctx.run_id, step.id, action=label)
        return rolled, failures

    async def _restore(self, run: _Run, step: Step, start_version: int, events: list[dict[str, Any]]) -> str:
        """Seed 004 §4.2: back to the snapshot taken before this item (else the last one)."""
        ctx = run.ctx
        target = start_version if start_version > 0 else ctx.version
        if ctx.version != target or ctx.dirty:  # the step may have written to the context
            cp = await self.store.load(ctx.run_id, target)
            if cp is not None:
                ctx.restore(cp.state)
                ctx.version = cp.version if ctx.version == target else ctx.version
        after = ctx.node_id or "start"
        label = f"state restored to version {target} (as after '{after}')"
        run.settled_cache = None
        events.append(
            Event(
                kind="state_restored", run_id=ctx.run_id, step=step.id, detail={"version": target}
            ).to_dict()
        )
        self._emit("state_restored", ctx.run_id, step.id, version=target)
        return label

    def _report(
        self,
        run: _Run,
        step: Step,
        exc: BaseException,
        kind: FailureKind,
        attempts: int,
        rolled: list[str],
        failures: list[str],
    ) -> FailureReport:
        ctx = run.ctx
        pos, total = run.workflow.position(step.id)
        options = [Decision.RETRY, Decision.SKIP, *([Decision.REPLAN] if self.replan else []), Decision.ABORT]
        return FailureReport(
            run_id=ctx.run_id,
            item_id=step.id,
            item_name=step.title,
            phase=step.phase,
            position=pos,
            total=total,
            kind=kind,
            error_type=type(exc).__name__,
            error=str(exc)[:2000],
            attempts=attempts,
            possible_causes=possible_causes(kind),
            rolled_back=rolled,
            rollback_failures=failures,
            restored_version=ctx.version,
            options=[] if failures else options,
        )

    async def _decide(self, report: FailureReport) -> Decision | None:
        if self.decisions is None:
            return None
        return await self.decisions.decide(report)

    async def _apply_decision(self, run: _Run, report: FailureReport, choice: Decision) -> None:
        ctx = run.ctx
        step = run.workflow.get(report.item_id)
        ctx.merge(
            {
                "event_log": [
                    Event(
                        kind="decision",
                        run_id=ctx.run_id,
                        step=report.item_id,
                        detail={"decision": str(choice)},
                    ).to_dict()
                ]
            }
        )
        self._emit("decision", ctx.run_id, report.item_id, decision=str(choice))
        ctx.put("pending_decision", None)
        if choice is Decision.ABORT:
            raise _Stop(RunStatus.CANCELLED, report)
        if choice is Decision.REPLAN:
            if self.replan is None or not await self._replan(run, report):
                raise _Stop(RunStatus.FAILED, report)
            return
        status = "skipped" if choice is Decision.SKIP else "pending"
        if step is not None:
            ctx.merge({"todo": self._todos([step], status)})
            run.settled_cache = None
        await self.store.commit(ctx, node_id=ctx.node_id, metadata={"decision": str(choice)})

    async def _replan(self, run: _Run, report: FailureReport) -> bool:
        assert self.replan is not None
        ctx = run.ctx
        steps = await _maybe_await(self.replan(report, ctx))
        if not steps:
            return False
        done, _ = self._settled(run)
        run.workflow = run.workflow.replace_remaining(done, steps)
        ctx.merge({"todo": self._todos([s for s in run.workflow.steps if s.id not in done], "pending")})
        run.hint = 0
        run.settled_cache = None
        ctx.merge(
            {
                "event_log": [
                    Event(
                        kind="replanned",
                        run_id=ctx.run_id,
                        step=report.item_id,
                        detail={"steps": [s.id for s in steps]},
                    ).to_dict()
                ]
            }
        )
        ctx.put("pending_decision", None)
        await self.store.commit(ctx, node_id=ctx.node_id, metadata={"replanned": True})
        self._emit("replanned", ctx.run_id, report.item_id, steps=[s.id for s in steps])
        return True

    # == bookkeeping ================================================================
    async def _after_checkpoint(self, run: _Run, step: Step, version: int) -> None:
        ctx, workflow = run.ctx, run.workflow
        update: dict[str, Any] = {}
        if self.on_checkpoint is not None:
            update.update(await _maybe_await(self.on_checkpoint(version, ctx)) or {})
        done, skipped = self._settled(run)
        if workflow.phase_settled(step.phase, done, skipped):
            phase = next(p for p in workflow.phases if p.id == step.phase)
            self._emit("phase_done", ctx.run_id, step.id, phase=phase.id)
            if self.on_phase_complete is not None:
                update.update(await _maybe_await(self.on_phase_complete(phase, ctx)) or {})
        if update:
            ctx.merge(update)
            await self.store.commit(ctx, node_id=step.id, metadata={"context_hook": True})

    async def _finish(self, run: _Run, status: RunStatus, report: FailureReport | None = None) -> RunResult:
        ctx = run.ctx
        ctx.put("_lease", None)
        version = await self.store.commit(ctx, node_id=ctx.node_id, status=status)
        self._emit(
            {
                RunStatus.COMPLETED: "completed",
                RunStatus.PAUSED: "paused",
                RunStatus.CANCELLED: "cancelled",
            }.get(status, "failed"),
            ctx.run_id,
            version=version,
        )
        return RunResult(
            run_id=ctx.run_id, status=status, version=version, state=ctx._state_ref(), report=report
        )

    def _todos(self, steps: list[Step], status: str, attempts: int = 0) -> dict[str, Any]:
        return {
            s.id: {"name": s.title, "phase": s.phase, "status": status, "attempts": attempts} for s in steps
        }

    def _lease(self) -> dict[str, Any]:
        return new_lease(self.owner, self.lease_ttl)

    def _emit(self, event: str, run_id: str, step: str | None = None, **detail: Any) -> None:
        if self.on_event is not None:
            self.on_event(Event(kind=event, run_id=run_id, step=step, detail=detail))
