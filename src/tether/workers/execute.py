"""Execute or resume one run by id, as a worker does for each message it receives.

Delivery is at least once: a message may arrive twice, late, or after the run ended. The
broker never decides who executes a run; the run's lease in the store does. So a message
is only a hint to look at the run:

* finished, paused without a decision, or failed without one: nothing to do (dropped);
* RUNNING with a live lease: another worker executes it (dropped);
* PENDING (submitted, not started), INTERRUPTED, or RUNNING with a dead lease: resumed here.
  Two workers racing for it both try to take the lease in a version-checked commit; one
  wins, the other gets :class:`~tether.errors.RunInProgress` and drops the message.

The message of a run submitted ready to start carries its workflow and, when small, the
state its submitter stored as version 1 (``submit``): the worker then takes the run without
reading it, in a write the store accepts only while the run is still PENDING at version 1.
A run changed, paused, taken or deleted since is looked at as above, and runs as stored,
never as the message says (the broker is trusted with a first state as it is with the
decision a message may carry).

A run whose worker died inside a step is resumed and the step runs again. Each such crash
is on record in the run's event log (the ``interrupted`` entry the resume writes), so a
step that kills its worker every time is counted in the store, across workers: past
``max_crashes`` the run ends FAILED with a failure report instead of killing the fleet.

Shutdown (SIGTERM, Celery's warm shutdown) sets :data:`DRAINING`: a run executing here
stops after its current step's checkpoint, or, when that step is still running after
``drain_timeout`` seconds, is stopped at once from its last checkpoint. Either way it is
committed INTERRUPTED with its lease released, so the message handed back to the broker
is taken by another worker at once, without waiting for the lease to expire.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tether.errors import (
    ConfigError,
    RunInProgress,
    RunNotFound,
    RunNotPaused,
    TetherError,
    VersionConflict,
    WrongRunStatus,
)
from tether.runtime import Event, Runner, RunResult
from tether.runtime.failures import FailureKind
from tether.runtime.lease import HOST, lease_is_dead
from tether.runtime.report import Decision, FailureReport
from tether.state import ExecutionContext, RunInfo, RunStatus
from tether.state.reserved import runtime_get, runtime_update
from tether.stores.base import CheckpointStore
from tether.workers.registry import WORKFLOW_KEY, Entry, Registry, UnknownWorkflow

__all__ = ["DRAINING", "Outcome", "RunExecutor", "crash_site", "holder_gone", "nothing_to_do", "todo_for"]

logger = logging.getLogger(__name__)

try:  # a holder that lost its lease to another worker (fenced stores)
    from tether.errors import LeaseLost  # type: ignore[attr-defined,unused-ignore]
except ImportError:  # pragma: no cover - stores without fencing tokens

    class LeaseLost(TetherError):  # type: ignore[no-redef]
        """Stand-in until the stores fence writes by lease token."""


DRAINING = threading.Event()
"""Set when this process shuts down: runs executing here stop before their next step."""

CRASH_REASON = "its process stopped"
"""How the runner's resume records a holder that died (the start of its reason)."""

