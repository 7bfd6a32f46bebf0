#!/usr/bin/env python
"""Where a small ``load()`` spends its time, part by part, beside its floor's parts (SQLite).

    .venv/bin/python benchmarks/bench_load_parts.py                 # 1 KB and 100 KB, 3 runs
    .venv/bin/python benchmarks/bench_load_parts.py --kb 1 --quick

A run is grown by commits of corpus messages (prose, tool calls, tool results) until its
state packs to ``--kb`` kilobytes, as a real run grows, so its latest state is a chain of
rows (a full row, segments, the last deltas) and not one full row. Each part below is
timed warm, as a batch of calls, and the parts are interleaved round by round:

- floor: the ``SELECT`` of the state's MessagePack bytes from a one-row table of a database
  opened with the store's settings, their decode, and both (the floor's whole load);
- tether: the chain statement (by rowid once the store has read the chain); the integrity
  check of its rows, as a first read does it (CRC-32) and as a read of rows the store read
  before does it (compared with the bytes it kept, see ``stores/_kept.py``); the decode of
  its rows both ways; the copy of the replay kept with rows read again whole; the rows into
  a ``Checkpoint`` both ways (read again: compared, then the kept replay copied); and
  ``SqliteStore.load`` as a whole (rows read before).

Target: ``SqliteStore.load`` / the floor's whole load <= 1.5x.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import zlib
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import ormsgpack
from harness import Report, corpus, interleave

from tether.state.context import ExecutionContext
from tether.stores._chain import ChainEngine
from tether.stores.registry import open_store


def drive(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (a small SQLite load) without an event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("the load suspended")


def batch(fn: Callable[[], Any], number: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(number):
            fn()

    return run


async def measure(rep: Report, tmp: Path, kb: float, number: int, rounds: int) -> None:
    size = int(kb * 1024)
    path = tmp / f"parts-{size}.db"
    for old in tmp.glob(path.name + "*"):  # a run of its own each time
        old.unlink()
    rng = random.Random(size)
    async with open_store(f"sqlite:///{path}") as store:
        ctx = ExecutionContext("r", {"messages": []})
        packed, i = 0, 0
        while packed < size:
            msg = corpus.message(rng, i)
            ctx.merge({"messages": [msg]})
            await store.commit(ctx, node_id="step")
            packed += len(ormsgpack.packb(msg))
            i += 1
        state = ctx.snapshot()
    raw = ormsgpack.packb(state)
    async with open_store(f"sqlite:///{path}") as store:
        await store.load("r")
        backend: Any = store.backend
        conn = backend._conn  # the store's own connection: the floor's table sits beside its rows
        conn.execute("CREATE TABLE IF NOT EXISTS floor (k TEXT PRIMARY KEY, v BLOB NOT NULL)")
        conn.execute("INSERT OR REPLACE INTO floor VALUES ('k', ?)", (raw,))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        chain = backend.latest_chain_inline("r")
        payloads = [p for _, p in chain if p]  # (a sealed last row holds none)
        # the same bytes in other objects, as a next read returns them: compared byte by byte
        again = [(v, bytes(bytearray(p)) if p else p) for v, p in chain]
        copies = [p for _, p in again if p]
        kept = [True] * len(payloads)
        cold = ChainEngine(store.codec, store.compaction, seals=True, splits_state=False, vouch_bytes=0)
        sql = "SELECT v FROM floor WHERE k = ?"
        for _ in range(2):  # read again whole: the replay is kept
            store.engine.checkpoint_of("r", again)
        rows_kept = store.engine.kept
        start = rows_kept.replayed("r", again, rows_kept.vouched("r", again))
        assert start is not None, "no replay kept"
        replayed = start[0]
        parts: dict[str, Callable[[], Any]] = {
            "floor SELECT": lambda: conn.execute(sql, ("k",)).fetchone(),
            "floor decode": lambda: ormsgpack.unpackb(raw),
            "floor whole load": lambda: ormsgpack.unpackb(conn.execute(sql, ("k",)).fetchone()[0]),
            "chain statement": lambda: backend.latest_chain_inline("r"),
            "check, first read: CRC-32": lambda: [zlib.crc32(p) for p in payloads],
            "check, read again: compare": lambda: [a == b for a, b in zip(payloads, copies, strict=True)],
            "decode of the rows, CRC-32": lambda: store.codec.decode_many(payloads),
            "decode of the rows, compared": lambda: store.codec.decode_many(copies, vouched=kept),
            "copy of the kept replay": replayed.unpack,
            "rows -> Checkpoint, first read": lambda: cold.checkpoint_of("r", again),
            "rows -> Checkpoint, read again": lambda: store.engine.checkpoint_of("r", again),
            "SqliteStore.load": lambda: drive(store.load("r")),
        }
        t = interleave({name: batch(fn, number) for name, fn in parts.items()}, rounds=rounds)
    us = {name: statistics.median(v) / number * 1e6 for name, v in t.items()}
    label = f"{kb:g} KB, {len(chain)} rows:"
    for name, value in us.items():
        rep.line(f"{label} {name}", value, "us")
    rep.target(
        f"{kb:g} KB: SqliteStore.load / floor's whole load",
        us["SqliteStore.load"] / us["floor whole load"],
        goal=1.5,
    )


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kb", default="1,100", help="state sizes in KB, comma-separated")
    ap.add_argument("--quick", action="store_true", help="one run, fewer calls")
    ap.add_argument("--runs", type=int, default=0, help="repeats (default 3; 1 with --quick)")
    args = ap.parse_args()
    rep = Report("bench_load_parts", "a small load, part by part, beside its floor")
    with tempfile.TemporaryDirectory(prefix="tether-parts-") as tmp:
        for _ in rep.runs(args.runs or (1 if args.quick else 3)):
            for kb in (float(x) for x in args.kb.split(",") if x):
                number = max(20, int((200 if args.quick else 1000) / max(1.0, kb / 10)))
                await measure(rep, Path(tmp), kb, number, rounds=3 if args.quick else 7)
    return rep.finish()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
