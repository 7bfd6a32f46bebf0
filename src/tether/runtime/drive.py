"""A run being driven (:class:`Drive`): its context, its lease, the one fenced way it
writes, the one way it records what happened, and how it ends when something outside
its steps stops it, always leaving the run consistent: a status that says what happened,
the reason, no lease held.

Every write of a drive carries its lease token (:class:`~tether.stores.base.Fence`): the
first one (``take``) takes a new token, and every later commit lands only while that token
is still the run's current one, checked inside the store's atomic write. A drive that
stalled past its lease while another runner took the run over gets
:class:`~tether.errors.LeaseLost` at its next write and stops without writing anything
more (:meth:`Drive.lost`): no status, no event, the run is the new holder's.

* Interrupted (task cancelled, ``asyncio.timeout``, Ctrl-C, an error of the runner's own
  hooks): the run is committed INTERRUPTED from its last checkpoint; whatever the step
  in progress had changed is dropped (it runs again on resume, or pauses the run if it
  is not idempotent).
* Another process stored a status (``tether pause``, ``tether cancel``): the drive adopts
  it at its next commit and never overwrites it.
* The store failed a commit after its own retries: the run is committed PAUSED with a
  report once the store answers again, within ``wait`` seconds; else it is left for
  ``resume``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.errors import LeaseLost, RunNotPaused, StoreError, VersionConflict
from tether.runtime.events import Event
from tether.runtime.heartbeat import Beat, start_heartbeat
from tether.runtime.lease import ACTIVE_DRIVES, new_lease
from tether.runtime.report import FailureReport
from tether.runtime.workflow import Workflow
from tether.state import ExecutionContext, ReducerRegistry, RunStatus
from tether.state.reserved import runtime_get, runtime_update
from tether.stores.base import CheckpointStore
from tether.stores.fencing import Fence

__all__ = ["Drive", "DriveSettings", "RunResult", "Stop", "reason_of"]

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


@dataclass(frozen=True, slots=True, kw_only=True)
class DriveSettings:
    """What every drive of one runner shares: where it writes, how it reports."""

    store: CheckpointStore
    reducers: ReducerRegistry
    owner: str
    lease_ttl: float
    store_wait: float
    redact: Callable[[str], str]
    on_event: Callable[[Event], None] | None = None
    heartbeat: bool = True


class Drive:
    """One run driven by a runner (one Runner drives many runs at once, a Drive each)."""

    def __init__(
        self, ctx: ExecutionContext, workflow: Workflow, settings: DriveSettings, token: str
    ) -> None:
        self.ctx = ctx
        self.workflow = workflow
        """This run's workflow: the runner's, or what a re-plan made of it."""
        self.settings = settings
        self.store = settings.store
        self.token = token
        """Names this drive in the run's lease (``drive``), for liveness in this process."""
        self.fence = Fence()
        """The lease token every write of this drive carries (0 until its take)."""
        self.hint = 0
        """Steps before this index are settled: next_step need not rescan them."""
        self.settled_cache: tuple[set[str], set[str]] | None = None
        self.step: str | None = None
        """The step in progress, for an interruption's record."""
        self._beat: Beat | None = None

    @property
    def run_id(self) -> str:
        return self.ctx.run_id

    # == recording ==================================================================
    def record(
        self, kind: str, step: str | None = None, *, log: bool = False, publish: bool = True, **detail: Any
    ) -> Event:
        """The one way a drive says what happened: publish ``kind`` to the runner's
        subscriber and, with ``log``, append it to the run's event log (checkpointed with
        the next commit). A subscriber's exception is logged and skipped: a broken progress
        view never fails a step or strands a run."""
        event = Event(kind=kind, run_id=self.ctx.run_id, step=step, detail=detail)
        if log:
            self.ctx.merge_trusted(runtime_update(event_log=[event.to_dict()]))
        on_event = self.settings.on_event
        if publish and on_event is not None:
            try:
                on_event(event)
            except Exception:
                logger.warning("on_event subscriber failed on %r; skipped", kind, exc_info=True)
        return event

    # == the lease ==================================================================
    def lease(self) -> dict[str, Any]:
        """The lease as the run's state shows it (who holds it, until when)."""
        return {**new_lease(self.settings.owner, self.settings.lease_ttl), "drive": self.token}

    async def take(self, *, require: RunStatus | None, metadata: Mapping[str, Any] | None = None) -> int:
        """Commit the run RUNNING under a new lease token (a start, ``require`` None, or a
        resume of a run stored ``require``), and start renewing it."""
        self.fence.until = time.time() + self.settings.lease_ttl
        # live before the lease is stored: another thread of this process that reads the
        # run between the commit and this line would take the lease for a dead drive's
        ACTIVE_DRIVES.add(self.token)
        try:
            version = await self.store.commit(
                self.ctx,
                status=RunStatus.RUNNING,
                metadata=metadata,
                _require_status=require,
                fence=self.fence,
            )
        except BaseException:
            ACTIVE_DRIVES.discard(self.token)
            raise
        if self.settings.heartbeat:
            self._beat = start_heartbeat(self.store, self.run_id, self.fence.token, self.settings.lease_ttl)
        return version

    def end(self) -> None:
        """The drive is over (however it ended): its lease is no longer renewed here."""
        ACTIVE_DRIVES.discard(self.token)
        if self._beat is not None:
            self._beat.stop()
            self._beat = None

    def lost(self, exc: LeaseLost) -> None:
        """The store refused a write: another runner holds the run now. Nothing more is
        written (the run is theirs); whatever this drive did since its last commit is
        reported unconfirmed in the run's event log by the runner that took it over."""
        self.end()
        logger.warning(
            "run %s: lease lost (token %d, the run's is now %d) during step %s; stopped without "
            "recording anything, the runner holding the new lease continues the run",
            self.run_id,
            exc.held,
            exc.current,
            self.step,
            extra={"run_id": self.run_id},
        )

    # == commits, and what stops a drive from outside ================================
    async def commit(
        self,
        *,
        node_id: str | None = None,
        status: RunStatus = RunStatus.RUNNING,
        metadata: Mapping[str, Any] | None = None,
    ) -> int:
        """Every commit of a live run is fenced and requires it to be RUNNING still: a
        PAUSED or CANCELLED status another process stored is adopted here, never
        overwritten; a lease taken over raises LeaseLost (nothing written)."""
        if status is RunStatus.RUNNING:
            self.fence.until = time.time() + self.settings.lease_ttl  # free: it rides the commit
        else:
            self.fence.until = 0  # the drive ends: the lease goes with this commit
        try:
            return await self.store.commit(
                self.ctx,
                node_id=node_id,
                status=status,
                metadata=metadata,
                _require_status=RunStatus.RUNNING,
                fence=self.fence,
            )
        except (RunNotPaused, VersionConflict) as exc:
            raise await self.outside_status(exc, node_id, metadata) from exc
        except StoreError as exc:
            raise Stop(RunStatus.PAUSED, store_error=exc) from exc

    async def outside_status(
        self, exc: Exception, node_id: str | None, metadata: Mapping[str, Any] | None
    ) -> Stop:
        """Another process stored a status on a live run (``tether pause``, ``tether
        cancel``): adopt it, keeping the step's work when only the status changed."""
        ctx = self.ctx
        info = await self.store.get_run(ctx.run_id)
        if info is None or info.status is RunStatus.RUNNING:
            raise exc  # deleted, rolled back or taken over by another runner: no longer ours
        reason = f"{str(info.status).lower()} from outside (another process set the status)"
        status_only = isinstance(exc, RunNotPaused)  # only the status changed: keep this step's work
        if status_only:
            ctx.merge(
                runtime_update(lease=None, pause_reason=reason if info.status is RunStatus.PAUSED else None)
            )
        self.record("status_from_outside", self.step, log=status_only, status=str(info.status))
        if status_only:
            self.fence.until = 0
            try:
                await self.store.commit(
                    ctx,
                    node_id=node_id,
                    status=info.status,
                    metadata=metadata,
                    _require_status=info.status,
                    fence=self.fence,
                )
                return Stop(info.status, committed=True)
            except (RunNotPaused, VersionConflict):
                pass
        fresh = await self.commit_stop(  # the run was changed meanwhile (an update): theirs stands
            status=info.status,
            expect=info.status,
            event=self._event("step_discarded", self.step, reason=reason),
            update={"pause_reason": reason} if info.status is RunStatus.PAUSED else None,
        )
        self.ctx = fresh or ctx
        return Stop(info.status, committed=True)

    async def commit_stop(
        self,
        *,
        status: RunStatus,
        expect: RunStatus,
        event: Event,
        update: dict[str, Any] | None = None,
        wait: float = 0.0,
    ) -> ExecutionContext | None:
        """Commit the run's latest checkpoint with ``status``, the lease released, ``event``
        appended to its event log and ``update`` (fields of the runtime's part) set, if the
        run is still ``expect`` and held by this drive.

        Store failures are retried for ``wait`` seconds (backoff up to 2 s). Returns the
        committed context; None when the run is no longer this drive's (another runner,
        another status, deleted: LeaseLost too), when a writer raced it, or when the store
        did not come back in time (the error is logged: the lease then lapses with this
        process).
        """
        run_id = self.run_id
        deadline = time.monotonic() + wait
        delay = 0.1
        ctx: ExecutionContext | None = None
        while True:
            try:
                if ctx is None:  # a commit that failed is retried as it is: found if it landed
                    fresh = await self.store.load_context(run_id, reducers=self.settings.reducers)
                    info = await self.store.get_run(run_id)
                    if fresh is None or info is None or info.status is not expect:
                        return None
                    lease = runtime_get(fresh, "lease")
                    if isinstance(lease, dict) and lease.get("drive") != self.token:
                        return None  # another runner holds it now
                    fresh.merge(runtime_update(**(update or {}), lease=None, event_log=[event.to_dict()]))
                    ctx = fresh
                self.fence.until = 0
                await self.store.commit(
                    ctx,
                    status=status,
                    metadata={"stopped": event.kind},
                    _require_status=expect,
                    fence=self.fence,
                )
                return ctx
            except (VersionConflict, RunNotPaused, LeaseLost):
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

    async def interrupt(self, exc: BaseException) -> None:
        """Cancelled, Ctrl-C, an error of the runner's own hooks: INTERRUPTED, lease released."""
        reason = self.settings.redact(reason_of(exc))
        fresh = await self.commit_stop(
            status=RunStatus.INTERRUPTED,
            expect=RunStatus.RUNNING,
            event=self._event("interrupted", self.step, reason=reason),
            update={"pause_reason": reason},
            wait=min(self.settings.store_wait, 5.0),
        )
        if fresh is not None:
            logger.warning(
                "run %s interrupted (%s) at version %d; resume continues it",
                fresh.run_id,
                reason,
                fresh.version,
                extra={"run_id": fresh.run_id},
            )
            self.record("interrupted", self.step, reason=reason, version=fresh.version)

    async def store_failed(self, error: BaseException) -> RunResult:
        """A commit failed after the store's own retries: pause the run (from its last
        checkpoint) once the store answers, or leave it for ``resume``; never die."""
        ctx = self.ctx
        redact = self.settings.redact
        reason = redact(f"the store failed a commit ({type(error).__name__}: {error}); resume to continue")[
            :500
        ]
        shown = redact(repr(error))[:500]
        logger.error("run %s: %s", ctx.run_id, reason, extra={"run_id": ctx.run_id})
        self.record("store_failed", self.step, error=shown)
        fresh = await self.commit_stop(
            status=RunStatus.PAUSED,
            expect=RunStatus.RUNNING,
            event=self._event("store_failed", self.step, error=shown),
            update={"pause_reason": reason},
            wait=self.settings.store_wait,
        )
        if fresh is None:
            self.record("interrupted", self.step, reason=reason, version=ctx.version)
            return RunResult(
                run_id=ctx.run_id, status=RunStatus.INTERRUPTED, version=ctx.version, state=ctx.state_view()
            )
        self.ctx = fresh
        self.record("paused", version=fresh.version, reason=reason)
        return RunResult(
            run_id=ctx.run_id, status=RunStatus.PAUSED, version=fresh.version, state=fresh.state_view()
        )

    def _event(self, kind: str, step: str | None = None, **detail: Any) -> Event:
        """An event for a record written by a stop (on a freshly loaded context)."""
        return Event(kind=kind, run_id=self.ctx.run_id, step=step, detail=detail)


def reason_of(exc: BaseException) -> str:
    """A one-line reason for an interruption, for the run's ``pause_reason``."""
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled (the task running it was cancelled or timed out)"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted by Ctrl-C"
    if isinstance(exc, SystemExit):
        return "the process exited"
    return f"stopped by an error: {type(exc).__name__}: {exc}"[:500]
