"""How soon a stalled lease holder's shell command stops: from the lease's end to its group gone.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_fence.py [--rounds 5] [--ttl 2] [--store URL]

Each round starts a runner process (``Runner`` on the store, lease ``--ttl``) whose one step
runs ``sleep 120`` through ``LocalSession``, SIGSTOPs it once the command runs, and polls
``/proc`` every 5 ms until the command's process group is gone. Printed per round: that
moment minus the run's ``lease_until`` in the store (negative: before the lease ran out,
as it should be, since another runner may take the run over from then on). The sidecar
kills from its own count (its last renewal plus the lease), a tick (0.2 s) at a time, a
margin (``min(0.4 s, ttl / 5)``) before it; a commit since its last renewal moves the
store's ``lease_until`` on by up to a third of the lease, which the sidecar does not see.
Goal: every figure in ``[-(ttl/3 + 0.6), 0]`` s. The runs are deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from harness import commit, load_average

from tether.stores import create_store

CHILD = r"""
import asyncio, os, sys
from tether.runtime import Runner, Step, StepContext, Workflow
from tether.stores import create_store
from tether.tools import LocalSession

async def main(url, run_id, ttl, work):
    store = create_store(url)
    await store.setup()

    async def step(sc: StepContext) -> dict:
        task = asyncio.create_task(LocalSession(work).run("echo $$ > pg; sleep 120"))
        while not os.path.exists(os.path.join(work, "pg")):
            await asyncio.sleep(0.01)
        print("in:cmd", flush=True)
        await task
        return {}

    await Runner(Workflow.plan([Step(id="cmd", fn=step)]), store, lease_ttl=float(ttl)).start(run_id, {})

asyncio.run(main(*sys.argv[1:]))
"""


def group_alive(pgid: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            return True
    return False


async def one_round(url: str, ttl: float, run_id: str) -> float:
    with tempfile.TemporaryDirectory() as work:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, url, run_id, str(ttl), work],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        pgid = None
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "in:cmd"
            pgid = int(Path(work, "pg").read_text())
            os.kill(child.pid, signal.SIGSTOP)
            stopped = time.monotonic()
            while group_alive(pgid):
                if time.monotonic() - stopped > ttl + 10:
                    raise AssertionError("the command outlived its lease by 10 s")
                await asyncio.sleep(0.005)
            gone = time.time()
            store = create_store(url)
            try:
                info = await store.get_run(run_id)
            finally:
                await store.aclose()
            assert info is not None and info.lease_until is not None
            return gone - info.lease_until
        finally:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.wait()
            if pgid is not None:
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ttl", type=float, default=2.0)
    parser.add_argument("--store", default=None, help="store URL (default: a SQLite file of its own)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.store or f"sqlite:///{tmp}/fence.db"
        store = create_store(url)
        await store.setup()
        print(f"# bench_fence: commit {commit()}, load {load_average()}, store {url.split(':')[0]}")
        print(f"  lease {args.ttl:g}s, heartbeat every {args.ttl / 3:.2f}s, sidecar tick 0.2s")
        ids = [f"bench-fence-{uuid.uuid4().hex[:10]}" for _ in range(args.rounds)]
        try:
            figures = []
            for run_id in ids:
                late = await one_round(url, args.ttl, run_id)
                figures.append(late)
                print(f"  command gone {late:+.3f}s after the lease's end")
            print(
                f"  median {statistics.median(figures):+.3f}s, min {min(figures):+.3f}s, max {max(figures):+.3f}s;"
                f" load {load_average()}"
            )
        finally:
            for run_id in ids:
                await store.delete(run_id)
            await store.aclose()


if __name__ == "__main__":
    asyncio.run(main())
