#!/usr/bin/env python
"""The fencing check's cost per commit, on every backend.

A lease holder's commit carries its token (``commit(fence=...)``): the store checks it
against the run's current token and stores the lease deadline inside the same atomic write.
This measures that write against the same commit without a token, interleaved commit by
commit in one run, on runs of realistic chat messages (``corpus``) that each step grows by
one ~1 KB message, as an agent's run does. A third line, a second run committed without a
token, shows how far two identical lines drift apart on this host (the noise floor).

Run from the repository root::

    .venv/bin/python benchmarks/bench_fencing.py                 # every backend, 3 runs
    .venv/bin/python benchmarks/bench_fencing.py --quick         # smoke run, one short run
    .venv/bin/python benchmarks/bench_fencing.py --backends sqlite,postgresql

Target: fenced commit / plain commit <= 1.05 (the check costs at most 5% of a commit).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

from harness import Report, ainterleave, corpus

from tether.state.context import ExecutionContext
from tether.state.reducers import default_registry
from tether.stores.base import CheckpointStore
from tether.stores.fencing import Fence
from tether.stores.registry import create_store

URLS: dict[str, str] = {
    "memory": "memory://",
    "sqlite": "",  # a fresh file in a temporary directory
    "redis": "redis://127.0.0.1:6379/0?prefix=bench-fencing:",
    "postgresql": "postgresql://127.0.0.1:5432/test",
    "mysql": "mysql://root@127.0.0.1:3306/test",
    "tiered": "tiered+redis://127.0.0.1:6379/2?prefix=bench-fencing:&sql="
    + quote("mysql://root@127.0.0.1:3306/test", safe=""),
}
GOAL = 1.05
LEASE_TTL = 30.0


class Subject:
    """One run committed step after step, with or without a lease token."""

    def __init__(
        self, store: CheckpointStore, name: str, state_bytes: int, seed: int, *, fenced: bool
    ) -> None:
        self.store = store
        self.rng = random.Random(seed)
        self.ctx = ExecutionContext(
            f"bench-fencing-{name}-{uuid.uuid4().hex[:8]}",
            {"messages": corpus.messages(seed, state_bytes)},
            reducers=default_registry(),
        )
        self.fence = Fence() if fenced else None
        self.step = 0

    async def begin(self) -> None:
        if self.fence is not None:
            self.fence.until = time.time() + LEASE_TTL
        await self.store.commit(self.ctx, fence=self.fence)  # (a fenced first commit takes the lease)

    async def commit(self) -> None:
        """One step: a ~1 KB message appended and committed (the lease deadline rides along,
        as a runner's does)."""
        self.step += 1
        self.ctx.merge({"messages": [corpus.message(self.rng, 10_000 + self.step)]})
        if self.fence is not None:
            self.fence.until = time.time() + LEASE_TTL
        await self.store.commit(self.ctx, node_id=f"step-{self.step}", fence=self.fence)

    async def drop(self) -> None:
        await self.store.delete(self.ctx.run_id)


async def bench_backend(rep: Report, backend: str, url: str, *, rounds: int, state_bytes: int) -> None:
    store = create_store(url)
    try:
        await store.setup()
    except Exception as exc:
        rep.line(f"{backend}: skipped ({type(exc).__name__})", 0)
        await store.aclose()
        return
    subjects = {
        # one seed: the three runs hold and grow by the same messages, byte for byte
        "plain": Subject(store, "plain", state_bytes, 1, fenced=False),
        "fenced": Subject(store, "fenced", state_bytes, 1, fenced=True),
        "plain again": Subject(store, "again", state_bytes, 1, fenced=False),
    }
    try:
        for s in subjects.values():
            await s.begin()
        calls = [(name, s.commit) for name, s in subjects.items()]
        await ainterleave(dict(calls), rounds=0, warmup=5)
        t: dict[str, list[float]] = {name: [] for name, _ in calls}
        for r in range(rounds):  # the order turns each round: no line always goes first
            turn = calls[r % len(calls) :] + calls[: r % len(calls)]
            for name, xs in (await ainterleave(dict(turn), rounds=1, warmup=0)).items():
                t[name] += xs
        med = {name: statistics.median(xs) for name, xs in t.items()}
        for name, value in med.items():
            rep.line(f"{backend}: commit p50, {name}", value * 1e3, "ms")
        rep.line(f"{backend}: noise floor (plain again / plain)", med["plain again"] / med["plain"], "x")
        rep.target(f"{backend}: fenced / plain commit", med["fenced"] / med["plain"], goal=GOAL)
    finally:
        for s in subjects.values():
            await s.drop()
        await store.aclose()


async def main(args: argparse.Namespace) -> int:
    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    rep = Report("bench_fencing", "a lease holder's fenced commit against the same commit without a token")
    runs, rounds = (1, 40) if args.quick else (3, 200)
    with tempfile.TemporaryDirectory() as tmp:
        for _ in rep.runs(runs):
            for backend in names:
                url = URLS[backend] or f"sqlite:///{Path(tmp) / f'fencing-{uuid.uuid4().hex[:6]}.db'}"
                await bench_backend(rep, backend, url, rounds=rounds, state_bytes=args.state_kb * 1024)
    return rep.finish()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", default=",".join(URLS), help="comma-separated: " + ", ".join(URLS))
    parser.add_argument("--quick", action="store_true", help="one short run: checks the script works")
    parser.add_argument("--state-kb", type=int, default=100, help="each run's state to start with (KB)")
    raise SystemExit(asyncio.run(main(parser.parse_args())))
