"""Pausing a run from outside its runner (``tether pause RUN --reason ...``), with the
reason stored in the run's state.

The status is stored at once; a live runner adopts it at its next step boundary and
releases its lease (see ``runtime/drive.py``). The reason is part of the state, which
only the lease holder writes, so it is recorded once no live runner holds the run:
at once for a run that is not executing, after the runner has stopped for a live one.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from tether.errors import RunNotFound, RunNotPaused, VersionConflict, WrongRunStatus
from tether.runtime.lease import lease_is_dead, live_status
from tether.state import RunStatus
from tether.state.reserved import runtime_get, runtime_update, upgrade_context
from tether.stores.base import CheckpointStore

__all__ = ["PauseOutcome", "amend_pending_report", "pause_run", "record_pause_reason"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PauseOutcome:
    """What ``pause_run`` did."""

    was: RunStatus
    """The run's status as a person would have read it before (INTERRUPTED: its process died)."""
    stopped: bool
    """No live runner holds the run now (False: it is still finishing its step)."""
    reason_recorded: bool
    """The reason is in the run's state (``pause_reason``)."""


async def pause_run(
    store: CheckpointStore, run_id: str, *, reason: str | None = None, wait: float = 0.0
) -> PauseOutcome:
    """Store PAUSED for ``run_id`` and, when a ``reason`` is given, record it.

    A live runner stops at its next step boundary; ``wait`` is how many seconds to wait for
    it before recording the reason (a run whose runner is still busy after that keeps the
    runner's own reason; pausing it again with a reason later records it). Raises
    RunNotFound, or WrongRunStatus for a finished run.
    """
    info = await store.get_run(run_id)
    if info is None:
        raise RunNotFound(run_id)
    was = await live_status(store, info)
    if was in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED):
        raise WrongRunStatus(run_id, str(was), "pause", "it has finished")
    if was is not RunStatus.PAUSED:
        await store.set_status(run_id, RunStatus.PAUSED)
    stopped = was is not RunStatus.RUNNING or await _runner_stopped(store, run_id, wait)
    recorded = reason is not None and stopped and await record_pause_reason(store, run_id, reason)
    return PauseOutcome(was=was, stopped=stopped, reason_recorded=recorded)


async def _runner_stopped(store: CheckpointStore, run_id: str, wait: float) -> bool:
    """Whether the live runner released the run within ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        cp, info = await store.load(run_id), await store.get_run(run_id)
        until = info.lease_until if info else None  # (renewed by the runner's heartbeat)
        if cp is None or lease_is_dead(runtime_get(cp.state, "lease"), until=until):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.1)


async def record_pause_reason(store: CheckpointStore, run_id: str, reason: str) -> bool:
    """Store ``reason`` as a PAUSED run's ``pause_reason`` (a new version). False when the run
    is no longer PAUSED or another writer kept changing it."""
    for _ in range(5):
        ctx = await store.load_context(run_id)
        if ctx is None:
            raise RunNotFound(run_id)
        info = await store.get_run(run_id)
        if not lease_is_dead(runtime_get(ctx, "lease"), until=info.lease_until if info else None):
            return False  # resumed meanwhile: the runner's state is not ours to write
        upgrade_context(ctx)  # a run stored by an earlier tether: its keys move first
        ctx.merge(runtime_update(pause_reason=reason))
        try:
            await store.commit(
                ctx,
                node_id=ctx.node_id,
                status=RunStatus.PAUSED,
                metadata={"pause_reason": True},
                _require_status=RunStatus.PAUSED,
            )
            return True
        except RunNotPaused:
            return False
        except VersionConflict:
            continue  # the runner's last commit landed in between: read it again
    return False


async def amend_pending_report(store: CheckpointStore, run_id: str, **fields: Any) -> bool:
    """Change fields of the failure report a PAUSED run waits on (its ``pending_decision``
    and ``failure_report``): a takeover's ``note`` before the decision is applied, or the
    details an agent adds after the runner paused it (the command a cut step may have run,
    its own ``suggestions`` as dicts). False when no report is waiting, the run is not
    PAUSED, or another writer kept changing it."""
    for _ in range(5):
        ctx = await store.load_context(run_id)
        if ctx is None:
            raise RunNotFound(run_id)
        pending = runtime_get(ctx, "pending_decision")
        if not isinstance(pending, dict) or not lease_is_dead(runtime_get(ctx, "lease")):
            return False
        upgrade_context(ctx)
        amended = {**pending, **fields}
        ctx.merge(runtime_update(pending_decision=amended, failure_report=amended))
        try:
            await store.commit(
                ctx,
                node_id=ctx.node_id,
                status=RunStatus.PAUSED,
                metadata={"report_amended": sorted(fields)},
                _require_status=RunStatus.PAUSED,
            )
            return True
        except RunNotPaused:
            return False
        except VersionConflict:
            continue
    return False
