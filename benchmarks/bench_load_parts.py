"""Where a 1 KB ``load()`` spends its time, beside the raw floor's parts (SQLite and memory).

At 1 KB a load is fixed costs: the statement, the decode of the payload head, building the
``Checkpoint`` (with its tz-aware ``datetime``). This prints each part's warm cost (best of
5 x N calls, no collection between calls), so the gap to the floor can be read part by part
and the least any load returning a ``Checkpoint`` could cost compared with the floor.

    .venv/bin/python benchmarks/bench_load_parts.py [--kb 1] [--number 20000]
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
import timeit
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import ormsgpack

from tether.state import ExecutionContext
from tether.state.model import Checkpoint, RunStatus, make_checkpoint
from tether.stores import create_store
from tether.stores._sql_chain import CHAIN_SQL, chain_of
from tether.stores.backend import utc as _utc

sys.path.insert(0, str(Path(__file__).parent))
from bench_stores import conversation  # the store bench's chat messages


def drive(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (every 1 KB load here) without an event loop's cost."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("the load suspended")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kb", type=float, default=1.0)
    ap.add_argument("--number", type=int, default=20000)
    ap.add_argument(
        "--cold",
        action="store_true",
        help="as bench_stores.py times: a collection before each call, beside ~30 MB of live state, "
        "the parts interleaved (median of up to 2,000 rounds)",
    )
    args = ap.parse_args()
    heap = [conversation(random.Random(2), 10 << 20) for _ in range(3)] if args.cold else []

    def warm(fn: Callable[[], Any]) -> float:
        return min(timeit.repeat(fn, number=args.number, repeat=5)) / args.number * 1e6

    def cold(fns: list[Callable[[], Any]]) -> list[float]:
        """Each call after a collection, the parts interleaved in a new order every round
        (timed one part after another, the cache each one meets would differ by part)."""
        times: list[list[float]] = [[] for _ in fns]
        order = list(range(len(fns)))
        for _ in range(min(args.number, 2000)):
            random.shuffle(order)
            for i in order:
                gc.collect()
                t0 = time.perf_counter()
                fns[i]()
                times[i].append(time.perf_counter() - t0)
        return [statistics.median(t) * 1e6 for t in times]

    msgs = conversation(random.Random(1), int(args.kb * 1024))
    raw = ormsgpack.packb({"messages": msgs})
    ts = time.time()
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = create_store(f"sqlite:///{tmp}/t.db")
        memory = create_store("memory://")
        for store in (sqlite, memory):
            await store.setup()
            await store.commit(ExecutionContext("r", {"messages": msgs}))
        conn = sqlite.backend._conn  # type: ignore[attr-defined]
        conn.execute("CREATE TABLE floor (k TEXT PRIMARY KEY, v BLOB NOT NULL)")
        conn.execute("INSERT INTO floor VALUES ('k', ?)", (raw,))
        payload = conn.execute(CHAIN_SQL, ("r", ts)).fetchall()[0][1]
        floor_sql = "SELECT v FROM floor WHERE k = ?"

        async def floor_load() -> int:
            return len(ormsgpack.unpackb(conn.execute(floor_sql, ("k",)).fetchone()[0])["messages"])

        parts: list[tuple[str, Callable[[], Any]]] = [
            ("floor: SELECT of the bytes", lambda: conn.execute(floor_sql, ("k",)).fetchone()),
            ("floor: unpackb of the state", lambda: ormsgpack.unpackb(raw)),
            ("floor: whole load (SELECT + unpackb, awaited)", lambda: drive(floor_load())),
            (
                "tether: chain statement (runs JOIN checkpoints)",
                lambda: conn.execute(CHAIN_SQL, ("r", ts)).fetchall(),
            ),
            ("tether: Codec.decode of the payload (head + state)", lambda: sqlite.codec.decode(payload)),
            ("tether: a datetime (UTC; made only if .timestamp is read)", lambda: _utc(ts)),
            (
                "tether: Checkpoint(...) alone",
                lambda: Checkpoint(
                    run_id="r",
                    node_id=None,
                    state={},
                    executed_node_ids=[],
                    timestamp=None,  # type: ignore[arg-type]
                    version=1,
                    status=RunStatus.RUNNING,
                    metadata={},
                ),
            ),
            (
                "tether: the stores' constructor (state.model.make_checkpoint)",
                lambda: make_checkpoint("r", None, {}, [], None, 1, RunStatus.RUNNING, {}),  # type: ignore[arg-type]
            ),
            (
                "tether: payload -> Checkpoint (decode, checks, object)",
                lambda: sqlite.engine.checkpoint_of("r", [(1, payload)]),
            ),
            (
                "tether: chain statement + rows -> chain",
                lambda: chain_of(conn.execute(CHAIN_SQL, ("r", ts)).fetchall()),
            ),
            ("tether: SqliteStore.load (awaited)", lambda: drive(sqlite.load("r"))),
            ("tether: InMemoryStore.load (awaited)", lambda: drive(memory.load("r"))),
        ]
        if args.cold:
            rows = list(zip([n for n, _ in parts], cold([fn for _, fn in parts]), strict=True))
        else:
            rows = [(name, warm(fn)) for name, fn in parts]
        await sqlite.aclose()
        await memory.aclose()
    width = max(len(n) for n, _ in rows)
    floor = dict(rows)["floor: whole load (SELECT + unpackb, awaited)"]
    unpack = dict(rows)["floor: unpackb of the state"]
    regime = f"cold (collection before each call, {len(heap)} x 10 MB live)" if args.cold else "warm"
    print(f"{args.kb:g} KB state ({len(raw)} B packed), {regime}, microseconds per call:")
    for name, value in rows:
        print(f"  {name:<{width}}  {value:7.2f}")
    need = (
        dict(rows)["tether: chain statement (runs JOIN checkpoints)"]
        + dict(rows)["tether: payload -> Checkpoint (decode, checks, object)"]
    )
    print(f"SQLite: load / floor = {dict(rows)['tether: SqliteStore.load (awaited)'] / floor:.2f}x;")
    print(f"  statement + payload -> Checkpoint alone = {need / floor:.2f}x the floor's whole load")
    print(f"memory: load / unpackb = {dict(rows)['tether: InMemoryStore.load (awaited)'] / unpack:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
