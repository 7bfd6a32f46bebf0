"""A run being driven (:class:`Drive`), how a drive ends (:class:`RunResult`), and how it
ends when something outside its steps stops it, always leaving the run consistent: a
status that says what happened, the reason, no lease held.

* Interrupted (task cancelled, ``asyncio.timeout``, Ctrl-C, an error of the runner's own
  hooks): the run is committed INTERRUPTED from its last checkpoint; whatever the step
  in progress had changed is dropped (it runs again on resume, or pauses the run if it
  is not idempotent).
* Another process stored a status (``tether pause``, ``tether cancel``): the runner
  adopts it at its next commit and never overwrites it.
* The store failed a commit after its own retries: the run is committed PAUSED with a
  report once the store answers again, within ``wait`` seconds; else it is left for
  ``resume``.

Each works on a context freshly loaded from the store, and only while the run's lease
is still the one this drive holds (``token``): a run another runner took over is left
alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.errors import RunNotPaused, StoreError, VersionConflict
from tether.runtime.events import Event
from tether.runtime.report import FailureReport
from tether.runtime.workflow import Workflow
from tether.state import ExecutionContext, ReducerRegistry, RunStatus
from tether.state.reserved import runtime_get, runtime_update
from tether.stores.base import CheckpointStore

if TYPE_CHECKING:
    from tether.runtime.runner import Runner

__all__ = [
    "Drive",
    "RunResult",
    "Stop",
    "commit_stop",
    "interrupt",
    "outside_status",
    "reason_of",
    "store_failed",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """How a ``start``/``resume`` call ended. ``state`` is the run's final state itself
    (not a copy: a 10 MB state is not duplicated just to be returned)."""

    run_id: str
    status: RunStatus
    version: int
    state: dict[str, Any]
    report: FailureReport | None = None


class Stop(BaseException):
    """Internal: the drive ends with this status (a BaseException, so that no ``except
    Exception`` on the way, a step's or a hook's, can swallow it)."""

    def __init__(
        self,
        status: RunStatus,
        report: FailureReport | None = None,
        *,
        reason: str | None = None,
        committed: bool = False,
        store_error: BaseException | None = None,
    ) -> None:
        self.status = status
        self.report = report
        self.reason = reason
        """Why the run pauses (stored as the runtime's ``pause_reason``)."""
        self.committed = committed
        """The stop is already stored (it came from another process's status)."""
        self.store_error = store_error


@dataclass(slots=True, eq=False)
class Drive:
    """What a Runner keeps per run it drives, so that one Runner drives many runs at once."""

    ctx: ExecutionContext
    workflow: Workflow
    """This run's workflow: the runner's, or what a re-plan made of it."""
    hint: int = 0
    """Steps before this index are settled: next_step need not rescan them."""
    settled_cache: tuple[set[str], set[str]] | None = None
    token: str = ""
    """Names this drive in the run's lease (``drive``)."""
    step: str | None = None
    """The step in progress, for an interruption's record."""


def reason_of(exc: BaseException) -> str:
    """A one-line reason for an interruption, for the run's ``pause_reason``."""
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled (the task running it was cancelled or timed out)"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted by Ctrl-C"
    if isinstance(exc, SystemExit):
        return "the process exited"
    return f"stopped by an error: {type(exc).__name__}: {exc}"[:500]


async def commit_stop(
    store: CheckpointStore,
    reducers: ReducerRegistry,
    run_id: str,
    *,
    token: str,
    status: RunStatus,
    expect: RunStatus,
    event: Event,
    update: dict[str, Any] | None = None,
    wait: float = 0.0,
) -> ExecutionContext | None:
    """Commit the run's latest checkpoint with ``status``, the lease released, ``event``
    appended to its event log and ``update`` (fields of the runtime's part) set, if the
    run is still ``expect`` and held by ``token``.

    Store failures are retried for ``wait`` seconds (backoff up to 2 s). Returns the
    committed context; None when the run is no longer this drive's (another runner,
    another status, deleted), when a writer raced it, or when the store did not come
    back in time (the error is logged: the lease then lapses with this process).
    """
    deadline = time.monotonic() + wait
    delay = 0.1
    ctx: ExecutionContext | None = None
    while True:
        try:
            if ctx is None:  # a commit that failed is retried as it is: found if it landed
                fresh = await store.load_context(run_id, reducers=reducers)
                info = await store.get_run(run_id)
                if fresh is None or info is None or info.status is not expect:
                    return None
                lease = runtime_get(fresh, "lease")
                if isinstance(lease, dict) and lease.get("drive") != token:
                    return None  # another runner holds it now
                fresh.merge(runtime_update(**(update or {}), lease=None, event_log=[event.to_dict()]))
                ctx = fresh
            await store.commit(ctx, status=status, metadata={"stopped": event.kind}, _require_status=expect)
            return ctx
        except (VersionConflict, RunNotPaused):
            return None  # someone changed the run meanwhile: theirs stands
        except (StoreError, OSError) as exc:
            if time.monotonic() >= deadline:
                logger.error(
                    "run %s: could not record %s (%r); the store did not answer for %.0fs. "
                    "Nothing is lost: resume the run once the store is back",
                    run_id,
                    status,
                    exc,
                    wait,
                    extra={"run_id": run_id},
                )
                return None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


async def outside_status(
    runner: Runner, run: Drive, exc: Exception, node_id: str | None, metadata: Mapping[str, Any] | None
) -> Stop:
    """Another process stored a status on a live run (``tether pause``, ``tether cancel``):
    adopt it, keeping the step's work when only the status changed."""
    ctx = run.ctx
    info = await runner.store.get_run(ctx.run_id)
    if info is None or info.status is RunStatus.RUNNING:
        raise exc  # deleted, rolled back or taken over by another runner: no longer ours
    reason = f"{str(info.status).lower()} from outside (another process set the status)"
    runner._emit("status_from_outside", ctx.run_id, run.step, status=str(info.status))
    if isinstance(exc, RunNotPaused):  # only the status changed: keep this step's work
        ctx.merge(
            runtime_update(lease=None, pause_reason=reason if info.status is RunStatus.PAUSED else None)
        )
        runner._log(run, "status_from_outside", run.step, status=str(info.status))
        try:
            await runner.store.commit(
                ctx, node_id=node_id, status=info.status, metadata=metadata, _require_status=info.status
            )
            return Stop(info.status, committed=True)
        except (RunNotPaused, VersionConflict):
            pass
    fresh = await commit_stop(  # the run was changed meanwhile (an update): theirs stands
        runner.store,
        runner.reducers,
        ctx.run_id,
        token=run.token,
        status=info.status,
        expect=info.status,
        event=runner._event(run, "step_discarded", run.step, reason=reason),
        update={"pause_reason": reason} if info.status is RunStatus.PAUSED else None,
    )
    run.ctx = fresh or ctx
    return Stop(info.status, committed=True)


async def interrupt(runner: Runner, run: Drive, exc: BaseException) -> None:
    """Cancelled, Ctrl-C, an error of the runner's own hooks: INTERRUPTED, lease released."""
    reason = runner.redact(reason_of(exc))
    fresh = await commit_stop(
        runner.store,
        runner.reducers,
        run.ctx.run_id,
        token=run.token,
        status=RunStatus.INTERRUPTED,
        expect=RunStatus.RUNNING,
        event=runner._event(run, "interrupted", run.step, reason=reason),
        update={"pause_reason": reason},
        wait=min(runner.store_wait, 5.0),
    )
    if fresh is not None:
        logger.warning(
            "run %s interrupted (%s) at version %d; resume continues it",
            fresh.run_id,
            reason,
            fresh.version,
            extra={"run_id": fresh.run_id},
        )
        runner._emit("interrupted", fresh.run_id, run.step, reason=reason, version=fresh.version)


async def store_failed(runner: Runner, run: Drive, error: BaseException) -> RunResult:
    """A commit failed after the store's own retries: pause the run (from its last
    checkpoint) once the store answers, or leave it for ``resume``; never die."""
    ctx = run.ctx
    reason = runner.redact(
        f"the store failed a commit ({type(error).__name__}: {error}); resume to continue"
    )[:500]
    shown = runner.redact(repr(error))[:500]
    logger.error("run %s: %s", ctx.run_id, reason, extra={"run_id": ctx.run_id})
    runner._emit("store_failed", ctx.run_id, run.step, error=shown)
    fresh = await commit_stop(
        runner.store,
        runner.reducers,
        ctx.run_id,
        token=run.token,
        status=RunStatus.PAUSED,
        expect=RunStatus.RUNNING,
        event=runner._event(run, "store_failed", run.step, error=shown),
        update={"pause_reason": reason},
        wait=runner.store_wait,
    )
    if fresh is None:
        runner._emit("interrupted", ctx.run_id, run.step, reason=reason, version=ctx.version)
        return RunResult(
            run_id=ctx.run_id, status=RunStatus.INTERRUPTED, version=ctx.version, state=ctx.state_view()
        )
    run.ctx = fresh
    runner._emit("paused", ctx.run_id, version=fresh.version, reason=reason)
    return RunResult(
        run_id=ctx.run_id, status=RunStatus.PAUSED, version=fresh.version, state=fresh.state_view()
    )
