"""Celery workers: throughput of short runs with 1, 2, 4 worker processes against one process
without Celery, and recovery after kill -9 of the worker executing a run.

    PYTHONPATH=src:benchmarks python benchmarks/bench_workers.py            # full: 500 runs, 1/2/4 workers, 3 repeats
    PYTHONPATH=src:benchmarks python benchmarks/bench_workers.py --quick    # 40 runs, 1/2 workers, 1 repeat

Store: --store (default TETHER_TEST_POSTGRESQL_URL or postgresql://127.0.0.1:5432/test);
broker: --broker (default amqp://guest:guest@127.0.0.1:5672//). Each measurement uses its
own queue, deleted afterwards. Every run is 5 no-op steps (the tests' ``five`` workflow).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from harness import Report

ROOT = Path(__file__).resolve().parents[1]
FLOWS = ROOT / "tests" / "workers"
sys.path.insert(0, str(FLOWS))

from flows import five  # noqa: E402

from tether.runtime import Runner  # noqa: E402
from tether.state import RunStatus  # noqa: E402
from tether.stores import open_store  # noqa: E402
from tether.workers import Dispatcher, Registry, store_pending  # noqa: E402

LEASE = 30.0


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


async def in_process(store_url: str, n: int) -> float:
    """Runs per second, one after another in this process (no broker)."""
    async with open_store(store_url) as store:
        runner = Runner(five(), store)
        tag = uuid.uuid4().hex[:6]
        t0 = time.perf_counter()
        for i in range(n):
            await runner.start(f"bw-inproc-{tag}-{i}", {"label": str(i)})
        return n / (time.perf_counter() - t0)


async def with_workers(store_url: str, broker: str, n: int, k: int, tmp: Path) -> float:
    """Runs per second with ``k`` worker processes (concurrency 1): from the first message
    sent to the last run COMPLETED. The runs are stored PENDING first, then sent."""
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    dispatcher = Dispatcher.from_url(broker, queue=queue)
    procs = [
        spawn(store_url, broker, queue, tmp / f"w{k}-{i}.log", "--sweep-interval", "0") for i in range(k)
    ]
    try:
        wait_ready(procs)
        async with open_store(store_url) as store:
            registry = Registry([five()], bundled=False)
            tag = uuid.uuid4().hex[:6]
            ids = [
                await store_pending(
                    store, "five", {"label": str(i)}, run_id=f"bw-{tag}-{i}", registry=registry, queue=queue
                )
                for i in range(n)
            ]
            t0 = time.perf_counter()
            for rid in ids:
                dispatcher.send(rid, workflow="five")
            left = list(ids)
            while left:  # oldest first: one cheap read per poll while runs are still going
                info = await store.get_run(left[0])
                if info is not None and info.status is RunStatus.COMPLETED:
                    left.pop(0)
                    continue
                await asyncio.sleep(0.02)
                if time.perf_counter() - t0 > 600:
                    raise SystemExit(f"{len(left)} runs not completed after 600 s")
            return n / (time.perf_counter() - t0)
    finally:
        stop(procs)
        drop_queue(dispatcher)


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
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument(
        "--store", default=os.environ.get("TETHER_TEST_POSTGRESQL_URL", "postgresql://127.0.0.1:5432/test")
    )
    ap.add_argument("--broker", default="amqp://guest:guest@127.0.0.1:5672//")
    ap.add_argument(
        "--redis-broker", default=os.environ.get("TETHER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    args = ap.parse_args()
    n = args.runs or (40 if args.quick else 500)
    counts = [1, 2] if args.quick else [1, 2, 4]
    cores = os.cpu_count() or 1
    rep = Report(
        "bench_workers", f"{n} runs of 5 no-op steps: Celery workers vs one process; kill -9 recovery"
    )
    tmp = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    rep.line("lease", LEASE, "s", note="the worker default (--lease)")
    if "heartbeat" in inspect.signature(Runner.__init__).parameters:
        rep.line("heartbeat interval", LEASE / 3, "s", note="a third of the lease, from a sidecar process")
    else:
        rep.line("heartbeat interval", 0, "s", note="none in this build: renewed at step commits")
    for _ in rep.runs(1 if args.quick else 3):
        base = asyncio.run(in_process(args.store, n))
        rep.line("in-process", base, "runs/s")
        rates: dict[int, float] = {}
        for k in counts:
            rates[k] = asyncio.run(with_workers(args.store, args.broker, n, k, tmp))
            rep.line(f"{k} worker(s)", rates[k], "runs/s")
        rep.target("1 worker / in-process", rates[1] / base, goal=0.7, op=">=")
        for k in counts[1:]:
            if k <= cores:
                rep.target(f"{k} workers / (k x 1 worker)", rates[k] / (k * rates[1]), goal=0.8, op=">=")
            else:
                rep.line(
                    f"{k} workers / (k x 1 worker), past the {cores} cores", rates[k] / (k * rates[1]), "x"
                )
        took, rerun = asyncio.run(recovery(args.store, args.broker, tmp, []))
        rep.line("kill -9 -> next commit (RabbitMQ)", took, "s")
        rep.target("recovery (RabbitMQ) - lease", took - LEASE, goal=2.0, op="<=", unit="s")
        rep.target("steps re-run per crash (RabbitMQ)", rerun, goal=1, op="<=", unit="")
        took, rerun = asyncio.run(
            recovery(args.store, args.redis_broker, tmp, ["--sweep-interval", "1", "--sweep-grace", "1"])
        )
        rep.line("kill -9 -> next commit (Redis broker, sweep 2 s)", took, "s")
        rep.target("recovery (Redis broker) - lease", took - LEASE, goal=2.0, op="<=", unit="s")
        rep.target("steps re-run per crash (Redis broker)", rerun, goal=1, op="<=", unit="")
    rep.finish()


if __name__ == "__main__":
    main()
