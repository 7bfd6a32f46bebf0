"""Runner overhead and resume time, against the store's own primitives in the same run.

    .venv/bin/python benchmarks/bench_runtime.py [--backends sqlite,redis,postgresql] [--steps 200]

1. Per-step cost of the Runner with a no-op step (checkpoint included) divided by the cost
   of one raw checkpoint (``store.commit`` of a one-message delta on a run of the same
   size); three interleaved rounds, median of the rounds' medians. Target <= 1.3x.
2. Resume of a 1,000-step run whose state is 10 MB: ``Runner.resume`` (load, lease
   checkpoint, finding nothing left to run) divided by one ``store.load`` of the latest
   checkpoint. Target <= 2x.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

from tether.runtime import Runner, Step, StepContext, Workflow
from tether.state import ExecutionContext
from tether.stores import CheckpointStore, open_store

URLS = {
    "sqlite": "sqlite:///{tmp}/bench-runtime.db",
    "redis": "redis://127.0.0.1:6379/0",
    "postgresql": "postgresql://127.0.0.1:5432/test",
    "mysql": "mysql://root@127.0.0.1:3306/test",
}


async def noop(sc: StepContext) -> dict[str, Any]:
    return {"messages": [{"role": "tool", "content": "ok"}]}


def rid(tag: str) -> str:
    return f"bench-{tag}-{uuid.uuid4().hex[:10]}"


async def raw_commit_cost(store: CheckpointStore, steps: int) -> list[float]:
    """One store.commit of a one-message delta, as the runner's steps write."""
    ctx = ExecutionContext(rid("raw"), {"messages": []})
    await store.commit(ctx)
    times = []
    for _ in range(steps):
        ctx.merge({"messages": [{"role": "tool", "content": "ok"}]})
        t = time.perf_counter()
        await store.commit(ctx)
        times.append(time.perf_counter() - t)
    await store.delete(ctx.run_id)
    return times


async def runner_step_cost(store: CheckpointStore, steps: int) -> list[float]:
    wf = Workflow.plan([Step(id=f"s{i}", fn=noop) for i in range(steps)])
    stamps: list[float] = []
    runner = Runner(
        wf, store, on_event=lambda e: stamps.append(time.perf_counter()) if e.kind == "step_done" else None
    )
    run_id = rid("runner")
    await runner.start(run_id, {"messages": []})
    await store.delete(run_id)
    return [b - a for a, b in zip(stamps, stamps[1:], strict=False)]


async def resume_cost(store: CheckpointStore, steps: int, size_mb: float) -> tuple[float, float]:
    big = [{"role": "user", "content": os.urandom(500).hex()} for _ in range(int(size_mb * 1000))]
    wf = Workflow.plan([Step(id=f"s{i}", fn=noop) for i in range(steps)])
    run_id = rid("resume")
    await Runner(wf, store).start(run_id, {"history": big})
    # make it look crashed mid-run: RUNNING with a stale lease (a dead pid)
    from tether.state import RunStatus
    from tether.state.reserved import runtime_update

    ctx = await store.load_context(run_id)
    assert ctx is not None
    ctx.merge(runtime_update(lease={"owner": "dead", "host": "elsewhere", "pid": 0, "expires_at": 0}))
    await store.commit(ctx, status=RunStatus.RUNNING)
    loads, resumes = [], []
    for _ in range(5):
        t = time.perf_counter()
        await store.load(run_id)
        loads.append(time.perf_counter() - t)
        t = time.perf_counter()
        await Runner(wf, store).resume(run_id)
        resumes.append(time.perf_counter() - t)
        await store.set_status(run_id, RunStatus.RUNNING)
    await store.delete(run_id)
    return statistics.median(loads), statistics.median(resumes)


def ms(x: float) -> str:
    return f"{x * 1000:7.2f} ms"


async def bench(name: str, url: str, steps: int, resume_steps: int, size_mb: float) -> None:
    try:
        async with open_store(url) as store:
            raws, runs = [], []
            for _ in range(3):  # interleaved rounds: both sides see the same machine drift
                raws.append(statistics.median(await raw_commit_cost(store, steps)))
                runs.append(statistics.median(await runner_step_cost(store, steps)))
            raw_med, run_med = statistics.median(raws), statistics.median(runs)
            print(
                f"{name:<11} raw commit {ms(raw_med)}  runner step {ms(run_med)}  "
                f"ratio {run_med / raw_med:5.2f}x"
            )
            load, res = await resume_cost(store, resume_steps, size_mb)
            print(
                f"{'':<11} load latest {ms(load)} resume ({resume_steps} steps, {size_mb:g} MB) {ms(res)}  "
                f"ratio {res / load:5.2f}x"
            )
    except Exception as exc:  # a missing server skips that backend
        print(f"{name:<11} skipped: {type(exc).__name__}: {exc}")


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", default="sqlite,redis,postgresql")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--resume-steps", type=int, default=1000)
    parser.add_argument("--size-mb", type=float, default=10.0)
    args = parser.parse_args()
    print(f"# runtime bench: python {sys.version.split()[0]}, {os.cpu_count()} cpus; medians")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.backends.split(","):
            await bench(name, URLS[name].format(tmp=tmp), args.steps, args.resume_steps, args.size_mb)


if __name__ == "__main__":
    asyncio.run(main())
