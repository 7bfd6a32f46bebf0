"""Where a Celery worker line of ``bench_workers`` spends its time and CPU, per run.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/trace_workers.py              # 1 and 2 workers, 1000 runs each, 2 rounds
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/trace_workers.py --quick      # 300 runs, 1 round

The fleets, runs and clock are ``bench_workers``' own (queued runs released by SIGCONT, the
clock to the last run's final commit); the worker counts take turns, round by round. What
``bench_workers`` prints is how much CPU a run costs each process; this says why, so that a
change can be aimed at the cause. Per run, over each line's clock:

* per role (the workers with all their threads, PostgreSQL's processes, RabbitMQ's, the
  heartbeat sidecars): CPU, time spent runnable but waiting for a core (``schedstat``), and
  voluntary and involuntary context switches (``/proc/PID/task/*/status``): a process woken
  more often per run idles more often; one preempted more often shares its cores;
* PostgreSQL's WAL (``pg_stat_wal``): records, full-page images, bytes and flushes, so the
  durable commits a run costs, and what each costs the log, are counted, not assumed;
* what each worker's own PostgreSQL backend waits on (``pg_stat_activity`` sampled every
  few milliseconds from another connection): the client (the worker's next statement), the
  WAL flush, or another backend's flush (``LWLock:WALWrite``), and the kernel state of the
  worker's threads and backend (``/proc/.../wchan`` every millisecond): what keeps a chain
  of one run from using a core;
* the host's cores: busy, idle, in iowait (``/proc/stat``: every process on the host).

The samplers cost this process a few percent of a core, on every line alike.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import bench_workers as bw

from tether.stores import open_store
from tether.stores.base import CheckpointStore
from tether.workers import Registry, store_for_message

Counts = dict[str, collections.Counter[str]]


def _per_thread(pid: int) -> tuple[int, int, int, int]:
    """Voluntary and involuntary context switches, ns on a core and ns waiting for one,
    summed over the process's threads."""
    vol = invol = run = wait = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0, 0, 0, 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        vol += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        invol += int(line.split()[1])
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                a, b, _ = f.read().split()
            run, wait = run + int(a), wait + int(b)
        except (OSError, ValueError):
            continue
    return vol, invol, run, wait


def _snap(pids: dict[int, str]) -> dict[int, tuple[int, ...]]:
    return {pid: (bw._ticks(pid), *_per_thread(pid)) for pid in pids}


def _cores() -> list[int]:
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:9]]


