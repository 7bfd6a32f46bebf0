"""Leases: which process executes a run now, and whether that process is still alive.

A lease has two halves. Who holds it lives in the run's state (the runtime's ``lease``:
owner, host, pid, expires_at, drive), written in the same atomic commit as the step it
covers. Its fencing token and its renewed deadline live in the run record
(``RunInfo.fence``, ``RunInfo.lease_until``): the token is taken with the lease and checked
inside every write of the holder (see ``runtime/drive.py``), the deadline moves with each
heartbeat (``runtime/heartbeat.py``) without a new version.

A lease is *dead* when its time ran out (its holder stopped renewing it: a crash, a
SIGSTOP, a lost machine) or when it names this host and a pid that no longer exists (a
SIGKILL). A RUNNING run whose lease is dead is shown as INTERRUPTED: nobody executes it,
and ``resume`` takes it over with a new token, which fences the old holder out.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from typing import Any

from tether.errors import CheckpointCorrupt, RunInProgress
from tether.state import RunInfo, RunStatus
from tether.state.reserved import runtime_get
from tether.stores.base import CheckpointStore

__all__ = [
    "ACTIVE_DRIVES",
    "HOST",
    "check_lease",
    "lease_is_dead",
    "list_runs_live",
    "live_status",
    "new_lease",
    "pid_alive",
]

HOST = socket.gethostname()

ACTIVE_DRIVES: set[str] = set()
"""The ``drive`` tokens of the leases this process's runners are driving now: a lease of
this very process whose drive ended (cancelled, stopped by an error) is dead at once,
instead of blocking a resume in the same process until it expires."""


def new_lease(owner: str, ttl: float) -> dict[str, Any]:
    now = time.time()  # renewed_at: how long ago the holder last renewed it (``tether runs``)
    return {"owner": owner, "host": HOST, "pid": os.getpid(), "expires_at": now + ttl, "renewed_at": now}


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lease_is_dead(lease: Any, *, now: float | None = None, until: float | None = None) -> bool:
    """No live process holds this lease (None or malformed counts as dead). ``until``: the
    deadline its heartbeats renewed in the run record (``RunInfo.lease_until``), which
    outlives the one written in the state when a step runs long."""
    if not isinstance(lease, dict):
        return True
    deadline = max(float(lease.get("expires_at", 0) or 0), until or 0.0)
    if deadline <= (time.time() if now is None else now):
        return True  # its holder stopped renewing it
    if lease.get("host") != HOST:
        return False
    pid = int(lease.get("pid", 0))
    if pid == os.getpid() and "drive" in lease:
        return lease["drive"] not in ACTIVE_DRIVES
    return not pid_alive(pid)


def check_lease(run_id: str, lease: Any, *, owner: str, force: bool, until: float | None = None) -> None:
    """Raise :class:`RunInProgress` unless the run may be taken over by ``owner``
    (``until``: the renewed deadline, as :func:`lease_is_dead` takes it)."""
    if force or lease_is_dead(lease, until=until):
        return
    left = max(float(lease.get("expires_at", 0) or 0), until or 0.0) - time.time()
    raise RunInProgress(run_id, str(lease.get("owner")), f" (lease expires in {left:.0f}s)")


async def live_status(store: CheckpointStore, info: RunInfo) -> RunStatus:
    """The run's status as a person should read it: RUNNING only while a live process holds
    it, INTERRUPTED when its holder is gone (the stored status says RUNNING then)."""
    if info.status is not RunStatus.RUNNING:
        return info.status
    try:
        cp = await store.load(info.run_id)
    except CheckpointCorrupt:
        return info.status  # unreadable here (damaged, or written by a newer tether): as stored
    if cp is None or lease_is_dead(runtime_get(cp.state, "lease"), until=info.lease_until):
        return RunStatus.INTERRUPTED
    return RunStatus.RUNNING


async def list_runs_live(
    store: CheckpointStore, *, status: RunStatus | None = None, limit: int = 100
) -> list[RunInfo]:
    """``store.list_runs`` with the RUNNING runs whose process died shown as INTERRUPTED.

    Only RUNNING runs are checked (one load each), so a long list of finished runs costs
    one query. ``status=INTERRUPTED`` finds both the stored ones and the dead RUNNING ones.
    """
    wanted = status
    if status is RunStatus.INTERRUPTED:
        stored = await store.list_runs(status=RunStatus.INTERRUPTED, limit=limit)
        running = await store.list_runs(status=RunStatus.RUNNING, limit=limit)
        runs = sorted([*stored, *running], key=lambda r: r.updated_at, reverse=True)
    else:
        runs = await store.list_runs(status=status, limit=limit)
    out: list[RunInfo] = []
    for info in runs:
        shown = await live_status(store, info)
        if shown is not info.status:
            info = dataclasses.replace(info, status=shown)
        if wanted is None or info.status is wanted:
            out.append(info)
    return out[:limit]
