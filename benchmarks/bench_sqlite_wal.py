"""SQLite saves of big states with the WAL checkpointed in the background
(``checkpoint_bytes`` 4 MiB) against SQLite's own automatic checkpoint, which runs inside
the commit that takes the WAL past ~4 MB (``checkpoint_bytes=0``, the default).

One agent per store, each committing a fresh state of SIZE every step with THINK ms of
idle time between steps (a model call takes seconds; the idle time is what a background
checkpoint uses). The two stores are separate files in one directory; they take turns in
blocks of BLOCK steps, so that host noise hits both alike. Printed: save median and p95,
and background / automatic.

    .venv/bin/python benchmarks/bench_sqlite_wal.py [--sizes 1MB,10MB] [--steps N] [--think MS]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tether.state.context import ExecutionContext
from tether.stores.sqlite import SqliteStore

sys.path.insert(0, str(Path(__file__).parent))
from bench_stores import ALL_SIZES, conversation  # the store bench's chat messages

STEPS = {"1KB": 400, "100KB": 200, "1MB": 120, "10MB": 40}
BLOCK = 10


async def measure(size: str, steps: int, think: float, workdir: Path) -> dict[str, list[float]]:
    messages = conversation(random.Random(3), ALL_SIZES[size])
    stores = {
        "background": SqliteStore(workdir / f"bg-{size}.db", checkpoint_bytes=4 * 1024 * 1024),
        "automatic": SqliteStore(workdir / f"auto-{size}.db", checkpoint_bytes=0),
    }
    times: dict[str, list[float]] = {name: [] for name in stores}
    for store in stores.values():
        await store.setup()
    try:
        order = list(stores)
        for block in range(steps // BLOCK):
            for name in order if block % 2 == 0 else order[::-1]:
                store = stores[name]
                for step in range(BLOCK):
                    # a new run a step, as a save of a restored or compacted state writes
                    ctx = ExecutionContext(f"{name}-{block}-{step}", {"messages": messages})
                    gc.collect()
                    t0 = time.perf_counter()
                    await store.commit(ctx)
                    times[name].append((time.perf_counter() - t0) * 1e3)
                    await asyncio.sleep(think / 1e3)
    finally:
        for store in stores.values():
            await store.aclose()
    return times


def p95(xs: list[float]) -> float:
    return sorted(xs)[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1MB,10MB")
    ap.add_argument("--steps", type=int, default=0, help="steps per store (default: by size)")
    ap.add_argument("--think", type=float, default=20.0, help="idle ms between steps")
    args = ap.parse_args()
    print(f"think time {args.think:g} ms; blocks of {BLOCK} steps, alternating")
    print(
        f"{'size':>6} {'steps':>5}  {'bg save':>8} {'p95':>7}  {'auto save':>9} {'p95':>7}  {'bg/auto':>7} {'p95':>6}"
    )
    with tempfile.TemporaryDirectory(prefix="tether-wal-") as tmp:
        for size in (s.strip().upper() for s in args.sizes.split(",")):
            steps = args.steps or STEPS[size]
            t = await measure(size, steps, args.think, Path(tmp))
            bg, auto = t["background"], t["automatic"]
            med_bg, med_auto = statistics.median(bg), statistics.median(auto)
            print(
                f"{size:>6} {len(bg):>5}  {med_bg:8.2f} {p95(bg):7.2f}  {med_auto:9.2f} {p95(auto):7.2f}"
                f"  {med_bg / med_auto:6.2f}x {p95(bg) / p95(auto):5.2f}x"
            )


if __name__ == "__main__":
    asyncio.run(main())