def _backends_of(pid: int) -> list[int]:
    """The PostgreSQL backends serving ``pid``'s connections (by TCP port, from ``ss``)."""
    out = subprocess.run(["ss", "-tnpH"], capture_output=True, text=True, check=False).stdout
    mine, served = set(), {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 6:
            continue
        local, peer = parts[3], parts[4]
        found = re.search(r"pid=(\d+)", " ".join(parts[5:]))
        if found is None:
            continue
        owner = int(found.group(1))
        if owner == pid and peer.endswith(":5432"):
            mine.add(local.rpartition(":")[2])
        if local.endswith(":5432"):
            served[peer.rpartition(":")[2]] = owner
    return [served[port] for port in mine if port in served]


def _pool_thread(pid: int) -> int:
    """The worker's busiest thread other than its main one (Celery's consumer): the pool's."""
    best, busiest = -1, pid
    for tid in os.listdir(f"/proc/{pid}/task"):
        if int(tid) == pid:
            continue
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        ticks = int(fields[11]) + int(fields[12])
        if ticks > best:
            best, busiest = ticks, int(tid)
    return busiest


def _kernel_states(targets: list[tuple[str, int, int]], stop: threading.Event, counts: Counts) -> None:
    while not stop.is_set():
        for name, pid, tid in targets:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    state = f.read().rpartition(")")[2].split()[0]
                if state != "R":
                    with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                        state = f"{state}:{f.read()}"
            except OSError:
                continue
            if not state.startswith("T"):  # stopped (SIGSTOP while the queue fills): not the line
                counts[name][state] += 1
        time.sleep(0.001)


def _wait_events(url: str, backends: list[int], stop: threading.Event, counts: Counts) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            rows = conn.execute(
                "SELECT pid, state, wait_event_type, wait_event FROM pg_stat_activity WHERE pid = ANY(%s)",
                (backends,),
            ).fetchall()
            for pid, state, kind, event in rows:
                seen = counts.setdefault(f"backend {pid}", collections.Counter())
                seen[f"{state} {kind or ''}:{event or ''}"] += 1
            time.sleep(0.003)


def _wal(conn: Any) -> tuple[float, ...]:
    row = conn.execute(
        "SELECT wal_records, wal_fpi, wal_bytes, wal_write, wal_sync FROM pg_stat_wal"
    ).fetchone()
    return tuple(float(x) for x in row)


async def traced(store: CheckpointStore, url: str, fleet: bw.Fleet, n: int, sums: dict[str, Any]) -> None:
    """One round of ``n`` runs on ``fleet``, as ``bench_workers.on_fleet`` takes it, with the
    counters above read at its clock's start and end."""
    import psycopg

    registry = Registry([bw.five()], bundled=False)
    tag = uuid.uuid4().hex[:8]
    stored = [
        await store_for_message(
            store, "five", {"label": str(i)}, run_id=f"tw-{tag}-{i}", registry=registry, queue=fleet.queue
        )
        for i in range(n)
    ]
    ids = [rid for rid, _ in stored]
    bw.MADE.extend(ids)
    pids = [p.pid for p in fleet.procs]
    roles = {**dict.fromkeys(pids, "workers"), **bw.services(set(pids))}
    targets = []
    for i, pid in enumerate(pids):
        targets += [(f"worker {i} pool thread", pid, _pool_thread(pid)), (f"worker {i} consumer", pid, pid)]
        targets += [(f"worker {i} backend", b, b) for b in _backends_of(pid)]
    backends = [pid for name, pid, _ in targets if name.endswith("backend")]
    stop, states, events = threading.Event(), sums.setdefault("states", {}), sums.setdefault("events", {})
    for name, *_ in targets:
        states.setdefault(name, collections.Counter())
    samplers = [
        threading.Thread(target=_kernel_states, args=(targets, stop, states)),
        threading.Thread(target=_wait_events, args=(url, backends, stop, events)),
    ]
    with psycopg.connect(url, autocommit=True) as conn:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            for rid, first in stored:
                fleet.dispatcher.send(rid, workflow="five", first=first)
        finally:
            for t in samplers:
                t.start()
            wal0, snap0, cores0, t0 = _wal(conn), _snap(roles), _cores(), time.time()
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        ends: list[tuple[tuple[float, ...], dict[int, tuple[int, ...]], list[int]]] = []
        secs = await bw.last_commit(store, ids, t0, lambda: ends.append((_wal(conn), _snap(roles), _cores())))
        stop.set()
        for t in samplers:
            t.join()
    wal1, snap1, cores1 = ends[0]
    sums["runs"] = sums.get("runs", 0) + n
    sums["seconds"] = sums.get("seconds", 0.0) + secs
    sums["wal"] = [a + (y - x) for a, x, y in zip(sums.get("wal", [0.0] * 5), wal0, wal1, strict=True)]
    sums["cores"] = [a + (y - x) for a, x, y in zip(sums.get("cores", [0] * 8), cores0, cores1, strict=True)]
    per_role = sums.setdefault("roles", {})
    for pid, role in roles.items():
        if pid in snap0 and pid in snap1:
            acc = per_role.setdefault(role, [0] * 5)
            for j in range(5):
                acc[j] += snap1[pid][j] - snap0[pid][j]


def report(k: int, sums: dict[str, Any]) -> None:
    n = sums["runs"]
    print(f"\n## {k} worker(s): {n} runs, {n / sums['seconds']:.0f} runs/s, load {os.getloadavg()[0]:.2f}")
    print(f"  a run every {1e3 * k * sums['seconds'] / n:.2f} ms on each worker")
    for role, (ticks, vol, invol, run, wait) in sorted(sums["roles"].items()):
        print(
            f"  {role:11s} CPU {1e3 * ticks / bw.TICK / n:5.2f} ms/run (on a core {run / 1e6 / n:5.2f}, "
            f"waiting for one {wait / 1e6 / n:5.2f}), context switches {vol / n:5.1f} voluntary, "
            f"{invol / n:5.2f} involuntary"
        )
    rec, fpi, size, writes, syncs = (x / n for x in sums["wal"])
    print(
        f"  WAL per run: {rec:.1f} records, {fpi:.2f} full-page images, {size:.0f} bytes, {syncs:.2f} flushes"
    )
    d = sums["cores"]
    total = sum(d) or 1
    cores = os.cpu_count() or 1
    busy = cores * (total - d[3] - d[4]) / total
    print(
        f"  host cores: busy {busy:.2f}, idle {cores * d[3] / total:.2f}, iowait {cores * d[4] / total:.2f}"
    )
    for title, counts in (("kernel state", sums["states"]), ("wait event", sums["events"])):
        for name, c in sorted(counts.items()):
            seen = sum(c.values()) or 1
            top = ", ".join(f"{s} {100 * v / seen:.0f}%" for s, v in c.most_common(5))
            print(f"  {title} of {name}: {top}")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=None, help="runs per line (1000; quick 300)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (2; quick 1)")
    ap.add_argument("--workers", default="1,2", help="worker counts, comma-separated")
    ap.add_argument(
        "--store", default=os.environ.get("TETHER_TEST_POSTGRESQL_URL", "postgresql://127.0.0.1:5432/test")
    )
    ap.add_argument("--broker", default="amqp://guest:guest@127.0.0.1:5672//")
    args = ap.parse_args()
    n = args.runs or (300 if args.quick else 1000)
    rounds = args.rounds or (1 if args.quick else 2)
    counts = [int(c) for c in args.workers.split(",")]
    print(f"# trace_workers: {n} runs per line in {rounds} rounds; load average {os.getloadavg()}")
    fleets = bw.start_fleets(args.store, args.broker, counts, Path(tempfile.mkdtemp(prefix="trace-workers-")))
    sums: dict[int, dict[str, Any]] = {f.k: {} for f in fleets}
    try:
        await bw.warm_up(args.store, fleets)
        async with open_store(args.store) as store:
            for _ in range(rounds):
                for f in fleets:
                    await traced(store, args.store, f, n // rounds, sums[f.k])
    finally:
        for f in fleets:
            bw.stop(f.procs)
            bw.drop_queue(f.dispatcher)
        await bw.remove_runs(args.store)
    for k, s in sums.items():
        report(k, s)


if __name__ == "__main__":
    asyncio.run(main())
