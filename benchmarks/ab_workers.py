"""bench_workers' three lines (in-process, 1 worker, 2 workers) for two source trees at once,
round by round, so that a busy host's drift lands on both alike.

    git archive main src | tar -x -C /tmp/base          # a tree to compare with (its src/)
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/ab_workers.py --a /tmp/base --b . --runs 100 --rounds 16

``bench_workers`` compares lines of one tree: its ratios (1 worker / in-process, 2 workers /
twice 1 worker) move by ±0.2 from run to run when other work shares the host, more than a
change under test moves them. Here each round runs, for tree A then tree B (the order
alternating every round), ``--runs`` runs in-process (a child process on that tree's
``src``, its runner and store opened once), then on a 1-worker and a 2-worker fleet of
that tree (``bench_workers.on_fleet``: queued runs released together, the clock to the
last final commit as the store dates it). A line's rate is its runs over the sum of its
rounds; the per-round ratios are printed too, to show the spread. The runs are deleted at
the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import bench_workers as bw

from tether.stores import open_store
from tether.workers import Dispatcher

INPROC = r"""
import asyncio, sys, time
sys.path[:0] = [sys.argv[1] + "/src", sys.argv[2]]
from flows import five
from tether.runtime import Runner
from tether.stores import open_store

async def main():
    n, tag = int(sys.argv[4]), sys.argv[5]
    async with open_store(sys.argv[3]) as store:
        runner = Runner(five(), store)
        await runner.start(f"abw-{tag}-w", {"label": "w"})
        for line in sys.stdin:
            t0 = time.perf_counter()
            for i in range(n):
                await runner.start(f"abw-{tag}-{line.strip()}-{i}", {"label": str(i)})
            print(time.perf_counter() - t0, flush=True)

asyncio.run(main())
"""
"""The in-process line in a child process on one tree: one round per line read."""


def spawn(root: str, store: str, broker: str, queue: str, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PYTHONPATH"] = os.pathsep.join([f"{root}/src", str(bw.FLOWS)])
    cmd = [sys.executable, "-c", "from tether.cli.app import main; main()", "worker", "--store", store]
    cmd += ["--broker", broker, "--queue", queue, "--workflow", "flows:five", "--loglevel", "INFO"]
    cmd += ["--lease", str(bw.LEASE), "--sweep-interval", "0"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    proc.log = log  # type: ignore[attr-defined]
    return proc


async def measure(args: argparse.Namespace) -> dict[tuple[str, int], list[float]]:
    trees = {"A": str(Path(args.a).resolve()), "B": str(Path(args.b).resolve())}
    n, tmp = args.runs, Path(tempfile.mkdtemp(prefix="ab-workers-"))
    fleets: dict[tuple[str, int], bw.Fleet] = {}
    children: dict[str, tuple[subprocess.Popen[str], str]] = {}
    secs: dict[tuple[str, int], list[float]] = {}
    made: list[str] = []
    for name, root in trees.items():
        for k in (1, 2):
            queue = f"abw-{uuid.uuid4().hex[:8]}"
            fleet = bw.Fleet(k, queue, Dispatcher.from_url(args.broker, queue=queue))
            fleet.procs = [
                spawn(root, args.store, args.broker, queue, tmp / f"{name}{k}-{i}.log") for i in range(k)
            ]
            fleets[(name, k)] = fleet
        tag = uuid.uuid4().hex[:6]
        cmd = [sys.executable, "-c", INPROC, root, str(bw.FLOWS), args.store, str(n), tag]
        children[name] = (
            subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True),
            tag,
        )
    try:
        for fleet in fleets.values():
            bw.wait_ready(fleet.procs)
        async with open_store(args.store) as store:
            for fleet in fleets.values():
                await bw.on_fleet(store, fleet, 4 * fleet.k, f"abw-warm-{uuid.uuid4().hex[:6]}")
            for r in range(args.rounds):
                for name in list(trees) if r % 2 == 0 else list(trees)[::-1]:
                    child, tag = children[name]
                    assert child.stdin is not None and child.stdout is not None
                    child.stdin.write(f"{r}\n")
                    child.stdin.flush()
                    secs.setdefault((name, 0), []).append(float(child.stdout.readline()))
                    made.extend(f"abw-{tag}-{r}-{i}" for i in range(n))
                    for k in (1, 2):
                        took, *_ = await bw.on_fleet(
                            store, fleets[(name, k)], n, f"abw-{uuid.uuid4().hex[:8]}"
                        )
                        secs.setdefault((name, k), []).append(took)
                print(f"round {r + 1} of {args.rounds}: load average {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        for child, tag in children.values():
            if child.stdin is not None:
                child.stdin.close()
            child.wait()
            made.append(f"abw-{tag}-w")
        for fleet in fleets.values():
            bw.stop(fleet.procs)
            bw.drop_queue(fleet.dispatcher)
        bw.MADE.extend(made)
        await bw.remove_runs(args.store)
    return secs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="tree A (a directory with src/)")
    ap.add_argument("--b", required=True, help="tree B (a directory with src/)")
    ap.add_argument("--runs", type=int, default=100, help="runs per line and round")
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument(
        "--store", default=os.environ.get("TETHER_TEST_POSTGRESQL_URL", "postgresql://127.0.0.1:5432/test")
    )
    ap.add_argument("--broker", default="amqp://guest:guest@127.0.0.1:5672//")
    args = ap.parse_args()
    print(f"# ab_workers: A {args.a}, B {args.b}; load average {os.getloadavg()}")
    secs = asyncio.run(measure(args))
    n = args.runs
    for name in ("A", "B"):
        rate = {k: n * len(secs[(name, k)]) / sum(secs[(name, k)]) for k in (0, 1, 2)}
        print(
            f"{name}: in-process {rate[0]:.0f} runs/s, 1 worker {rate[1]:.0f}, 2 workers {rate[2]:.0f}; "
            f"1 worker / in-process {rate[1] / rate[0]:.2f}, linearity {rate[2] / (2 * rate[1]):.2f}"
        )
        one = [b / a for a, b in zip(secs[(name, 1)], secs[(name, 0)], strict=True)]
        lin = [b / (2 * a) for a, b in zip(secs[(name, 2)], secs[(name, 1)], strict=True)]
        print(f"   per round, 1 worker / in-process: {' '.join(f'{x:.2f}' for x in one)}")
        print(f"   per round, linearity:             {' '.join(f'{x:.2f}' for x in lin)}")


if __name__ == "__main__":
    main()
