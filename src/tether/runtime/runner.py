"""The runner: executes a workflow's steps, checkpointing after every one.

What it keeps is checkpointed with the run: ``execution_history`` (one entry per
finished step, appended) and, under the reserved key ``_tether``
(:mod:`tether.state.reserved`), the TODO list (status pending|running|done|failed|
skipped per step), the event log, the last failure report, the decision waiting, the
lease and the pause reason.

Resume after a crash: the latest checkpoint is loaded, the executed step ids rebuild
the dependency tracker, and the step that was running when the process died runs
again, continuing its attempt count; a step declared ``idempotent=False`` pauses the run
for a decision instead. A live lease held by another runner makes ``start``/``resume``
raise :class:`RunInProgress`; a lease whose process is gone (same host) or whose time
ran out is taken over.

Every exit from a drive leaves the run consistent (see ``runtime/drive.py``): a step
value the state refuses is a DATA failure with a report; cancellation, Ctrl-C and
errors of the runner's own hooks commit INTERRUPTED; a PAUSED or CANCELLED status stored
by another process is adopted at the next step boundary; a store that fails a commit
pauses the run. The lease is released in every case, but one: a runner whose lease was
taken over (it stalled past it) gets :class:`~tether.errors.LeaseLost` from ``start`` /
``resume`` and writes nothing more, since the run is another runner's now.

Every write of a drive carries its lease's fencing token, and a heartbeat renews the lease
while a step runs (``runtime/heartbeat.py``), so a step may last far longer than the lease.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from tether.errors import (
    LeaseLost,
    RunExists,
    RunInProgress,
    RunNotFound,
    RunNotPaused,
    VersionConflict,
    WrongRunStatus,
)
from tether.runtime.attempts import StepTimeout, attempt_step
from tether.runtime.drive import Drive, DriveSettings, RunResult, Stop
from tether.runtime.events import Event
from tether.runtime.failures import Classifier, DataError, FailureKind, GaveUp, finish_kind
from tether.runtime.lease import HOST, check_lease
from tether.runtime.report import Decision, DecisionHandler, FailureReport, possible_causes, suggestions_of
from tether.runtime.workflow import Phase, RetryPolicy, Step, StepContext, Workflow
from tether.state import ExecutionContext, ReducerRegistry, RunStatus, default_registry
from tether.state.reserved import (
    REDUCER,
    RESERVED,
    ROUTE,
    check_user_keys,
    runtime_get,
    runtime_update,
    upgrade_context,
)
from tether.stores.base import CheckpointStore
from tether.tools.redact import default_redactor, redact_exception

__all__ = ["RunResult", "Runner", "StepReturnError", "StepTimeout", "runtime_reducers"]

logger = logging.getLogger(__name__)

Replanner = Callable[[FailureReport, ExecutionContext], "list[Step] | None | Awaitable[list[Step] | None]"]
Alert = Callable[[FailureReport], Any]
PhaseHook = Callable[
    [Phase, ExecutionContext], "Mapping[str, Any] | None | Awaitable[Mapping[str, Any] | None]"
]
CheckpointHook = Callable[
    [int, ExecutionContext], "Mapping[str, Any] | None | Awaitable[Mapping[str, Any] | None]"
]


def runtime_reducers(base: ReducerRegistry | None = None) -> ReducerRegistry:
    """The reducers the runner's own keys need, on top of ``base`` (or the defaults)."""
    return (base or default_registry()).copy().register(RESERVED, REDUCER)


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class StepReturnError(DataError):
    """A step returned something other than a mapping of state updates or None."""


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
        on_event: receives every :class:`Event` (progress views, logs, tests); an
            exception it raises is logged and skipped.
        store_wait: seconds to keep trying to record a pause or an interruption when
            the store fails; after that the run is left for ``resume``.
        redact: applied to every error text the runner stores or emits (failure reports,
            the execution history, the event log, pause reasons); default: the process's
            :func:`~tether.tools.redact.default_redactor`, so a database URL's password
            in an exception never reaches the checkpoint.
        lease_ttl: seconds a lease lasts without renewal: how long a run whose process
            stopped (SIGSTOP, a lost machine) waits before another runner may take it over.
            Steps may run far longer: a heartbeat renews the lease every third of it.
        heartbeat: renew the lease while steps run (a sidecar process; see
            ``runtime/heartbeat.py``); False only for tests of lease expiry.
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
        store_wait: float = 30.0,
        redact: Callable[[str], str] | None = None,
        heartbeat: bool = True,
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
        self.store_wait = store_wait
        self.redact: Callable[[str], str] = redact or default_redactor()
        self.heartbeat = heartbeat
        self.owner = f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.before_step: Callable[[], None] | None = None
        """Called before each step; what it raises stops the drive as an interruption
        (INTERRUPTED from the last checkpoint, lease released): how a worker that shuts down
        stops its runs between steps without a checkpoint hook, which would cost every run
        its folded final commit."""

    # == entry points ===============================================================
    async def start(self, run_id: str, inputs: Mapping[str, Any] | None = None) -> RunResult:
        """Start a new run; raises :class:`RunExists` if ``run_id`` is already stored."""
        check_user_keys(inputs or (), where="the run's inputs")
        ctx = ExecutionContext(run_id, dict(inputs or {}), reducers=self.reducers)
        run = self._new_run(ctx)
        ctx.merge(
            runtime_update(
                todo=self._todos(self.workflow.steps, "pending"),
                lease=run.lease(),
                failure_report=None,
                pending_decision=None,
                pause_reason=None,
            )
        )
        try:
            await run.take(require=None)
        except VersionConflict as exc:
            info = await self.store.get_run(run_id)
            raise RunExists(run_id, info.status if info else None) from exc
        run.record("run_started", steps=len(self.workflow), workflow=self.workflow.name)
        return await self._drive(run)

    async def run(
        self, run_id: str, inputs: Mapping[str, Any] | None = None, *, decision: Decision | str | None = None
    ) -> RunResult:
        """Start ``run_id``, or resume it if it is stored (``inputs`` are then ignored:
        the stored state wins). The call to make when a script may be run again."""
        if await self.store.get_run(run_id) is None:
            try:
                return await self.start(run_id, inputs)
            except RunExists:
                pass  # another process started it meanwhile
        return await self.resume(run_id, decision=decision)

    async def resume(
        self,
        run_id: str,
        *,
        decision: Decision | str | None = None,
        force: bool = False,
        only: RunStatus | None = None,
        first: Mapping[str, Any] | None = None,
    ) -> RunResult:
        """Continue a paused, interrupted or crashed run from its latest checkpoint.

        A FAILED run is left as it is unless a ``decision`` is given (after a human
        fixed what its failure report asked for); COMPLETED and CANCELLED runs are final.
        ``only``: continue the run only if it is stored with this status, else raise
        :class:`WrongRunStatus` having written nothing (a worker starting a run submitted
        PENDING, which must not continue one paused meanwhile, without a read of its own).
        ``first`` (with ``only``): the state the run was stored with as its version 1, as its
        submitter sent it along: the run is taken without being read, in a write that lands
        only while it is still ``only`` at version 1; else WrongRunStatus, nothing written.
        """
        if first is not None and only is not None:
            ctx = ExecutionContext(run_id, first, reducers=self.reducers)
            ctx.version = 1
            status, until, token = only, None, 0
        else:
            loaded = await self.store.load_run(run_id, reducers=self.reducers)
            if loaded is None:
                raise RunNotFound(run_id)
            info, ctx = loaded
            status, until, token = info.status, info.lease_until, info.fence
        if only is not None and status is not only:
            raise WrongRunStatus(run_id, str(status), "resume", f"only a {only} run is resumed here")
        finished = status in (RunStatus.COMPLETED, RunStatus.CANCELLED)
        if finished or (status is RunStatus.FAILED and decision is None):
            return RunResult(run_id=run_id, status=status, version=ctx.version, state=ctx.state_view())
        check_lease(run_id, runtime_get(ctx, "lease"), owner=self.owner, force=force, until=until)
        upgrade_context(ctx)  # a run stored by an earlier tether keeps its keys at the top
        run = self._new_run(ctx)
        ctx.merge(runtime_update(lease=run.lease(), pause_reason=None))
        if status is RunStatus.RUNNING:  # its holder stopped without a word: say so
            self._taken_over(run, token)
        try:
            await run.take(require=status, metadata={"resumed": True})
        except (VersionConflict, RunNotPaused, RunNotFound) as exc:
            if first is not None and only is not None:
                hint = "it is no longer stored as its submitter sent it (changed, taken or deleted)"
                raise WrongRunStatus(run_id, "changed", "start", hint) from exc
            if isinstance(exc, RunNotFound):
                raise
            raise RunInProgress(run_id, "another runner", " (it resumed first)") from exc
        run.record(
            "run_resumed", version=ctx.version, executed=ctx.executed_node_ids, workflow=self.workflow.name
        )
        return await self._drive(run, decision=decision)

    def _taken_over(self, run: Drive, token: int) -> None:
        """Record, in the take-over's commit, what the previous holder left unfinished. Its
        process may be dead, or only stalled (SIGSTOP, a long pause): then it may go on with
        its step when it wakes, and what it does until its next write (refused by its old
        token) is unconfirmed. It cannot write that down itself, so the new holder does."""
        ctx = run.ctx
        cut = [sid for sid, t in runtime_get(ctx, "todo", {}).items() if t.get("status") == "running"]
        for sid in cut:
            reason = "its process stopped during the step"
            run.record("interrupted", sid, log=True, publish=False, reason=reason)
        if not cut:  # no step had recorded its start: the one after this node was cut
            reason = "its process stopped"
            run.record("interrupted", None, log=True, publish=False, reason=reason, after=ctx.node_id)
            settled, skipped = self._settled(run)
            route = runtime_get(ctx, ROUTE)
            nxt = run.workflow.next_step(settled, skipped, hint=0, route=route)
            cut = [nxt.id] if nxt is not None else []
            run.settled_cache = None
        for sid in cut:
            run.record(
                "side_effects_unconfirmed",
                sid,
                log=True,
                token=token,
                reason=(
                    f"the runner holding lease fence {token} stopped in this step (or before it). If its "
                    "host still runs, its heartbeat killed the shell commands it ran through LocalSession "
                    "when its lease ran out, and it cannot start new ones; commands it ran over SSH and "
                    "any other side effect since its last checkpoint are unconfirmed: check them before "
                    "relying on this step's outcome"
                ),
            )

    def _new_run(self, ctx: ExecutionContext) -> Drive:
        settings = DriveSettings(
            store=self.store,
            reducers=self.reducers,
            owner=self.owner,
            lease_ttl=self.lease_ttl,
            store_wait=self.store_wait,
            redact=self.redact,
            on_event=self.on_event,
            heartbeat=self.heartbeat,
        )
        return Drive(ctx, self.workflow, settings, uuid.uuid4().hex[:12])

    # == the loop ===================================================================
    async def _drive(self, run: Drive, *, decision: Decision | str | None = None) -> RunResult:
        """Run steps until the run ends; whatever ends it, the run is left consistent (a
        lease taken over leaves it to its new holder, untouched)."""
        try:
            try:
                pending = runtime_get(run.ctx, "pending_decision")
                if pending:
                    report = FailureReport.from_dict(pending)
                    choice = Decision(decision) if decision else await self._decide(report)
                    if choice is None:
                        raise Stop(RunStatus.PAUSED, report, reason=_waiting(report))
                    await self._apply_decision(run, report, choice)
                await self._steps(run)
                stop = Stop(RunStatus.COMPLETED)
            except Stop as stopped:
                stop = stopped
            return await self._finish(run, stop)
        except LeaseLost as exc:  # another runner holds the run: write nothing more
            run.lost(exc)
            raise
        except BaseException as exc:  # cancelled, Ctrl-C, an error in a hook: not stranded
            await asyncio.shield(run.interrupt(exc))
            raise
        finally:
            run.end()

    async def _steps(self, run: Drive) -> None:
        while True:
            settled, skipped = self._settled(run)
            run.hint = run.workflow.settled_prefix(settled | skipped, run.hint)
            step = run.workflow.next_step(settled, skipped, hint=run.hint, route=runtime_get(run.ctx, ROUTE))
            if step is None:
                return
            if self.before_step is not None:
                self.before_step()
            await self._run_item(run, step)

    def _settled(self, run: Drive) -> tuple[set[str], set[str]]:
        """Executed and skipped step ids, cached until a step or a decision changes them."""
        if run.settled_cache is None:
            todo = runtime_get(run.ctx, "todo", {})
            skipped = {sid for sid, t in todo.items() if t.get("status") == "skipped"}
            run.settled_cache = (set(run.ctx.executed_node_ids), skipped)
        return run.settled_cache

    async def _run_item(self, run: Drive, step: Step) -> None:
        ctx = run.ctx
        run.step = step.id
        start_version = ctx.version
        item = runtime_get(ctx, "todo", {}).get(step.id) or {}
        first = 1
        if item.get("status") == "running":  # its process stopped inside it
            if not step.idempotent:
                raise self._cut_side_effect(run, step, int(item.get("attempts", 1)))
            first = int(item.get("attempts", 0)) + 1
        run.record("step_started", step.id, name=step.title)
        sc = StepContext(run_id=ctx.run_id, step=step, state=ctx, workflow=run.workflow)
        began = time.monotonic()

        async def mark(attempt: int) -> None:  # the attempt is on record before it runs
            ctx.merge_trusted(runtime_update(todo=self._todos([step], "running", attempt)))
            await run.commit(node_id=ctx.node_id, metadata={"attempt": attempt, "step": step.id})

        try:
            update = await attempt_step(
                step,
                sc,
                policy=step.retry or self.retry,
                first=first,
                transient=lambda exc: self._transient(step, exc),
                mark=mark,
                on_retry=lambda n, exc: self._retrying(run, step, n, exc),
            )
            if update is not None and not isinstance(update, Mapping):
                raise StepReturnError(
                    f"step {step.id!r} returned {type(update).__name__}; "
                    "return a mapping of state updates or None"
                )
            if update and RESERVED in update:
                raise StepReturnError(
                    f"step {step.id!r} returned the key {RESERVED!r}, which tether reserves for "
                    "its own bookkeeping; rename the key"
                )
            ctx.merge(dict(update or {}))  # refused values fail here, as the step's failure
        except LeaseLost:
            raise  # not the step's failure: the run is another runner's now
        except Exception as exc:
            await self._fail(run, step, exc, sc, start_version)
            return
        ctx.merge_trusted(
            {
                **runtime_update(todo=self._todos([step], "done", sc.attempt)),
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
        sc.leave_route()  # a routed step leaves the queue in the checkpoint that records it done
        if run.settled_cache is not None:
            run.settled_cache[0].add(step.id)
        last = self._completes(run, step, sc)
        if last:  # the run ends here: its status and the lease's release ride this commit
            ctx.merge_trusted(runtime_update(lease=None, pause_reason=None))
        else:
            lease = runtime_get(ctx, "lease")
            if not isinstance(lease, dict) or lease.get("expires_at", 0) - time.time() < self.lease_ttl / 2:
                ctx.merge_trusted(runtime_update(lease=run.lease()))
        version = await run.commit(
            node_id=step.id,
            status=RunStatus.COMPLETED if last else RunStatus.RUNNING,
            metadata={"node_name": step.name} if step.name else None,
        )
        run.step = None
        run.record("step_done", step.id, version=version, attempts=sc.attempt)
        await self._after_checkpoint(run, step, version)
        if last:
            raise Stop(RunStatus.COMPLETED, committed=True)
        if sc.finish_requested is not None:
            await self._finish_early(run, step, *sc.finish_requested)
        if sc.pause_requested or step.pause_after:
            reason = sc.pause_requested or f"review after {step.title}"
            run.record("pause_requested", step.id, reason=reason)
            raise Stop(RunStatus.PAUSED, reason=reason)

    def _completes(self, run: Drive, step: Step, sc: StepContext) -> bool:
        """Whether ``step``, just done, ends the run: no step left, no pause or early finish
        asked for, and no context hook that could add a commit after it. Then its checkpoint
        is also the run's final one (COMPLETED, lease released): one durable write less per
        run. A crash before that commit is a crash inside the last step (a resume runs it
        again, as any step cut before its checkpoint); no window is left where every step
        is done and the run still RUNNING."""
        if self.on_checkpoint is not None or self.on_phase_complete is not None:
            return False
        if sc.finish_requested is not None or sc.pause_requested or step.pause_after:
            return False
        settled, skipped = self._settled(run)
        route = runtime_get(run.ctx, ROUTE)
        return run.workflow.next_step(settled, skipped, hint=run.hint, route=route) is None

    def _retrying(self, run: Drive, step: Step, attempt: int, exc: BaseException) -> None:
        run.record("step_retry", step.id, attempt=attempt - 1, error=self.redact(repr(exc)))

    def _transient(self, step: Step, exc: BaseException) -> bool:
        return step.on_error is None and self.classifier.classify(exc) is FailureKind.TRANSIENT

    def _cut_side_effect(self, run: Drive, step: Step, attempt: int) -> Stop:
        """A non-idempotent step whose process stopped inside it: never re-run blindly."""
        ctx = run.ctx
        pos, total = run.workflow.position(step.id)
        report = FailureReport(
            run_id=ctx.run_id,
            item_id=step.id,
            item_name=step.title,
            phase=step.phase,
            position=pos,
            total=total,
            kind=FailureKind.SYSTEM,
            error_type="Interrupted",
            error=f"step {step.id!r} may have partly run; retry, skip or inspect "
            f"(its process stopped inside attempt {attempt}, and the step is not idempotent)",
            attempts=attempt,
            possible_causes=["the process was killed, crashed or lost its machine during the step"],
            restored_version=ctx.version,
            options=[Decision.RETRY, Decision.SKIP, Decision.TAKEOVER, Decision.ABORT],
        )
        run.record("side_effect_cut", step.id, log=True, publish=False, attempt=attempt)
        ctx.merge(runtime_update(failure_report=report.to_dict(), pending_decision=report.to_dict()))
        return Stop(RunStatus.PAUSED, report, reason=_waiting(report))

    async def _finish_early(self, run: Drive, step: Step, status: str, message: str) -> None:
        ctx = run.ctx
        done, skipped = self._settled(run)
        rest = [s for s in run.workflow.steps if s.id not in done and s.id not in skipped]
        if rest:
            ctx.merge(runtime_update(todo=self._todos(rest, "skipped")))
        ctx.put("final_output", message)
        run.record("finish_requested", step.id, status=status, message=message)
        report = None
        if status == "FAILED":  # every FAILED end comes with a report, even without an exception
            report = replace(
                self._report(run, step, GaveUp(message), finish_kind(message), 1, [], []), options=[]
            )
            ctx.merge(runtime_update(failure_report=report.to_dict()))
        raise Stop(RunStatus(status), report)

    # == failures ===================================================================
    async def _fail(
        self, run: Drive, step: Step, exc: BaseException, sc: StepContext, start_version: int
    ) -> None:
        ctx = run.ctx
        kind = self.classifier.classify(exc)
        logger.info("step %s failed (%s): %r", step.id, kind, exc, extra={"run_id": ctx.run_id})
        shown = self.redact(repr(exc))
        run.record("step_failed", step.id, failure=str(kind), error=shown, attempts=sc.attempt)
        events: list[dict[str, Any]] = []
        rolled, failures = await self._compensate(run, step, sc, events)
        rolled.append(await self._restore(run, step, start_version, events))
        report = self._report(run, step, exc, kind, sc.attempt, rolled, failures)
        ctx.merge(
            {
                **runtime_update(
                    todo=self._todos([step], "failed", sc.attempt),
                    event_log=events,
                    failure_report=report.to_dict(),
                ),
                "execution_history": [
                    {
                        "node": step.id,
                        "name": step.title,
                        "status": "failed",
                        "kind": str(kind),
                        "error": shown,
                    }
                ],
            }
        )
        if failures:  # a broken rollback is never papered over: stop, FAILED, consistent
            raise Stop(RunStatus.FAILED, report)
        if kind is FailureKind.SYSTEM and self.alert is not None:
            await _maybe_await(self.alert(report))
        if kind is FailureKind.LOGIC and self.replan is not None and await self._replan(run, report):
            return
        choice = await self._decide(report)
        if choice is None:
            ctx.merge(runtime_update(pending_decision=report.to_dict()))
            raise Stop(RunStatus.PAUSED, report, reason=_waiting(report))
        await self._apply_decision(run, report, choice)

    async def _compensate(
        self, run: Drive, step: Step, sc: StepContext, events: list[dict[str, Any]]
    ) -> tuple[list[str], list[str]]:
        """Run the step's compensations, newest first; their events go into ``events`` (the
        run's log gets them with the failure, after the state is restored)."""
        rolled: list[str] = []
        failures: list[str] = []
        for comp in reversed(sc.compensations):
            label = f"{comp.kind}: {comp.description}"
            try:
                await _maybe_await(comp.fn())
            except Exception as exc:
                shown = self.redact(repr(exc))
                failures.append(f"{label} FAILED: {shown}")
                events.append(run.record("rollback_failed", step.id, action=label, error=shown).to_dict())
                continue
            rolled.append(label)
            events.append(run.record("rollback_action", step.id, action=label).to_dict())
        return rolled, failures

    async def _restore(self, run: Drive, step: Step, start_version: int, events: list[dict[str, Any]]) -> str:
        """Roll the run back to the checkpoint taken before this step (else the last one), so a
        retried or skipped step starts from a state it did not half-write."""
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
        events.append(run.record("state_restored", step.id, version=target).to_dict())
        return label

    def _report(
        self,
        run: Drive,
        step: Step,
        exc: BaseException,
        kind: FailureKind,
        attempts: int,
        rolled: list[str],
        failures: list[str],
    ) -> FailureReport:
        ctx = run.ctx
        pos, total = run.workflow.position(step.id)
        options = [Decision.RETRY, Decision.SKIP, *([Decision.REPLAN] if self.replan else [])]
        options += [Decision.TAKEOVER, Decision.ABORT]
        return FailureReport(
            run_id=ctx.run_id,
            item_id=step.id,
            item_name=step.title,
            phase=step.phase,
            position=pos,
            total=total,
            kind=kind,
            error_type=type(exc).__name__,
            error=redact_exception(exc, self.redact),
            attempts=attempts,
            possible_causes=possible_causes(kind),
            rolled_back=rolled,
            rollback_failures=failures,
            restored_version=ctx.version,
            options=[] if failures else options,
            suggestions=[] if failures else [s for s in suggestions_of(exc) if s.decision in options],
        )

    async def _decide(self, report: FailureReport) -> Decision | None:
        if self.decisions is None:
            return None
        return await self.decisions.decide(report)

    async def _apply_decision(self, run: Drive, report: FailureReport, choice: Decision) -> None:
        ctx = run.ctx
        step = run.workflow.get(report.item_id)
        run.record("decision", report.item_id, log=True, decision=str(choice))
        ctx.merge(runtime_update(pending_decision=None))
        if choice is Decision.ABORT:
            raise Stop(RunStatus.CANCELLED, report)
        if choice is Decision.REPLAN:
            if self.replan is None or not await self._replan(run, report):
                raise Stop(RunStatus.FAILED, report)
            return
        if choice is Decision.TAKEOVER and step is not None:  # a person did it: done, with their note
            note = self.redact(report.note)
            run.record("takeover", step.id, log=True, publish=False, note=note)
            done = {"node": step.id, "name": step.title, "status": "takeover", "note": note}
            ctx.merge_trusted(
                {**runtime_update(todo=self._todos([step], "done")), "execution_history": [done]}
            )
            ctx.mark_executed(step.id)  # a routed step still queued runs next and reads takeover_note()
        status = "skipped" if choice is Decision.SKIP else "pending"
        if step is not None:
            if choice is not Decision.TAKEOVER:
                ctx.merge(runtime_update(todo=self._todos([step], status)))
            run.settled_cache = None
        await run.commit(node_id=ctx.node_id, metadata={"decision": str(choice)})

    async def _replan(self, run: Drive, report: FailureReport) -> bool:
        assert self.replan is not None
        ctx = run.ctx
        steps = await _maybe_await(self.replan(report, ctx))
        if not steps:
            return False
        done, _ = self._settled(run)
        run.workflow = run.workflow.replace_remaining(done, steps)
        ctx.merge(
            runtime_update(todo=self._todos([s for s in run.workflow.steps if s.id not in done], "pending"))
        )
        run.hint = 0
        run.settled_cache = None
        run.record("replanned", report.item_id, log=True, publish=False, steps=[s.id for s in steps])
        ctx.merge(runtime_update(pending_decision=None))
        await run.commit(node_id=ctx.node_id, metadata={"replanned": True})
        run.record("replanned", report.item_id, steps=[s.id for s in steps])
        return True

    # == bookkeeping ================================================================
    async def _after_checkpoint(self, run: Drive, step: Step, version: int) -> None:
        ctx, workflow = run.ctx, run.workflow
        update: dict[str, Any] = {}
        if self.on_checkpoint is not None:
            update.update(await _maybe_await(self.on_checkpoint(version, ctx)) or {})
        done, skipped = self._settled(run)
        if workflow.phase_settled(step.phase, done, skipped):
            phase = next(p for p in workflow.phases if p.id == step.phase)
            run.record("phase_done", step.id, phase=phase.id)
            if self.on_phase_complete is not None:
                update.update(await _maybe_await(self.on_phase_complete(phase, ctx)) or {})
        if update:
            check_user_keys(update, where="a context hook's update")
            ctx.merge(update)
            await run.commit(node_id=step.id, metadata={"context_hook": True})

    async def _finish(self, run: Drive, stop: Stop) -> RunResult:
        """Commit the status the drive ends with, the lease released (unless another
        process's status or a store failure already decided how it ends)."""
        while not stop.committed and stop.store_error is None:
            reason = stop.reason if stop.status is RunStatus.PAUSED else None
            run.ctx.merge(runtime_update(lease=None, pause_reason=reason))
            try:
                await run.commit(status=stop.status)
                break
            except Stop as outside:
                stop = outside
        if stop.store_error is not None:
            return await run.store_failed(stop.store_error)
        ctx, status = run.ctx, stop.status
        kind = {
            RunStatus.COMPLETED: "completed",
            RunStatus.PAUSED: "paused",
            RunStatus.CANCELLED: "cancelled",
        }
        run.record(kind.get(status, "failed"), version=ctx.version, reason=stop.reason)
        return RunResult(
            run_id=ctx.run_id, status=status, version=ctx.version, state=ctx.state_view(), report=stop.report
        )

    def _todos(self, steps: list[Step], status: str, attempts: int = 0) -> dict[str, Any]:
        return {
            s.id: {"name": s.title, "phase": s.phase, "status": status, "attempts": attempts} for s in steps
        }


def _waiting(report: FailureReport) -> str:
    choices = "|".join(str(o) for o in report.options) or "none (inspect the report)"
    return f"step {report.item_id!r} failed ({report.kind}): waiting for a decision: {choices}"
