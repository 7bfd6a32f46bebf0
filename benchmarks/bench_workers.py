"""Celery workers: throughput of short runs with 1, 2, 4 worker processes against one process
without Celery, and recovery after kill -9 of the worker executing a run.

    PYTHONPATH=src:benchmarks python benchmarks/bench_workers.py            # full: 500 runs a line, 1/2/4 workers, 3 repeats
    PYTHONPATH=src:benchmarks python benchmarks/bench_workers.py --quick    # 100 runs a line, 1/2 workers, 1 repeat

Store: --store (default TETHER_TEST_POSTGRESQL_URL or postgresql://127.0.0.1:5432/test, the
realistic fleet store), in a database of its own that the bench creates on that server and drops
at the end (``--shared-db``: the given database as it is): a server whose autovacuum is off, as
on the test machines, keeps every dead row version the test suite and earlier runs left in the
shared database, and each commit's index lookups walk past them (the bench also vacuums its
tables before each line, outside the clock, as autovacuum keeps a fleet's database); broker:
--broker (default amqp://guest:guest@127.0.0.1:5672//). Every run is 5 no-op steps (the tests'
``five`` workflow).

How the throughput lines are taken, so that host noise lands on every line alike: the worker
processes of each count (1, 2, 4; ``--concurrency 1`` each, on a queue of their own, deleted
afterwards) are started and warmed up first, then each repeat measures its ``--runs`` runs per
line in ``--rounds`` interleaved rounds (in-process, 1 worker, 2 workers, 4 workers, then again),
and a line's rate is its runs over the sum of its rounds. The runs of a worker line are stored
PENDING and their messages published while its workers are stopped (SIGSTOP), as a queue that
filled while they were busy; the clock runs from their SIGCONT to the last run's final commit
(as the store dates it). Beside each rate: the CPU seconds per run of the worker processes
(in-process: of this process), which shows what Celery adds apart from waiting on the store;
and under it the whole system's CPU per run: the workers, this process (the runner in-process;
the submitter's watcher beside a fleet), the heartbeat sidecars, PostgreSQL's and RabbitMQ's
processes (/proc/PID/stat), with how many of the host's cores were busy meanwhile (/proc/stat,
everything on the host): a line near all the cores is CPU-bound, and its rate moves with the
CPU a run costs the whole system, not with the workers' CPU alone. Under each linearity target:
how many cores the line would keep busy at 0.8x linear, at the host CPU per run it cost. The
workers' sweepers are off here (``--sweep-interval 0``): a sweep looks at the shared store only
while the queue is empty, once every 2 s for the whole fleet, and the test database holds other
runs that would make it cost what a fleet's would not.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from harness import Report

ROOT = Path(__file__).resolve().parents[1]
FLOWS = ROOT / "tests" / "workers"
sys.path.insert(0, str(FLOWS))

from flows import five  # noqa: E402

from tether.runtime import Runner  # noqa: E402
from tether.state import RunStatus  # noqa: E402
from tether.stores import open_store  # noqa: E402
from tether.stores.base import CheckpointStore  # noqa: E402
from tether.workers import Dispatcher, Registry, store_for_message, store_pending  # noqa: E402
from tether.workers import app as worker_app  # noqa: E402

LOOP_FACTORY: Callable[[], asyncio.AbstractEventLoop] | None = getattr(worker_app, "new_event_loop", None)
"""The event loop a worker's pool thread runs on (uvloop's where installed): the in-process
line runs on the same kind, so that the two differ by Celery alone."""


def run(coro: Any) -> Any:
    """``asyncio.run`` on the workers' kind of event loop."""
    with asyncio.Runner(loop_factory=LOOP_FACTORY) as runner:
        return runner.run(coro)


def loop_kind() -> str:
    loop = LOOP_FACTORY() if LOOP_FACTORY is not None else asyncio.new_event_loop()
    try:
        return f"{type(loop).__module__}.{type(loop).__name__}"
    finally:
        loop.close()


LEASE = 30.0
TICK = os.sysconf("SC_CLK_TCK")