Action = Literal["executed", "dropped", "failed", "requeue"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one message led to."""

    run_id: str
    action: Action
    status: str | None
    reason: str = ""


class Draining(Exception):
    """Raised before a step to stop a run because its worker shuts down."""


class _DrainWatch:
    """Cancels the task driving a run when its worker drains and the run's step is still
    running ``timeout`` seconds later. The drain is a :class:`threading.Event` set from a
    signal handler, so it is looked at every tenth of a second: by a timer on the event
    loop, not a task of its own (a short run pays one timer, never a task switch)."""

    def __init__(self, draining: threading.Event, timeout: float) -> None:
        self._draining = draining
        self._timeout = timeout
        self._task = asyncio.current_task()
        self._loop = asyncio.get_running_loop()
        self._fired = False
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(0.1, self._look)

    def _look(self) -> None:
        if self._draining.is_set():
            self._timer = self._loop.call_later(self._timeout, self._cancel)
        else:
            self._timer = self._loop.call_later(0.1, self._look)

    def _cancel(self) -> None:
        self._timer = None
        if self._task is not None and not self._task.done():
            self._fired = True
            self._task.cancel()  # the runner records INTERRUPTED from the last checkpoint

    def cancelled_it(self) -> bool:
        """Whether the drain cancelled the task (then it is uncancelled: the run's message
        is handed back, the task goes on)."""
        if self._fired and self._task is not None:
            self._task.uncancel()
        return self._fired

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def todo_for(steps: list[Any]) -> dict[str, Any]:
    """The TODO list of a run that has not started: every step pending."""
    return {s.id: {"name": s.title, "phase": s.phase, "status": "pending", "attempts": 0} for s in steps}


def holder_gone(lease: Any, info: Any) -> bool:
    """Whether no live process holds ``lease``, counting the renewed deadline a heartbeat
    keeps in the run record (``RunInfo.lease_until``) on stores that keep one."""
    return lease_is_dead(lease, until=getattr(info, "lease_until", None))


def nothing_to_do(info: RunInfo, ctx: ExecutionContext, decision: str | None) -> str | None:
    """Why any worker would drop a message for this run (as ``store.load_run`` gives it),
    or None when one would execute or resume it: what a worker decides on each message,
    and what ``tether submit --resend`` tells its user instead of sending one for nothing."""
    status = info.status
    if status in (RunStatus.COMPLETED, RunStatus.CANCELLED):
        return "it has finished"
    if status in (RunStatus.PAUSED, RunStatus.FAILED) and decision is None:
        return "it waits for a person (resume it with a decision)"
    lease = runtime_get(ctx, "lease")
    if status is RunStatus.RUNNING and not holder_gone(lease, info):
        holder = lease.get("owner") if isinstance(lease, dict) else "?"
        return f"another worker holds its lease ({holder})"
    return None


def crash_site(ctx: ExecutionContext) -> tuple[str | None, int]:
    """Where a RUNNING run's dead holder stopped, and how many holders died there before.

    The place is the step recorded running (a retried or non-idempotent step), else the
    point after the last checkpointed step; every earlier death there is in the event log
    as the ``interrupted`` entry the resume after it wrote, so the count is in the store and
    holds across workers and restarts."""
    todo = runtime_get(ctx, "todo", {})
    running = next((sid for sid, t in todo.items() if t.get("status") == "running"), None)
    after = ctx.node_id
    count = 0
    for e in runtime_get(ctx, "event_log", []):
        if not isinstance(e, dict):
            continue
        detail = e.get("detail") or {}
        if e.get("kind") != "interrupted" or not str(detail.get("reason", "")).startswith(CRASH_REASON):
            continue
        if (running is not None and e.get("step") == running) or (
            running is None and e.get("step") is None and detail.get("after") == after
        ):
            count += 1
    return running, count


def next_step(ctx: ExecutionContext) -> str | None:
    """The first step of the TODO list not settled yet (what a resume would run)."""
    todo = runtime_get(ctx, "todo", {})
    return next((sid for sid, t in todo.items() if t.get("status") not in ("done", "skipped")), None)


class RunExecutor:
    """Executes runs by id on one store, with the workflows of one registry.

    Args:
        lease_ttl: the lease a runner here takes; a holder that stops renewing it is
            taken over this long after its last renewal (at once on the same host when
            its process is gone).
        max_crashes: how many times a step may kill its worker before the run ends FAILED.
        drain_timeout: on shutdown, how long to let the current step finish before the
            run is stopped from its last checkpoint.
        owner: the lease owner written by this process's runners.
        on_event: receives every event of the runs executed here.
    """

    def __init__(
        self,
        store: CheckpointStore,
        registry: Registry,
        *,
        lease_ttl: float = 30.0,
        max_crashes: int = 3,
        drain_timeout: float = 10.0,
        owner: str | None = None,
        on_event: Callable[[Event], None] | None = None,
        draining: threading.Event | None = None,
    ) -> None:
        if type(max_crashes) is not int or max_crashes < 1:
            raise ConfigError(f"max_crashes must be a whole number >= 1, got {max_crashes!r}")
        self.store = store
        self.registry = registry
        self.lease_ttl = lease_ttl
        self.max_crashes = max_crashes
        self.drain_timeout = drain_timeout
        self.owner = owner or f"tether-worker:{HOST}:{threading.get_native_id()}"
        self.on_event = on_event
        self.draining = draining or DRAINING
        self._runners: dict[str, tuple[Entry, Runner]] = {}

    async def execute(
        self,
        run_id: str,
        *,
        decision: str | None = None,
        workflow: str | None = None,
        first: Mapping[str, Any] | None = None,
    ) -> Outcome:
        """Execute or resume ``run_id`` if this message should; see the module docstring.

        ``workflow`` (from a submitter that stored the run ready to start) lets a PENDING
        run start without a read of its own here: the runner's read checks the status, and
        anything but PENDING (a duplicate message, a run paused meanwhile) comes back
        unwritten to be looked at as any other message. With ``first``, the state the
        submitter stored, the runner does not read the run either: its take lands only
        while the run is still PENDING at that first version."""
        if self.draining.is_set():
            return Outcome(run_id, "requeue", None, "this worker is shutting down")
        if workflow is not None and decision is None and workflow in self.registry:
            entry = self.registry.get(workflow)
            if entry.workflow is not None:  # the runner checks it is PENDING still
                runner = self._runner(entry, {})
                try:
                    return await self._drive(runner, run_id, None, only=RunStatus.PENDING, first=first)
                except (WrongRunStatus, RunNotFound):
                    pass  # (nothing written) a duplicate, a run changed or deleted: looked at below
        loaded = await self.store.load_run(run_id)
        if loaded is None:
            return self._drop(run_id, None, "no such run in the store (deleted or expired)")
        info, ctx = loaded
        status = info.status
        why = nothing_to_do(info, ctx, decision)
        if why is not None:
            return self._drop(run_id, status, why)
        name = ctx.get(WORKFLOW_KEY)
        try:
            entry = self.registry.get(str(name))
        except UnknownWorkflow as exc:
            return await self._give_up(ctx, status, str(exc), "UnknownWorkflow", step=None)
        if status is RunStatus.RUNNING:  # its holder died: at the same place, again and again?
            running, before = crash_site(ctx)
            count = before + 1
            if count >= self.max_crashes:
                sid = running or next_step(ctx)
                why = (
                    f"step {sid!r} stopped its worker process {count} times (killed, crashed or out "
                    "of memory); the run is not retried again. Fix the step, then resume the run "
                    "with a decision"
                )
                return await self._give_up(ctx, status, why, "WorkerLost", step=sid, attempts=count)
        if status is RunStatus.PENDING:
            try:
                await self._prepare(ctx, entry)
            except (VersionConflict, RunNotPaused):
                return self._drop(run_id, status, "another worker started it first")
        state = ctx.state_view()
        runner = self._runner(entry, state)
        settle = entry.settle
        after = None if settle is None else (lambda result: settle(self.store, state, runner, result))
        return await self._drive(runner, run_id, decision, after=after)

    # == internals =====================================================================
    async def _prepare(self, ctx: ExecutionContext, entry: Entry) -> None:
        """A submitted run's initial state and TODO list, when its submitter could not
        make them (it did not have the workflow registered)."""
        update: dict[str, Any] = {}
        if entry.prepare is not None:
            update.update(entry.initial_state(ctx.state_view()))
        if not runtime_get(ctx, "todo") and entry.steps():
            update.update(runtime_update(todo=todo_for(entry.steps())))
        if update:
            ctx.merge(update)
            await self.store.commit(ctx, status=RunStatus.PENDING, _require_status=RunStatus.PENDING)

    def _runner(self, entry: Entry, state: Mapping[str, Any]) -> Runner:
        """The runner of a run of ``entry``, holding leases as this executor's owner and
        stopping before its next step once this process drains. A plain workflow's runner
        serves all its runs (a runner keeps nothing of a run between drives); a factory's
        is built per run, from the run's state."""
        if entry.factory is None:
            cached = self._runners.get(entry.name)
            if cached is not None and cached[0] is entry:
                return cached[1]
        runner = entry.runner(self.store, state)
        runner.owner = self.owner
        runner.lease_ttl = self.lease_ttl
        user_events = runner.on_event
        draining = self.draining

        def before_step() -> None:
            if draining.is_set():
                raise Draining(f"the worker on {HOST} is shutting down; another worker continues the run")

        runner.before_step = before_step
        sinks = [sink for sink in (user_events, self.on_event) if sink is not None]
        if len(sinks) > 1:

            def events(event: Event) -> None:
                for sink in sinks:
                    sink(event)

            runner.on_event = events
        else:
            runner.on_event = sinks[0] if sinks else None
        if entry.factory is None:
            self._runners[entry.name] = (entry, runner)
        return runner

    async def _drive(
        self,
        runner: Runner,
        run_id: str,
        decision: str | None,
        *,
        only: RunStatus | None = None,
        first: Mapping[str, Any] | None = None,
        after: Callable[[RunResult], Awaitable[RunResult]] | None = None,
    ) -> Outcome:
        """Drive the run in this task (then ``after``: the workflow's own resume, see
        ``Entry.settle``); a drain that finds its step still running after ``drain_timeout``
        cancels it here (the runner records INTERRUPTED from the last checkpoint)."""
        watch = _DrainWatch(self.draining, self.drain_timeout)
        try:
            result = await runner.resume(run_id, decision=decision, only=only, first=first)
            if after is not None:
                result = await after(result)
        except RunInProgress as exc:
            return self._drop(run_id, RunStatus.RUNNING, f"another worker took it first ({exc})")
        except LeaseLost as exc:
            return self._drop(run_id, None, f"this worker lost its lease: {exc}")
        except (Draining, asyncio.CancelledError) as exc:
            if isinstance(exc, asyncio.CancelledError) and not watch.cancelled_it():
                raise  # cancelled by its caller, not by a drain
            logger.warning("run %s: stopped for shutdown; handed back to the broker", run_id)
            return Outcome(run_id, "requeue", str(RunStatus.INTERRUPTED), "the worker is shutting down")
        finally:
            watch.close()
        logger.info("run %s: %s at version %d", run_id, result.status, result.version)
        return Outcome(run_id, "executed", str(result.status))

    async def _give_up(
        self,
        ctx: ExecutionContext,
        status: RunStatus,
        why: str,
        error_type: str,
        *,
        step: str | None,
        attempts: int = 0,
    ) -> Outcome:
        """End the run FAILED with a report (taken only while nobody holds it)."""
        todo = runtime_get(ctx, "todo", {})
        ids = list(todo)
        item = todo.get(step) or {} if step else {}
        report = FailureReport(
            run_id=ctx.run_id,
            item_id=step or "",
            item_name=str(item.get("name") or step or ""),
            phase=str(item.get("phase") or ""),
            position=(ids.index(step) + 1) if step in ids else 0,
            total=len(ids),
            kind=FailureKind.SYSTEM,
            error_type=error_type,
            error=why,
            attempts=attempts,
            possible_causes=[
                "the step runs out of memory or crashes the interpreter (a C extension, os._exit)",
                "the step kills its own process, or the host's OOM killer does",
            ]
            if error_type == "WorkerLost"
            else ["the workers were started without this workflow in their registry"],
            restored_version=ctx.version,
            options=[Decision.RETRY, Decision.SKIP, Decision.ABORT],
        )
        update: dict[str, Any] = {
            "failure_report": report.to_dict(),
            "pending_decision": None,
            "lease": None,
            "event_log": [
                Event(kind="worker_gave_up", run_id=ctx.run_id, step=step, detail={"reason": why}).to_dict()
            ],
        }
        if step in todo:
            update["todo"] = {step: {**todo[step], "status": "failed", "attempts": attempts}}
        ctx.merge(runtime_update(**update))
        try:
            await self.store.commit(ctx, status=RunStatus.FAILED, _require_status=status)
        except (VersionConflict, RunNotPaused):
            return self._drop(ctx.run_id, status, "another worker changed it meanwhile")
        logger.error("run %s: FAILED: %s", ctx.run_id, why, extra={"run_id": ctx.run_id})
        return Outcome(ctx.run_id, "failed", str(RunStatus.FAILED), why)

    def _drop(self, run_id: str, status: RunStatus | None, why: str) -> Outcome:
        logger.info("run %s: message dropped: %s", run_id, why, extra={"run_id": run_id})
        return Outcome(run_id, "dropped", None if status is None else str(status), why)
