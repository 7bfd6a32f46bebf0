#!/usr/bin/env python
"""Stored bytes over a run's whole history, against the final state, and what a load of the
final state costs against its floor.

    .venv/bin/python benchmarks/bench_storage.py            # 1,000 and 10,000 commits
    .venv/bin/python benchmarks/bench_storage.py --full     # and 100,000 commits
    .venv/bin/python benchmarks/bench_storage.py --quick    # 1,000 only

An append-only run (each commit appends one chat message from the seeded corpus: prose,
tool calls, tool results of JSON rows, logs and code) is committed N times on a fresh
SQLite file. Every version stays loadable (nothing is pruned). Printed per N:

- stored bytes: the payload bytes of every version in the run's history, over the final
  state's own MessagePack bytes (target <= 2x);
- the SQLite file (database + WAL, after a checkpoint) over the final state (target
  <= 2.5x);
- a load of the final version in a fresh store (no cache), against its floor: the same
  state's MessagePack bytes read from a one-row SQLite table and decoded, interleaved
  (target <= 1.5x).

Byte counts are exact and the same on every machine; only the load times depend on the host.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path

import ormsgpack
from harness import Report, ainterleave, corpus

from tether.state.context import ExecutionContext
from tether.stores.registry import open_store


def file_bytes(path: Path) -> int:
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


async def grow(path: Path, n: int, seed: int) -> tuple[int, int, int, dict[str, object]]:
    """Commit ``n`` appends; (stored bytes, full rows, versions, final state)."""
    rng = random.Random(seed)
    async with open_store(f"sqlite:///{path}") as store:
        ctx = ExecutionContext("grow", {"messages": []})
        for i in range(n):
            ctx.merge({"messages": [corpus.message(rng, i)]})
            ctx.mark_executed("step")
            await store.commit(ctx, node_id="step")
        stored, full, versions = 0, 0, 0
        before = None
        while True:
            page = await store.history("grow", before=before, limit=1000)
            if not page:
                break
            for h in page:
                stored += h.size
                full += h.kind == "full"
                versions += 1
            before = page[-1].version
        return stored, full, versions, ctx.snapshot()


async def measure(rep: Report, workdir: Path, n: int, rounds: int) -> None:
    path = workdir / f"grow-{n}.db"
    stored, full, versions, state = await grow(path, n, seed=n)
    final = len(ormsgpack.packb(state))
    fbytes = file_bytes(path)
    rep.line(f"{n:,} commits: final state", final / 1e6, "MB")
    rep.line(f"{n:,} commits: versions kept / full rows", versions, "", note=f"{full} full rows")
    rep.target(f"{n:,} commits: stored bytes / final state", stored / final, goal=2.0)
    rep.target(f"{n:,} commits: SQLite file / final state", fbytes / final, goal=2.5)

    floor_db = workdir / f"floor-{n}.db"
    con = sqlite3.connect(floor_db)
    con.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v BLOB)")
    con.execute("INSERT INTO t VALUES ('grow', ?)", (ormsgpack.packb(state),))
    con.commit()

    async with open_store(f"sqlite:///{path}") as store:

        async def load() -> None:
            cp = await store.load("grow", version=n)  # by version: no latest-state cache answers
            assert cp is not None and len(cp.state["messages"]) == n

        async def floor() -> None:
            row = con.execute("SELECT v FROM t WHERE k = 'grow'").fetchone()
            assert len(ormsgpack.unpackb(row[0])["messages"]) == n

        t = await ainterleave({"load": load, "floor": floor}, rounds=rounds)
    con.close()
    lo, fl = statistics.median(t["load"]), statistics.median(t["floor"])
    rep.line(f"{n:,} commits: load final, p50", lo * 1e3, "ms")
    rep.line(f"{n:,} commits: floor (one row, decode), p50", fl * 1e3, "ms")
    rep.target(f"{n:,} commits: load final / floor", lo / fl, goal=1.5)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1,000 commits only")
    ap.add_argument("--full", action="store_true", help="also 100,000 commits (several minutes)")
    ap.add_argument("--runs", type=int, default=3, help="repeats of the load timing (byte counts are exact)")
    args = ap.parse_args()
    sizes = [1_000] if args.quick else [1_000, 10_000] + ([100_000] if args.full else [])
    rep = Report("bench_storage", "stored bytes over a whole history, and the load of the final state")
    with tempfile.TemporaryDirectory(prefix="tether-storage-") as tmp:
        for run in rep.runs(1 if args.quick else args.runs):
            for n in sizes:
                workdir = Path(tmp) / f"r{run}"
                workdir.mkdir(exist_ok=True)
                await measure(rep, workdir, n, rounds=5 if args.quick else 11)
    return rep.finish()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