def spawn(store: str, broker: str, queue: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(FLOWS)])
    cmd = [sys.executable, "-c", "from tether.cli.app import main; main()", "worker", "--store", store]
    cmd += ["--broker", broker, "--queue", queue, "--workflow", "flows:five", "--loglevel", "INFO"]
    cmd += ["--lease", str(LEASE), *extra]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    proc.log = log  # type: ignore[attr-defined]
    return proc


def wait_ready(procs: list[subprocess.Popen[bytes]], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    for p in procs:
        while " ready." not in Path(p.log).read_text(errors="replace"):  # type: ignore[attr-defined]
            if p.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"worker did not start:\n{Path(p.log).read_text()[-2000:]}")  # type: ignore[attr-defined]
            time.sleep(0.1)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


def drop_queue(dispatcher: Dispatcher) -> None:
    try:
        with dispatcher.app.connection_for_write() as conn:
            conn.default_channel.queue_delete(dispatcher.queue)
    except Exception:
        pass
    dispatcher.close()


SERVICES = {"postgres": "PostgreSQL", "beam.smp": "RabbitMQ"}
"""Processes counted in a line's whole-system CPU besides the workers and this one, by name."""


def _ticks(pid: int | str, children: bool = False, gone: int = 0) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().decode().rpartition(")")[2].split()
    except OSError:
        return gone
    return sum(int(x) for x in fields[11 : 15 if children else 13])


def services(parents: set[int]) -> dict[int, str]:
    """The store's and the broker's processes on this host (PostgreSQL's backends included),
    and the children of ``parents`` (the runners' heartbeat sidecars), by role."""
    found = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    head, _, tail = f.read().decode().rpartition(")")
            except OSError:
                continue
            role = SERVICES.get(head.partition("(")[2])
            if role is None and int(tail.split()[1]) in parents and _is_sidecar(entry.name):
                role = "sidecars"
            if role is not None:
                found[int(entry.name)] = role
    return found


