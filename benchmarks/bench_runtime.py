#!/usr/bin/env python
"""The Runner's own cost per step and a resume's cost, against the store's primitives.

    .venv/bin/python benchmarks/bench_runtime.py                     # SQLite, 3 runs
    .venv/bin/python benchmarks/bench_runtime.py --quick             # 1 run, fewer steps
    .venv/bin/python benchmarks/bench_runtime.py --backends sqlite,redis,postgresql

1. **Step**: a workflow of N steps, each appending one corpus message (prose, a tool call or
   a tool result) to ``messages``, run by ``Runner.start`` (its bookkeeping, the TODO list,
   the route, the checkpoint), against the baseline: N ``store.commit`` calls of the same
   one-message deltas on a run of the same size. Both are timed as whole batches,
   interleaved round by round. Target: runner step / raw commit <= 1.3x.
2. **Resume**: a run of 1,000 steps whose state holds a ~10 MB chat (``--size-mb``),
   left RUNNING with a dead worker's lease: ``Runner.resume`` (load, lease checkpoint,
   finding nothing left to run, the final checkpoint) against one ``store.load`` of the
   latest checkpoint, interleaved. Target: resume / load <= 2x.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import uuid
from typing import Any

from harness import Report, ainterleave, corpus

from tether.runtime import Runner, Step, StepContext, Workflow
from tether.state import ExecutionContext, RunStatus
from tether.state.reserved import runtime_update
from tether.stores import CheckpointStore, open_store

URLS = {
    "sqlite": "sqlite:///{tmp}/bench-runtime.db",
    "redis": "redis://127.0.0.1:6379/0",
    "postgresql": "postgresql://127.0.0.1:5432/test",
    "mysql": "mysql://root@127.0.0.1:3306/test",
}


def rid(tag: str) -> str:
    return f"bench-runtime-{tag}-{uuid.uuid4().hex[:10]}"


def step_messages(steps: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [corpus.message(rng, i) for i in range(steps)]


async def raw_commits(store: CheckpointStore, msgs: list[dict[str, Any]]) -> None:
    """What the runner's steps write, as bare commits: one message appended per commit."""
    ctx = ExecutionContext(rid("raw"), {"messages": []})
    await store.commit(ctx)
    for msg in msgs:
        ctx.merge({"messages": [msg]})
        await store.commit(ctx)
    await store.delete(ctx.run_id)


async def runner_steps(store: CheckpointStore, msgs: list[dict[str, Any]]) -> None:
    def step(msg: dict[str, Any]) -> Any:
        async def run(sc: StepContext) -> dict[str, Any]:
            return {"messages": [msg]}

        return run

    wf = Workflow.plan([Step(id=f"s{i}", fn=step(m)) for i, m in enumerate(msgs)])
    run_id = rid("runner")
    await Runner(wf, store).start(run_id, {"messages": []})
    await store.delete(run_id)


async def step_cost(rep: Report, name: str, store: CheckpointStore, steps: int, rounds: int) -> None:
    msgs = step_messages(steps, seed=7)
    t = await ainterleave(
        {"runner": lambda: runner_steps(store, msgs), "raw": lambda: raw_commits(store, msgs)},
        rounds=rounds,
    )
    run, raw = statistics.median(t["runner"]) / steps, statistics.median(t["raw"]) / steps
    rep.line(f"{name}: raw commit (one message appended), per step", raw * 1e3, "ms")
    rep.line(f"{name}: runner step (same message), per step", run * 1e3, "ms")
    rep.target(f"{name}: runner step / raw commit", run / raw, goal=1.3)


async def resume_cost(rep: Report, name: str, store: CheckpointStore, steps: int, size_mb: float) -> None:
    async def noop(sc: StepContext) -> dict[str, Any]:
        return {"n": 1}

    chat = corpus.messages(11, int(size_mb * 1e6))
    wf = Workflow.plan([Step(id=f"s{i}", fn=noop) for i in range(steps)])
    run_id = rid("resume")
    await Runner(wf, store).start(run_id, {"history": chat})
    ctx = await store.load_context(run_id)
    assert ctx is not None
    # left as a crash leaves it: RUNNING, the lease of a worker that is gone
    ctx.merge(runtime_update(lease={"owner": "dead", "host": "elsewhere", "pid": 0, "expires_at": 0}))
    await store.commit(ctx, status=RunStatus.RUNNING)

    async def load() -> None:
        assert await store.load(run_id) is not None

    async def resume() -> None:
        await Runner(wf, store).resume(run_id)
        await store.set_status(run_id, RunStatus.RUNNING)  # (not timed apart: one small write)

    t = await ainterleave({"resume": resume, "load": load}, rounds=5)
    await store.delete(run_id)
    lo, re = statistics.median(t["load"]), statistics.median(t["resume"])
    rep.line(f"{name}: load latest ({size_mb:g} MB, {steps:,} steps), p50", lo * 1e3, "ms")
    rep.line(f"{name}: Runner.resume (+ a status write), p50", re * 1e3, "ms")
    rep.target(f"{name}: resume / load", re / lo, goal=2.0)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="sqlite", help=f"comma-separated, from {', '.join(URLS)}")
    ap.add_argument("--quick", action="store_true", help="one run, 100 steps, a 2 MB resume")
    ap.add_argument("--runs", type=int, default=0, help="repeats (default 3; 1 with --quick)")
    ap.add_argument("--steps", type=int, default=0, help="steps per timed batch (default 300)")
    ap.add_argument("--resume-steps", type=int, default=1000)
    ap.add_argument("--size-mb", type=float, default=0.0, help="resumed state (default 10)")
    args = ap.parse_args()
    steps = args.steps or (100 if args.quick else 300)
    size = args.size_mb or (2.0 if args.quick else 10.0)
    rep = Report("bench_runtime", "the Runner per step against a raw commit; a resume against a load")
    with tempfile.TemporaryDirectory(prefix="tether-runtime-") as tmp:
        for _ in rep.runs(args.runs or (1 if args.quick else 3)):
            for name in args.backends.split(","):
                try:
                    async with open_store(URLS[name].format(tmp=tmp)) as store:
                        await step_cost(rep, name, store, steps, rounds=3)
                        await resume_cost(rep, name, store, args.resume_steps, size)
                except OSError as exc:  # a server that is not running skips its backend
                    rep.line(f"{name}: skipped ({type(exc).__name__}: {exc})", 0)
    return rep.finish()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
