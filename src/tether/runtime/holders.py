"""Who executes a run now, read from the lease in its state, and the live workers.

A run's lease (see :mod:`tether.runtime.lease`) names the process that executes it:
owner, host, pid, when it expires and when it was last renewed. This module turns it
into what a person watching runs wants (``tether runs``, the API, the dashboard): which
host and process holds each RUNNING run and how fresh its lease is, and the workers
that hold runs right now, each with its runs.

Workers are derived from live leases, so a worker holding nothing does not show; a
heartbeat table of workers could replace :func:`live_workers` without changing its
callers.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

from tether.errors import CheckpointCorrupt
from tether.runtime.lease import lease_is_dead
from tether.state import RunInfo, RunStatus
from tether.state.reserved import runtime_get
from tether.stores.base import CheckpointStore

__all__ = [
    "Holder",
    "Worker",
    "WorkerRun",
    "Workers",
    "held_by",
    "holder_of",
    "live_workers",
    "runs_with_holders",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Holder:
    """The process that holds a run's live lease."""

    owner: str
    """The runner's id (host, pid and a random tag)."""
    host: str
    pid: int
    age: float | None
    """Seconds since the holder last renewed its lease (None: a lease that does not say)."""
    expires_in: float
    """Seconds until the lease lapses unless renewed."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "host": self.host,
            "pid": self.pid,
            "age": None if self.age is None else round(self.age, 1),
            "expires_in": round(self.expires_in, 1),
        }


def holder_of(lease: Any, *, now: float | None = None, until: float | None = None) -> Holder | None:
    """The holder a lease names, or None when no live process holds it. ``until``: the
    deadline a heartbeat renewed in the run record (``RunInfo.lease_until``), later than the
    one the lease itself was written with."""
    at = time.time() if now is None else now
    if lease_is_dead(lease, now=at, until=until):
        return None
    renewed = lease.get("renewed_at")
    expires = float(lease.get("expires_at", 0))
    if isinstance(renewed, int | float) and until is not None and until > expires:
        renewed = until - (expires - renewed)  # a heartbeat renewed it for the same length
    return Holder(
        owner=str(lease.get("owner", "")),
        host=str(lease.get("host", "")),
        pid=int(lease.get("pid", 0)),
        age=max(0.0, at - float(renewed)) if isinstance(renewed, int | float) else None,
        expires_in=max(0.0, max(expires, until or 0.0) - at),
    )


async def held_by(store: CheckpointStore, info: RunInfo) -> tuple[RunStatus, Holder | None]:
    """A run's status as a person should read it and its holder, with one load for a
    RUNNING run and none for the others (only a RUNNING run is held): a RUNNING run
    whose holder is gone reads INTERRUPTED."""
    if info.status is not RunStatus.RUNNING:
        return info.status, None
    try:
        cp = await store.load(info.run_id)
    except CheckpointCorrupt:
        return info.status, None  # unreadable here: as stored, holder unknown
    holder = None if cp is None else holder_of(runtime_get(cp.state, "lease"), until=info.lease_until)
    return (RunStatus.RUNNING if holder is not None else RunStatus.INTERRUPTED), holder


async def runs_with_holders(
    store: CheckpointStore, *, status: RunStatus | None = None, limit: int = 100
) -> list[tuple[RunInfo, Holder | None]]:
    """Runs, most recently updated first, each with its holder (the RUNNING ones whose
    process died shown as INTERRUPTED, as :func:`~tether.runtime.list_runs_live` does)."""
    if status is RunStatus.INTERRUPTED:
        stored = await store.list_runs(status=RunStatus.INTERRUPTED, limit=limit)
        running = await store.list_runs(status=RunStatus.RUNNING, limit=limit)
        runs = sorted([*stored, *running], key=lambda r: r.updated_at, reverse=True)
    else:
        runs = await store.list_runs(status=status, limit=limit)
    out: list[tuple[RunInfo, Holder | None]] = []
    for info in runs:
        shown, holder = await held_by(store, info)
        if shown is not info.status:
            info = dataclasses.replace(info, status=shown)
        if status is None or info.status is status:
            out.append((info, holder))
    return out[:limit]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerRun:
    """A run a worker holds."""

    run_id: str
    version: int
    node_id: str | None
    holder: Holder


@dataclass(frozen=True, slots=True, kw_only=True)
class Worker:
    """A process holding at least one live lease."""

    host: str
    pid: int
    owners: tuple[str, ...]
    """The runners inside it (one per concurrently executed run, usually)."""
    runs: list[WorkerRun] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "pid": self.pid,
            "owners": list(self.owners),
            "runs": [
                {"run_id": r.run_id, "version": r.version, "node_id": r.node_id, **r.holder.to_dict()}
                for r in self.runs
            ],
        }


LEASE_HORIZON = 1800.0
"""A holder writes its lease with every step it commits and renews it before it lapses
(the runner's default lease lasts 10 minutes), so a RUNNING run not updated for this
long (seconds) has no live holder: the workers view does not read it."""

READ_BUDGET = 2.0
"""Seconds the workers view spends reading leases before it answers with what it has."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Workers:
    """The workers found, and whether every candidate run was read."""

    workers: list[Worker]
    complete: bool
    """False when the ``limit`` or the time budget cut the reading short: older RUNNING
    runs were not looked at (their holders, if any, are missing)."""


async def live_workers(
    store: CheckpointStore, *, limit: int = 200, within: float = LEASE_HORIZON, budget: float = READ_BUDGET
) -> Workers:
    """The processes that hold runs now, by host and pid, each with the runs it holds.

    Reads the leases of the most recently updated RUNNING runs (one load each): at most
    ``limit`` of them, only those updated in the last ``within`` seconds, for at most
    ``budget`` seconds. Runs left RUNNING by crashed processes long ago cost nothing.
    """
    grouped: dict[tuple[str, int], list[WorkerRun]] = {}
    now = time.time()
    deadline = time.monotonic() + budget
    candidates = await store.list_runs(status=RunStatus.RUNNING, limit=limit + 1)
    complete = len(candidates) <= limit
    for info in candidates[:limit]:
        if info.updated_at.timestamp() < now - within:
            complete = True
            break  # most recently updated first: the rest are older still
        if time.monotonic() > deadline:
            complete = False
            break
        _shown, holder = await held_by(store, info)
        if holder is not None:
            run = WorkerRun(run_id=info.run_id, version=info.version, node_id=info.node_id, holder=holder)
            grouped.setdefault((holder.host, holder.pid), []).append(run)
    workers = [
        Worker(
            host=host,
            pid=pid,
            owners=tuple(sorted({r.holder.owner for r in runs})),
            runs=sorted(runs, key=lambda r: r.run_id),
        )
        for (host, pid), runs in sorted(grouped.items())
    ]
    return Workers(workers=workers, complete=complete)