def _is_sidecar(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"_heartbeat_sidecar" in f.read()
    except OSError:
        return False


def host_busy() -> int:
    """Busy ticks of all the host's cores so far (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    return sum(ticks) - ticks[3] - ticks[4]


@dataclass
class Cpu:
    """A snapshot of the CPU ticks a line is charged: its workers (or nothing in-process), the
    bench process, their live children (heartbeat sidecars), PostgreSQL's and RabbitMQ's
    processes, and the whole host."""

    workers: list[int]
    ticks: dict[str, int] = field(default_factory=dict)
    per_pid: dict[int, int] = field(default_factory=dict)
    roles: dict[int, str] = field(default_factory=dict)

    @classmethod
    def take(cls, workers: list[int], start: Cpu | None = None) -> Cpu:
        """At a line's start (``start`` None): the processes are found (a scan of /proc) and
        this process's ticks read last; at its end the same processes are read, this one's
        first, so that neither scan nor read is charged to the line."""
        snap = cls(workers)
        bench = 0 if start is None else _ticks(os.getpid(), children=True)
        snap.roles = services({*workers, os.getpid()}) if start is None else start.roles
        snap.per_pid = {pid: ticks for pid in snap.roles if (ticks := _ticks(pid, gone=-1)) >= 0}
        snap.ticks = {
            "workers": sum(_ticks(pid, children=True) for pid in workers),
            "host": host_busy(),
            "bench": bench if start is not None else _ticks(os.getpid(), children=True),
        }
        return snap

    def since(self, before: Cpu) -> dict[str, float]:
        """CPU seconds per role from ``before`` to this snapshot. A process that started
        meanwhile, such as a new PostgreSQL backend, is not seen (the bench's and the workers'
        connections are open before the lines start), nor one that ended meanwhile."""
        out = {k: (v - before.ticks[k]) / TICK for k, v in self.ticks.items()}
        for role in (*SERVICES.values(), "sidecars"):
            out[role] = 0.0
        for pid, ticks in self.per_pid.items():  # (one gone meanwhile, such as a rabbitmqctl's: left out)
            if pid in before.per_pid:
                out[self.roles[pid]] += (ticks - before.per_pid[pid]) / TICK
        return out


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of processes and their children reaped so far (the
    heartbeat sidecar counts once it exited; a live one's share is small: it only renews)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().decode().rpartition(")")[2].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / TICK


@dataclass
class Line:
    """One throughput line: its runs and seconds summed over the rounds."""

    runs: int = 0
    seconds: float = 0.0
    cpu: float = 0.0
    used: dict[str, float] = field(default_factory=dict)
    """CPU seconds per role (workers, bench, PostgreSQL, RabbitMQ, host) over ``window``."""
    window: float = 0.0

    def add(self, runs: int, seconds: float, cpu: float, used: dict[str, float], window: float) -> None:
        self.runs, self.seconds, self.cpu, self.window = (
            self.runs + runs,
            self.seconds + seconds,
            self.cpu + cpu,
            self.window + window,
        )
        for k, v in used.items():
            self.used[k] = self.used.get(k, 0.0) + v

    def system_note(self) -> str:
        """The whole system's CPU per run and how busy the host's cores were."""
        ms = {k: 1e3 * v / self.runs for k, v in self.used.items()}
        parts = ", ".join(
            f"{k} {ms[k]:.2f}" for k in ("workers", "bench", "sidecars", "PostgreSQL", "RabbitMQ") if ms[k]
        )
        cores = self.used["host"] / self.window if self.window else float("nan")
        return f"{parts}; host busy {cores:.2f} of {os.cpu_count()} cores, {ms['host']:.2f} ms/run"

    @property
    def system(self) -> float:
        """ms CPU per run of the processes the line uses (workers, bench, PostgreSQL, RabbitMQ)."""
        return 1e3 * sum(v for k, v in self.used.items() if k != "host") / self.runs

    @property
    def rate(self) -> float:
        return self.runs / self.seconds if self.seconds else float("nan")


@dataclass
class Fleet:
    """``k`` worker processes consuming a queue of their own."""

    k: int
    queue: str
    dispatcher: Dispatcher
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)


MADE: list[str] = []
"""The runs this bench stored, deleted at its end (the store is shared with the test suite)."""

Measured = tuple[float, float, dict[str, float], float]
"""Seconds, the CPU seconds of the line's runner (this process or the workers), the CPU
seconds per role of the whole system, and the window those were taken over."""


async def in_process(store: CheckpointStore, runner: Runner, n: int, tag: str) -> Measured:
    """Seconds and CPU seconds for ``n`` runs one after another in this process (no broker)."""
    s0 = Cpu.take([])
    c0, t0 = time.process_time(), time.perf_counter()
    for i in range(n):
        await runner.start(f"bw-inproc-{tag}-{i}", {"label": str(i)})
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    MADE.extend(f"bw-inproc-{tag}-{i}" for i in range(n))
    return secs, cpu, Cpu.take([], s0).since(s0), secs


async def on_fleet(store: CheckpointStore, fleet: Fleet, n: int, tag: str) -> Measured:
    """Seconds from the release of ``n`` queued runs to the last one's final commit, and the CPU
    seconds the worker processes spent meanwhile.

    The runs are stored PENDING and their messages published (and confirmed) while the fleet's
    processes are stopped (SIGSTOP); the clock starts when they continue. Publishing is the
    submitter's work, not the worker's: done during the clock, it took a core of this 2-core
    host from the workers for its first tenth (the bench and RabbitMQ, a confirmed publish per
    run), which the in-process line never pays. The end is the latest run's final commit as the
    store dated it, not when this loop's next poll saw it."""
    registry = Registry([five()], bundled=False)
    stored = [
        await store_for_message(
            store, "five", {"label": str(i)}, run_id=f"bw-{tag}-{i}", registry=registry, queue=fleet.queue
        )
        for i in range(n)
    ]
    ids = [rid for rid, _ in stored]
    MADE.extend(ids)
    pids = [p.pid for p in fleet.procs]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        for rid, first in stored:  # as submit() sends them
            fleet.dispatcher.send(rid, workflow="five", first=first)
    finally:
        s0 = Cpu.take(pids)
        c0, t0, w0 = cpu_seconds(pids), time.time(), time.perf_counter()
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    seen: list[tuple[Cpu, float]] = []
    secs = await last_commit(store, ids, t0, lambda: seen.append((Cpu.take(pids, s0), time.perf_counter())))
    s1, w1 = seen[0]
    return secs, cpu_seconds(pids) - c0, s1.since(s0), w1 - w0


async def last_commit(
    store: CheckpointStore, ids: list[str], t0: float, done: Callable[[], object] = lambda: None
) -> float:
    """Seconds from ``t0`` to the latest final commit of ``ids`` as the store dated it.

    While the runs go, only the newest-queued one is read, once every 20 ms: it completes
    last or nearly (a queue is taken in order), and this process shares the host's cores
    with the workers and the database, so watching must cost them next to nothing. (One
    read per completed run, as before, made this process and its database connection take
    a few percent of a core during the worker lines only.) Then every run is read once, after
    ``done()`` is called (the whole system's CPU is taken there, without those reads)."""
    left, end, seen = list(ids), t0, False
    while left:
        info = await store.get_run(left[-1])
        if info is not None and info.status is RunStatus.COMPLETED:
            if not seen:
                seen = True
                done()
            waiting = []
            for rid in left:
                got = await store.get_run(rid)
                if got is not None and got.status is RunStatus.COMPLETED:
                    end = max(end, got.updated_at.timestamp())
                else:
                    waiting.append(rid)
            left = waiting
            if not left:
                break
        await asyncio.sleep(0.02)
        if time.time() - t0 > 600:
            raise SystemExit(f"{len(left)} runs not completed after 600 s")
    return end - t0


async def throughput(
    store_url: str, fleets: list[Fleet], n: int, rounds: int
) -> tuple[Line, dict[int, Line]]:
    """The in-process line and one line per fleet, measured in interleaved rounds."""
    base, lines = Line(), {f.k: Line() for f in fleets}
    sizes = [n // rounds + (1 if i < n % rounds else 0) for i in range(rounds)]
    async with open_store(store_url) as store:
        runner = Runner(five(), store)
        for size in sizes:
            tag = uuid.uuid4().hex[:8]
            vacuum(store_url)
            base.add(size, *await in_process(store, runner, size, tag))
            for f in fleets:
                vacuum(store_url)
                lines[f.k].add(size, *await on_fleet(store, f, size, f"{tag}-{f.k}"))
    return base, lines


def vacuum(store_url: str) -> None:
    """Before each line (not timed), what a fleet database's autovacuum does: each run's
    commits leave dead row versions, and a server whose autovacuum is off (the test machines')
    would have every line after the first walk past those of all the lines before it."""
    if not store_url.startswith(("postgresql://", "postgres://")):
        return
    import psycopg

    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute("VACUUM tether_runs, tether_checkpoints")


def start_fleets(store_url: str, broker: str, counts: list[int], tmp: Path) -> list[Fleet]:
    fleets = []
    for k in counts:
        queue = f"bench-{uuid.uuid4().hex[:8]}"
        fleet = Fleet(k, queue, Dispatcher.from_url(broker, queue=queue))
        fleet.procs = [
            spawn(store_url, broker, queue, tmp / f"w{k}-{i}.log", "--sweep-interval", "0") for i in range(k)
        ]
        fleets.append(fleet)
    for fleet in fleets:
        wait_ready(fleet.procs)
    return fleets


async def warm_up(store_url: str, fleets: list[Fleet]) -> None:
    """A few runs on every worker first: imports, store connections, the heartbeat sidecar."""
    async with open_store(store_url) as store:
        for f in fleets:
            await on_fleet(store, f, 4 * f.k, f"warm-{uuid.uuid4().hex[:6]}")


async def recovery(store_url: str, broker: str, tmp: Path, extra: list[str]) -> tuple[float, int]:
    """Seconds from kill -9 of the worker inside step s3 to another worker committing s3,
    and how many steps ran again."""
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    dispatcher = Dispatcher.from_url(broker, queue=queue)
    procs = [
        spawn(store_url, broker, queue, tmp / f"r-{i}-{uuid.uuid4().hex[:4]}.log", *extra) for i in range(2)
    ]
    trace = tmp / f"trace-{uuid.uuid4().hex[:6]}.log"
    try:
        wait_ready(procs)
        async with open_store(store_url) as store:
            rid = await store_pending(store, "five", {"trace": str(trace), "delay_s3": 1.0}, queue=queue)
            MADE.append(rid)
            dispatcher.send(rid, workflow="five")
            while not trace.exists() or " s3 " not in trace.read_text():
                await asyncio.sleep(0.01)
            pid = int(trace.read_text().split(" s3 ")[1].split()[1])
            os.kill(pid, signal.SIGKILL)
            killed = time.perf_counter()
            next(p for p in procs if p.pid == pid).wait()  # reaped, as a supervisor does (no zombie)
            while True:
                cp = await store.load(rid)
                if cp is not None and "s3" in cp.executed_node_ids:
                    took = time.perf_counter() - killed
                    break
                if time.perf_counter() - killed > 120:
                    raise SystemExit("no worker took the run over in 120 s")
                await asyncio.sleep(0.02)
            lines = [ln.split()[1] for ln in trace.read_text().splitlines() if ln.startswith(rid)]
            return took, len(lines) - len(set(lines))
    finally:
        stop(procs)
        drop_queue(dispatcher)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=None, help="runs per line and repeat (500; quick 100)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds per repeat (5; quick 2)")
    ap.add_argument("--repeats", type=int, default=None, help="repeats (3; quick 1)")
    ap.add_argument("--workers", default=None, help="worker counts, comma-separated (1,2,4; quick 1,2)")
    ap.add_argument("--no-recovery", action="store_true", help="skip the kill -9 measurements")
    ap.add_argument(
        "--store", default=os.environ.get("TETHER_TEST_POSTGRESQL_URL", "postgresql://127.0.0.1:5432/test")
    )
    ap.add_argument("--broker", default="amqp://guest:guest@127.0.0.1:5672//")
    ap.add_argument(
        "--redis-broker", default=os.environ.get("TETHER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    ap.add_argument("--shared-db", action="store_true", help="use --store's database as it is, not a new one")
    ap.add_argument(
        "--pg-set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a PostgreSQL setting for the bench's own database only (ALTER DATABASE ... SET), to see "
        "what a setting does to the lines, e.g. synchronous_commit=off (repeatable)",
    )
    args = ap.parse_args()
    settings = [pg_setting(text) for text in args.pg_set]
    own = not args.shared_db and args.store.startswith(("postgresql://", "postgres://"))
    if settings and not own:
        ap.error("--pg-set needs a PostgreSQL --store in a database of the bench's own (no --shared-db)")
    with contextlib.ExitStack() as stack:
        if own:
            args.store = stack.enter_context(own_database(args.store, settings))
        measure(args)


def pg_setting(text: str) -> tuple[str, str]:
    """``name=value`` as a setting name (letters, digits, ``_`` and ``.``) and its value."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name or not value or not all(c.isalnum() or c in "_." for c in name):
        raise SystemExit(f"--pg-set {text!r}: expected NAME=VALUE, e.g. synchronous_commit=off")
    return name, value


@contextlib.contextmanager
def own_database(url: str, settings: Sequence[tuple[str, str]] = ()) -> Iterator[str]:
    """A new database on ``url``'s server for this bench (dropped on leaving), as a URL, with
    ``settings`` for every session that connects to it."""
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    name = f"tether_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        with psycopg.connect(url, autocommit=True) as admin:  # (a setting refused: dropped too)
            for setting, value in settings:
                admin.execute(
                    sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                        sql.Identifier(name), sql.SQL(setting), sql.Literal(value)
                    )
                )
        own = urlunsplit(parts._replace(path="/" + name))
        run(set_up(own))  # the tables made once, before the workers all start at once
        yield own
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def set_up(store_url: str) -> None:
    async with open_store(store_url):
        pass


def measure(args: argparse.Namespace) -> None:
    n = args.runs or (100 if args.quick else 500)
    rounds = args.rounds or (2 if args.quick else 5)
    repeats = args.repeats or (1 if args.quick else 3)
    counts = [int(c) for c in (args.workers or ("1,2" if args.quick else "1,2,4")).split(",")]
    if 1 not in counts:
        counts.insert(0, 1)
    cores = os.cpu_count() or 1
    rep = Report(
        "bench_workers",
        f"{n} runs of 5 no-op steps a line: Celery workers (concurrency 1) vs one process; kill -9 recovery",
    )
    rep.line("store", 0, note=args.store.split("@")[-1])
    for text in args.pg_set:
        rep.line("PostgreSQL setting (this database only)", 0, note=text)
    rep.line("event loop", 0, note=f"{loop_kind()}, in the workers' pool threads and in-process alike")
    tmp = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    rep.line("lease", LEASE, "s", note="the worker default (--lease)")
    if "heartbeat" in inspect.signature(Runner.__init__).parameters:
        rep.line("heartbeat interval", LEASE / 3, "s", note="a third of the lease, from a sidecar process")
    fleets = start_fleets(args.store, args.broker, counts, tmp)
    try:
        run(warm_up(args.store, fleets))
        for _ in rep.runs(repeats):
            base, lines = run(throughput(args.store, fleets, n, rounds))
            rep.line(
                "in-process (no Celery)",
                base.rate,
                "runs/s",
                note=f"{1e3 * base.cpu / base.runs:.1f} ms CPU/run",
            )
            rep.line("in-process: whole system CPU/run", base.system, "ms", note=base.system_note())
            for k, line in lines.items():
                rep.line(
                    f"{k} worker(s)",
                    line.rate,
                    "runs/s",
                    note=f"{1e3 * line.cpu / line.runs:.1f} ms CPU/run in the workers",
                )
                rep.line(f"{k} worker(s): whole system CPU/run", line.system, "ms", note=line.system_note())
            one = lines[1].rate
            rep.line(
                "time a run spends more on 1 worker",
                1e3 * (1 / one - 1 / base.rate),
                "ms",
                note="broker round trips and Celery",
            )
            rep.target("1 worker / in-process", one / base.rate, goal=0.7, op=">=")
            for k in counts[1:]:
                lin = lines[k].rate / (k * one)
                if k <= cores:
                    rep.target(f"{k} workers / ({k} x 1 worker): linearity", lin, goal=0.8, op=">=")
                    rep.line(
                        f"{k} workers at 0.8 x linear would keep busy",
                        0.8 * k * one * lines[k].used["host"] / lines[k].runs,
                        "cores",
                        note=f"of {cores}: the host's busy CPU per run on this line times 0.8 x {k} x 1 worker's rate",
                    )
                else:
                    rep.line(f"{k} workers / ({k} x 1 worker), past the {cores} cores", lin, "x")
                    rep.line(f"{k} workers / {cores} workers", lines[k].rate / lines[cores].rate, "x")
    finally:
        for f in fleets:
            stop(f.procs)
            drop_queue(f.dispatcher)
    if not args.no_recovery:
        for _ in range(1 if args.quick else 3):
            took, rerun = run(recovery(args.store, args.broker, tmp, []))
            rep.line("kill -9 -> next commit (RabbitMQ)", took, "s")
            rep.target("recovery (RabbitMQ) - lease", took - LEASE, goal=2.0, op="<=", unit="s")
            rep.target("steps re-run per crash (RabbitMQ)", rerun, goal=1, op="<=", unit="")
            took, rerun = run(
                recovery(args.store, args.redis_broker, tmp, ["--sweep-interval", "1", "--sweep-grace", "1"])
            )
            rep.line("kill -9 -> next commit (Redis broker, sweep 1 s)", took, "s")
            rep.target("recovery (Redis broker) - lease", took - LEASE, goal=2.0, op="<=", unit="s")
            rep.target("steps re-run per crash (Redis broker)", rerun, goal=1, op="<=", unit="")
    run(remove_runs(args.store))
    rep.finish()


async def remove_runs(store_url: str) -> None:
    """Delete the runs this bench stored (after every line: not timed)."""
    async with open_store(store_url) as store:
        for rid in MADE:
            await store.delete(rid)
    MADE.clear()


if __name__ == "__main__":
    main()
