"""Runs executed inside the server (start, resume, decide, pause and cancel), or, with a
broker configured, put on it for ``tether worker`` processes to execute.

Each run the server executes is an asyncio task owned here. One Runner per workflow
drives all of that workflow's runs, and they share one lease owner, so a run the server
paused is resumed by the server without a lease conflict, while a run held by another
live process is refused (409). Pause and cancel store the status; the runner executing
the run, here or elsewhere, adopts it at its next checkpoint. Every event goes to
the broadcaster, and after every checkpoint the run's context window (if it keeps one)
is measured, so crossings of the 70/85/90% thresholds are events too.

With a broker (``TETHER_BROKER_URL``), start, resume and decide store what they must and
enqueue the run instead of executing it here; the lease decides which worker executes it.
Without one, the server is a single process that also recovers after a restart: on start
it resumes the runs it was executing when it stopped (INTERRUPTED by its shutdown, or
RUNNING with a dead lease after a crash). Paused runs stay paused.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tether.context import Thresholds, UsageMonitor, window_from_run_state
from tether.errors import (
    ConfigError,
    RunNotFound,
    StoreError,
    TetherError,
    VersionConflict,
    WrongRunStatus,
)
from tether.runtime import Event, Runner, RunResult, Workflow
from tether.runtime.context_hooks import WINDOW_KEY
from tether.runtime.lease import check_lease
from tether.runtime.runner import Replanner
from tether.runtime.stream import EventBroadcaster
from tether.state import ExecutionContext, ReducerRegistry, RunStatus
from tether.state.reserved import runtime_get
from tether.stores.base import CheckpointStore
from tether.workers.execute import holder_gone
from tether.workers.registry import QUEUE_KEY, WORKFLOW_KEY

if TYPE_CHECKING:
    from tether.workers import Dispatcher

__all__ = ["WORKFLOW_KEY", "Executor", "ReplanUnavailable"]

logger = logging.getLogger(__name__)


class ReplanUnavailable(TetherError):
    """A ``replan`` decision for a run whose workflow has no replanner in this server."""

    def __init__(self, run_id: str, workflow: str | None) -> None:
        which = f"workflow {workflow!r}" if workflow else "this run's workflow"
        super().__init__(
            f"run {run_id!r} cannot be replanned by this server: no replanner is registered for "
            f"{which}, so there is nothing to make the new remaining steps. Choose retry, skip or "
            "abort, or start the server with a replanner for it (create_app(replanners=...) or "
            "`tether serve --replan WORKFLOW=module:attribute`).",
        )
        self.run_id = run_id


class Executor:
    """Owns the tasks of the runs this server executes."""

    def __init__(
        self,
        store: CheckpointStore,
        events: EventBroadcaster,
        workflows: Sequence[Workflow] = (),
        *,
        reducers: ReducerRegistry | None = None,
        thresholds: Thresholds | None = None,
        replanners: Mapping[str, Replanner] | None = None,
        dispatcher: Dispatcher | None = None,
    ) -> None:
        self.store = store
        self.dispatcher = dispatcher
        """With one, runs are enqueued for workers instead of executed here."""
        self.events = events
        self.workflows = {wf.name: wf for wf in workflows}
        self.replanners = dict(replanners or {})
        """By workflow name: what a ``replan`` decision calls for that workflow's runs."""
        unknown = sorted(set(self.replanners) - set(self.workflows))
        if unknown:
            raise ConfigError(f"replanners for workflows that are not registered: {', '.join(unknown)}")
        self.reducers = reducers
        self.thresholds = thresholds or Thresholds()
        self.owner = f"tether-serve:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._tasks: dict[str, asyncio.Task[RunResult | None]] = {}
        self._by_workflow: dict[str, Runner] = {}
        self._monitors: dict[str, UsageMonitor] = {}
        self.taps: list[Callable[[Event], None]] = []
        """Also called with every event of the runs executed here (traces)."""

    # == queries =====================================================================
    def executing(self, run_id: str) -> bool:
        return run_id in self._tasks

    def workflow_for(self, run_id: str, state: Mapping[str, Any]) -> Workflow:
        """The registered workflow of a run: named in its state, else the only one whose
        steps cover the run's TODO list."""
        name = state.get(WORKFLOW_KEY)
        if isinstance(name, str) and name in self.workflows:
            return self.workflows[name]
        todo = runtime_get(state, "todo")
        ids = set(todo) if isinstance(todo, dict) else set()
        fits = [wf for wf in self.workflows.values() if ids and ids <= {s.id for s in wf.steps}]
        if len(fits) == 1:
            return fits[0]
        known = ", ".join(sorted(self.workflows)) or "none"
        raise ConfigError(
            f"cannot tell which workflow run {run_id!r} belongs to (registered: {known}); "
            "start the server with `tether serve --workflow module:attribute` for it"
        )

    def options(self, run_id: str, state: Mapping[str, Any], offered: Sequence[str]) -> list[str]:
        """The decisions this server can carry out for a failed run: what the failing
        runner offered, with ``replan`` only when this server has a replanner for the
        run's workflow (and none at all when the report offered none: a broken rollback)."""
        if not offered:
            return []
        can = self.can_replan(run_id, state)
        order = ["retry", "skip", "replan", "takeover", "abort"]
        allowed = {str(o) for o in offered} - {"replan"} | ({"replan"} if can else set())
        return [o for o in order if o in allowed]

    def can_replan(self, run_id: str, state: Mapping[str, Any]) -> bool:
        try:
            return self.workflow_for(run_id, state).name in self.replanners
        except ConfigError:
            return False

    # == actions =====================================================================
    async def start(self, workflow: str, run_id: str, inputs: Mapping[str, Any]) -> None:
        wf = self.workflows.get(workflow)
        if self.dispatcher is not None and (wf is not None or not self.workflows):
            await self._submit(workflow, run_id, inputs, wf)
            return
        if wf is None:
            known = ", ".join(sorted(self.workflows)) or "none"
            raise ConfigError(f"no workflow named {workflow!r} is registered (registered: {known})")
        if await self.store.get_run(run_id) is not None or self.executing(run_id):
            raise VersionConflict(run_id, expected=0, actual=None)
        runner = self._runner(wf)
        self._spawn(run_id, runner, runner.start(run_id, {**inputs, WORKFLOW_KEY: wf.name}))

    async def resume(self, run_id: str, *, decision: str | None = None) -> None:
        """Continue a run in a server task (after a decision when one is given)."""
        if self.executing(run_id):
            raise WrongRunStatus(run_id, "RUNNING", "resume", "it is already executing in this server")
        info = await self.store.get_run(run_id)
        cp = await self.store.load(run_id) if info is not None else None
        if info is None or cp is None:
            raise RunNotFound(run_id)
        if info.status in (RunStatus.COMPLETED, RunStatus.CANCELLED):
            raise WrongRunStatus(run_id, str(info.status), "resume", "it has finished")
        pending = runtime_get(cp.state, "pending_decision")
        if decision is None and info.status is RunStatus.FAILED:
            raise WrongRunStatus(run_id, "FAILED", "resume", "send a decision (retry, skip, replan or abort)")
        if decision is not None and not pending and info.status is not RunStatus.FAILED:
            raise WrongRunStatus(run_id, str(info.status), "decide on", "it has no failure waiting")
        if decision == "replan" and not self.can_replan(run_id, cp.state):
            raise ReplanUnavailable(run_id, self._workflow_name(run_id, cp.state))
        if decision is not None and isinstance(pending, dict):
            allowed = self.options(run_id, cp.state, pending.get("options") or [])
            if decision not in allowed:
                raise ConfigError(f"{decision!r} is not offered here; choose one of {allowed}")
        self._check_lease(run_id, runtime_get(cp.state, "lease"), until=info.lease_until)
        if self.dispatcher is not None and isinstance(cp.state.get(WORKFLOW_KEY), str):
            from tether.workers import hand_to_workers

            queue = cp.state.get(QUEUE_KEY)
            await hand_to_workers(
                self.store,
                self.dispatcher,
                run_id,
                decision=decision,
                queue=queue if isinstance(queue, str) else None,
            )
            return
        runner = self._runner(self.workflow_for(run_id, cp.state))
        self._spawn(run_id, runner, runner.resume(run_id, decision=decision, force=True))

    async def recover(self) -> list[str]:
        """Resume the runs this server was executing when it stopped: INTERRUPTED by its
        shutdown, or RUNNING with a dead lease after a crash (never PAUSED ones, nor runs
        submitted to workers). Returns their ids."""
        resumed: list[str] = []
        for status in (RunStatus.INTERRUPTED, RunStatus.RUNNING):
            for info in await self.store.list_runs(status=status, limit=1000):
                try:
                    cp = await self.store.load(info.run_id)
                except StoreError as exc:  # unreadable here (damaged, another key): not ours to run
                    logger.warning("not resuming run %s: %s", info.run_id, exc)
                    continue
                if cp is None or cp.state.get(QUEUE_KEY) or cp.state.get(WORKFLOW_KEY) not in self.workflows:
                    continue
                if self.executing(info.run_id) or not holder_gone(runtime_get(cp.state, "lease"), info):
                    continue
                runner = self._runner(self.workflows[str(cp.state[WORKFLOW_KEY])])
                self._spawn(info.run_id, runner, runner.resume(info.run_id))
                resumed.append(info.run_id)
        if resumed:
            logger.warning(
                "resumed %d run(s) this server was executing: %s", len(resumed), ", ".join(resumed)
            )
        return resumed

    async def stop(self, run_id: str, status: RunStatus) -> str:
        """Pause or cancel by storing the status: a runner executing the run (here or in
        another process) adopts it at its next checkpoint, keeping the step's work.

        Returns the status now in effect (``PAUSING``/``CANCELLING`` while a step of a run
        executing here finishes).
        """
        action = "pause" if status is RunStatus.PAUSED else "cancel"
        info = await self.store.get_run(run_id)
        if info is None:
            raise RunNotFound(run_id)
        if info.status is status:
            return str(status)
        if info.status in (RunStatus.COMPLETED, RunStatus.CANCELLED) or (
            status is RunStatus.PAUSED and info.status is RunStatus.FAILED
        ):
            raise WrongRunStatus(run_id, str(info.status), action)
        await self.store.set_status(run_id, status)
        self.events.publish(Event(kind="stop_requested", run_id=run_id, detail={"status": str(status)}))
        if self.executing(run_id):
            return "PAUSING" if status is RunStatus.PAUSED else "CANCELLING"
        return str(status)

    async def join(self, run_id: str) -> RunResult | None:
        """Wait for a run executing here to stop (tests, shutdown)."""
        task = self._tasks.get(run_id)
        if task is None:
            return None
        return await asyncio.shield(task)

    async def aclose(self, grace: float = 10.0) -> None:
        """Stop every run at its next step boundary as INTERRUPTED (the next start of the
        server resumes it; a shutdown is not a person's pause); cancel what is still going
        after ``grace`` seconds (the runner records those as INTERRUPTED too)."""
        for run_id in list(self._tasks):
            try:
                await self.store.set_status(run_id, RunStatus.INTERRUPTED)
            except Exception:  # shutting down: the task cancel below still stops it
                logger.warning("could not stop run %s on shutdown", run_id, exc_info=True)
        tasks = list(self._tasks.values())
        if tasks:
            _done, late = await asyncio.wait(tasks, timeout=grace)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=2.0)

    # == internals ===================================================================
    async def _submit(
        self, workflow: str, run_id: str, inputs: Mapping[str, Any], wf: Workflow | None
    ) -> None:
        """Store the run PENDING and put it on the broker (workers execute it)."""
        from tether.workers import Registry, submit

        assert self.dispatcher is not None
        registry = Registry([wf], bundled=False) if wf is not None else None
        await submit(self.store, self.dispatcher, workflow, inputs, run_id=run_id, registry=registry)

    def _workflow_name(self, run_id: str, state: Mapping[str, Any]) -> str | None:
        try:
            return self.workflow_for(run_id, state).name
        except ConfigError:
            return None

    def _runner(self, wf: Workflow) -> Runner:
        """One Runner per workflow drives all of that workflow's runs at once."""
        runner = self._by_workflow.get(wf.name)
        if runner is None:
            runner = Runner(
                wf,
                self.store,
                reducers=self.reducers,
                replan=self.replanners.get(wf.name),
                on_event=self._on_event,
                on_checkpoint=self._measure,
            )
            runner.owner = self.owner
            self._by_workflow[wf.name] = runner
        return runner

    def _on_event(self, event: Event) -> None:
        self.events.publish(event)
        for tap in self.taps:
            try:
                tap(event)
            except Exception:  # a broken tap must not stop a run
                logger.exception("event tap failed on %s", event.kind)

    def _spawn(self, run_id: str, runner: Runner, work: Any) -> None:
        task: asyncio.Task[RunResult | None] = asyncio.create_task(self._guard(run_id, work))
        self._tasks[run_id] = task

    async def _guard(self, run_id: str, work: Any) -> RunResult | None:
        from tether.agent.calls import stream_events_to

        try:
            with stream_events_to(self._on_event):  # a reply's pieces reach SSE as it is written
                result: RunResult = await work
            return result
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("run %s stopped on an error", run_id, extra={"run_id": run_id})
            self.events.publish(Event(kind="run_error", run_id=run_id, detail={"error": repr(exc)[:500]}))
            return None
        finally:
            self._tasks.pop(run_id, None)

    def _measure(self, version: int, ctx: ExecutionContext) -> None:
        """After each checkpoint: context usage as an event, and threshold crossings."""
        try:
            keys = ("context_meta", "context_log", WINDOW_KEY)
            window = window_from_run_state({k: ctx.get(k) for k in keys}, WINDOW_KEY)
            if window is None:
                return None
            usage = window.usage()
        except Exception:  # a malformed window must not stop the run
            logger.warning("run %s: unreadable context window", ctx.run_id, exc_info=True)
            return None
        monitor = self._monitors.setdefault(ctx.run_id, UsageMonitor(self.thresholds))
        self.events.publish(
            Event(
                kind="context_usage",
                run_id=ctx.run_id,
                detail={"tokens": usage.tokens, "budget": usage.budget, "ratio": round(usage.ratio, 4)},
            )
        )
        for crossed in monitor.observe(usage):
            self.events.publish(
                Event(
                    kind="usage_crossed",
                    run_id=ctx.run_id,
                    detail={
                        "level": crossed.kind,
                        "ratio": round(crossed.ratio, 4),
                        "tokens": crossed.tokens,
                    },
                )
            )
        return None

    def _check_lease(self, run_id: str, lease: Any, *, until: float | None = None) -> None:
        """Refuse a run that another live process is executing (its lease is fresh, or a
        heartbeat renewed it until ``until``)."""
        check_lease(run_id, lease, owner=self.owner, force=False, until=until)
