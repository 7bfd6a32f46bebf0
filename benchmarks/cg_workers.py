"""Instructions per run (callgrind) of ``bench_workers``' runs, in a Celery worker's threads
and in one process without Celery: what a worker adds to a run, counted rather than timed, so
that a change to it can be compared on a busy host.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/cg_workers.py              # 100 runs a line
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/cg_workers.py --runs 50

Each line is one process under valgrind's callgrind, counted only while its measured runs
execute (after 20 runs of warm-up), on the PostgreSQL store (``--store``):

* in-process: ``Runner.start`` of each run, all in one coroutine (``bench_workers``' line);
* in-process, a loop entry per run: each start through ``loop.run_until_complete``, as a
  worker's pool thread enters its event loop once per message;
* executor: ``RunExecutor.execute`` of runs stored as ``submit()`` stores them, with the
  first state their message carries, a loop entry each: the worker's path without Celery;
* worker: one ``tether worker --concurrency 1`` executing runs queued on RabbitMQ
  (``--broker``), per thread: the consumer (Celery receiving, dispatching and acknowledging a
  message) and the pool thread (the run, inside Celery's task bookkeeping).

So: executor minus the loop-entry line is tether's own path per message; the pool thread
minus the executor is Celery's bookkeeping around the task and the run's INFO line; the
consumer is all Celery's. The counts move by about 1% between repeats (timers, the order of
wake-ups). Not counted: the kernel's work (system calls, context switches), nor cache misses.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import bench_workers as bw

ROOT = Path(__file__).resolve().parents[1]
WARM = 20


def _toggle(on: bool, pid: int | None = None) -> None:
    cmd = ["callgrind_control", "-i", "on" if on else "off", str(pid or os.getpid())]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def child(mode: str, n: int, store_url: str) -> None:
    """One in-process line, run under callgrind by :func:`counted`."""
    from flows import five

    from tether.runtime import Runner
    from tether.stores import open_store
    from tether.workers import Registry, RunExecutor, store_for_message

    assert bw.LOOP_FACTORY is not None
    loop = bw.LOOP_FACTORY()
    cm = open_store(store_url)
    store = loop.run_until_complete(cm.__aenter__())
    tag = uuid.uuid4().hex[:8]
    made: list[str] = []
    try:
        if mode == "executor":
            registry = Registry([five()], bundled=False)
            executor = RunExecutor(store, registry, lease_ttl=30)

            async def stored(prefix: str, k: int) -> list[tuple[str, Any]]:
                return [
                    await store_for_message(
                        store, "five", {"label": str(i)}, run_id=f"cgw-{tag}-{prefix}{i}", registry=registry
                    )
                    for i in range(k)
                ]

            warm, runs = loop.run_until_complete(stored("w", WARM)), loop.run_until_complete(stored("m", n))
            made = [rid for rid, _ in warm + runs]
            for rid, first in warm:
                loop.run_until_complete(executor.execute(rid, workflow="five", first=first))
            _toggle(True)
            for rid, first in runs:
                loop.run_until_complete(executor.execute(rid, workflow="five", first=first))
            _toggle(False)
            return
        runner = Runner(five(), store)
        made = [f"cgw-{tag}-{i}" for i in range(WARM + n)]
        for rid in made[:WARM]:
            loop.run_until_complete(runner.start(rid, {"label": rid}))
        _toggle(True)
        if mode == "loop":
            for rid in made[WARM:]:
                loop.run_until_complete(runner.start(rid, {"label": rid}))
        else:

            async def all_of_them() -> None:
                for rid in made[WARM:]:
                    await runner.start(rid, {"label": rid})

            loop.run_until_complete(all_of_them())
        _toggle(False)
    finally:

        async def clean() -> None:
            for rid in made:
                await store.delete(rid)
            await cm.__aexit__(None, None, None)

        loop.run_until_complete(clean())


def valgrind(out: str) -> list[str]:
    for old in glob.glob(out + "*"):
        os.unlink(old)
    return [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--separate-threads=yes",
        f"--callgrind-out-file={out}",
    ]


def totals(out: str, n: int) -> list[float]:
    """Million instructions per run of each thread that ran while counted (in thread order)."""
    found = []
    for path in sorted(glob.glob(out + "*")):
        for line in Path(path).read_text(errors="replace").splitlines():
            if line.startswith("totals:") and int(line.split()[1]):
                found.append(int(line.split()[1]) / n / 1e6)
    return found


def counted(mode: str, n: int, store_url: str, tmp: Path) -> list[float]:
    out = str(tmp / f"cg.{mode}.out")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "benchmarks"), str(bw.FLOWS)]),
    }
    cmd = [*valgrind(out), sys.executable, __file__, "--child", mode, "--runs", str(n), "--store", store_url]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return totals(out, n)


async def on_worker(n: int, store_url: str, broker: str, tmp: Path) -> list[float]:
    from tether.stores import open_store
    from tether.workers import Dispatcher

    out = str(tmp / "cg.worker.out")
    queue = f"cgw-{uuid.uuid4().hex[:8]}"
    dispatcher = Dispatcher.from_url(broker, queue=queue)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(bw.FLOWS)])
    cmd = [*valgrind(out), sys.executable, "-c", "from tether.cli.app import main; main()", "worker"]
    cmd += ["--store", store_url, "--broker", broker, "--queue", queue, "--workflow", "flows:five"]
    cmd += ["--loglevel", "INFO", "--lease", str(bw.LEASE), "--sweep-interval", "0"]
    log = tmp / "worker.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env)
    proc.log = log  # type: ignore[attr-defined]
    try:
        bw.wait_ready([proc], timeout=600)
        async with open_store(store_url) as store:
            fleet = bw.Fleet(1, queue, dispatcher, [proc])
            await bw.on_fleet(store, fleet, WARM, f"cgw-warm-{queue}")
            _toggle(True, proc.pid)
            await bw.on_fleet(store, fleet, n, f"cgw-{queue}")
            _toggle(False, proc.pid)
            subprocess.run(["callgrind_control", "-d", str(proc.pid)], capture_output=True, check=False)
    finally:
        bw.stop([proc])
        bw.drop_queue(dispatcher)
        await bw.remove_runs(store_url)
    return totals(out, n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument(
        "--store", default=os.environ.get("TETHER_TEST_POSTGRESQL_URL", "postgresql://127.0.0.1:5432/test")
    )
    ap.add_argument("--broker", default="amqp://guest:guest@127.0.0.1:5672//")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.runs, args.store)
        return
    tmp = Path(tempfile.mkdtemp(prefix="cg-workers-"))
    n = args.runs
    print(f"# cg_workers: million instructions (callgrind Ir) per run of 5 no-op steps, {n} runs a line")
    lines = {mode: sum(counted(mode, n, args.store, tmp)) for mode in ("inproc", "loop", "executor")}
    threads = bw.run(on_worker(n, args.store, args.broker, tmp))
    consumer, pool = (threads + [0.0, 0.0])[:2]
    print(f"  in-process                         {lines['inproc']:7.3f}")
    print(f"  in-process, a loop entry per run   {lines['loop']:7.3f}")
    print(f"  executor (no Celery)               {lines['executor']:7.3f}")
    print(f"  worker: consumer thread            {consumer:7.3f}")
    print(f"  worker: pool thread                {pool:7.3f}")
    print(f"  worker: all threads                {sum(threads):7.3f}")
    print(f"  worker / in-process                {sum(threads) / lines['inproc']:7.3f} x")
    print(f"  added: tether's path per message   {lines['executor'] - lines['inproc']:7.3f}")
    print(f"  added: Celery around the task, log {pool - lines['executor']:7.3f}")
    print(f"  added: Celery's consumer           {consumer:7.3f}")


if __name__ == "__main__":
    main()
