#!/usr/bin/env python
"""SQLite saves of big states with the WAL checkpointed in the background
(``checkpoint_bytes`` 4 MiB) against SQLite's own automatic checkpoint, which runs inside
the commit that takes the WAL past ~4 MB (``checkpoint_bytes=0``, the default).

    .venv/bin/python benchmarks/bench_sqlite_wal.py                     # 1 MB and 10 MB, 3 runs
    .venv/bin/python benchmarks/bench_sqlite_wal.py --quick             # fewer steps, 1 run
    .venv/bin/python benchmarks/bench_sqlite_wal.py --sizes 100KB,1MB --steps 200 --think 20

One agent per store, each committing a new run holding a corpus chat of SIZE every step, with
THINK ms of idle time between steps (a model call takes seconds; the idle time is what a
background checkpoint uses). Three subjects, separate files in one directory, take turns in
blocks of BLOCK steps (the order turning block by block), so that host noise hits them alike:

- tether, ``checkpoint_bytes`` 4 MiB (background);
- tether, ``checkpoint_bytes`` 0 (automatic: the default, the baseline);
- floor: the state's MessagePack bytes INSERTed as one row into a database opened with the
  store's settings (WAL, ``synchronous=FULL``, ``secure_delete=FAST``), SQLite's automatic
  checkpoint left on.

The option stays off by default (``docs/stores.md`` says why: it made 100 KB saves slower in
a tight loop). What it is for is checked here. Targets, at each size: background /
automatic <= 1.0 for the save's median and for its p95.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import ormsgpack
from harness import Report, corpus, percentile

from tether.state.context import ExecutionContext
from tether.stores.sqlite import SqliteStore

SIZES = {"100KB": 100 << 10, "1MB": 1 << 20, "10MB": 10 << 20}
STEPS = {"100KB": 200, "1MB": 120, "10MB": 40}
QUICK_STEPS = {"100KB": 40, "1MB": 30, "10MB": 20}
BLOCK = 10
GOAL = 1.0


class Floor:
    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute("PRAGMA secure_delete = FAST")
        self.conn.execute("CREATE TABLE floor (k TEXT PRIMARY KEY, v BLOB NOT NULL)")

    def save(self, key: str, state: dict[str, object]) -> None:
        self.conn.execute("INSERT INTO floor VALUES (?, ?)", (key, ormsgpack.packb(state)))


async def measure(size: str, steps: int, think: float, workdir: Path, run: int) -> dict[str, list[float]]:
    messages = corpus.packed_messages(3, SIZES[size])
    tag = f"{size}-{run}"
    stores = {
        "background": SqliteStore(workdir / f"bg-{tag}.db", checkpoint_bytes=4 * 1024 * 1024),
        "automatic": SqliteStore(workdir / f"auto-{tag}.db", checkpoint_bytes=0),
    }
    floor = Floor(workdir / f"floor-{tag}.db")
    for store in stores.values():
        await store.setup()

    def tether_save(store: SqliteStore) -> Callable[[str], Awaitable[object]]:
        # a new run a step, as a save of a restored or compacted state writes
        return lambda key: store.commit(ExecutionContext(key, {"messages": messages}))

    async def floor_save(key: str) -> None:
        floor.save(key, {"messages": messages})

    saves: dict[str, Callable[[str], Awaitable[object]]] = {
        "background": tether_save(stores["background"]),
        "automatic": tether_save(stores["automatic"]),
        "floor": floor_save,
    }
    times: dict[str, list[float]] = {name: [] for name in saves}
    order = list(saves)
    try:
        for block in range(max(1, steps // BLOCK)):
            k = block % len(order)
            for name in order[k:] + order[:k]:
                for step in range(BLOCK):
                    gc.collect()
                    t0 = time.perf_counter()
                    await saves[name](f"{name}-{block}-{step}")
                    times[name].append((time.perf_counter() - t0) * 1e3)
                    await asyncio.sleep(think / 1e3)
    finally:
        for store in stores.values():
            await store.aclose()
        floor.conn.close()
    return times


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1MB,10MB", help="from " + ",".join(SIZES))
    ap.add_argument("--steps", type=int, default=0, help="steps per subject (default: by size)")
    ap.add_argument("--think", type=float, default=20.0, help="idle ms between steps")
    ap.add_argument("--runs", type=int, default=0, help="repeats (default 3; 1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="one short run: checks the script works")
    args = ap.parse_args()
    names = [s.strip().upper() for s in args.sizes.split(",") if s.strip()]
    if unknown := [n for n in names if n not in SIZES]:
        ap.error(f"unknown size {unknown[0]}; known: {', '.join(SIZES)}")
    rep = Report(
        "bench_sqlite_wal",
        f"SQLite saves, WAL checkpointed in the background against SQLite's own ({args.think:g} ms idle "
        f"between steps, blocks of {BLOCK})",
    )
    with tempfile.TemporaryDirectory(prefix="tether-wal-") as tmp:
        for run in rep.runs(args.runs or (1 if args.quick else 3)):
            for size in names:
                steps = args.steps or (QUICK_STEPS if args.quick else STEPS)[size]
                t = await measure(size, steps, args.think, Path(tmp), run)
                med = {k: statistics.median(v) for k, v in t.items()}
                p95 = {k: percentile(v, 95) for k, v in t.items()}
                for name in t:
                    rep.line(f"{size}: save, {name}, median", med[name], "ms", note=f"{len(t[name])} steps")
                    rep.line(f"{size}: save, {name}, p95", p95[name], "ms")
                rep.line(f"{size}: automatic / floor, median", med["automatic"] / med["floor"], "x")
                rep.target(
                    f"{size}: save median, background / automatic",
                    med["background"] / med["automatic"],
                    goal=GOAL,
                )
                rep.target(
                    f"{size}: save p95, background / automatic",
                    p95["background"] / p95["automatic"],
                    goal=GOAL,
                )
    return rep.finish()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
