#!/usr/bin/env python
"""A LangGraph graph on TetherSaver beside LangGraph's own savers.

Run from the repository root::

    .venv/bin/python benchmarks/bench_langgraph.py                 # 1 MB and 10 MB, every saver
    .venv/bin/python benchmarks/bench_langgraph.py --sizes 1MB --steps 50
    .venv/bin/python benchmarks/bench_langgraph.py --quick         # 1 MB: a minute or two

Each saver runs the graph ``--runs`` times (3), interleaved with the others; the last
lines print each target for each TetherSaver backend with PASS or FAIL.

The graph: one node that appends a ~1 KB AIMessage (``add_messages``) and loops
``--steps`` times, on a thread whose state already holds 1 MB or 10 MB of such
messages (written once, untimed, by ``update_state``; ``--seed input`` passes it as graph
input instead, which every saver then also stores as the input channel). For each saver:

- step: wall time of the 100-step ``invoke`` / steps (every checkpoint and pending write
  included, LangGraph's default durability);
- get_state: ``graph.get_state`` at the end, with the saver that ran the graph (warm) and
  with a freshly opened one (cold: what a new process pays); old: ``get_state`` of the
  checkpoint before the steps (time travel), warm;
- stored: payload bytes the thread holds in the database at the end / the final state's
  size (its messages serialised once by LangGraph's serializer).

Baseline, measured in the same run: the same graph with no checkpointer, plus one raw
1 KB durable write on the saver's backend (SQLite: an INSERT and COMMIT in WAL mode with
synchronous=FULL, as tether's SQLite store runs; PostgreSQL and MariaDB: an autocommitted
INSERT; Redis: an RPUSH). The targets: step <= 1.5x the baseline, cold get_state <=
SqliteSaver's, stored <= 2x the final state.

Floors, beside them: "LangGraph alone" is a saver that keeps every checkpoint by
reference in memory and stores nothing (what LangGraph itself adds to a step once a
checkpointer is set); "floor <backend>" also serialises what a delta saver must store
each step (the items a list channel gained, the other changed channels, the checkpoint
record, the metadata, the task's writes) and makes one raw durable write of those bytes
on the backend. No saver that stores a step durably can be faster than its floor.
"""

from __future__ import annotations

import argparse
import functools
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

KB, MB = 1024, 1024 * 1024
PG = os.environ.get("TETHER_TEST_POSTGRESQL_URL", "postgresql://127.0.0.1:5432/test")
REDIS = os.environ.get("TETHER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
MYSQL = os.environ.get("TETHER_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
STEP_TARGET, STORED_TARGET = 1.5, 2.0


def message(i: int) -> AIMessage:
    return AIMessage(content=f"{i:08d} " + "m" * (KB - 80), id=f"m-{i}")


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    left: int


def _add_batch(state: list[Any], writes: Sequence[Any]) -> list[Any]:
    return functools.reduce(add_messages, writes, state)  # type: ignore[arg-type]


class DeltaState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], DeltaChannel(_add_batch)]
    left: int


def build(delta: bool = False) -> Any:
    """``delta``: the messages channel is LangGraph's own DeltaChannel (beta)."""
    schema: Any = DeltaState if delta else State

    def agent(state: Any) -> dict[str, Any]:
        left = state.get("left", 0)
        return {"messages": [message(10_000_000 + left)], "left": left - 1}

    g = StateGraph(schema)
    g.add_node("agent", agent)
    g.add_conditional_edges(START, lambda s: "agent" if s.get("left", 0) > 0 else END, ["agent", END])
    g.add_conditional_edges("agent", lambda s: "agent" if s["left"] > 0 else END, ["agent", END])
    return g


# == savers ===========================================================================
@contextmanager
def tether_saver(url: str) -> Iterator[Any]:
    from tether.integrations.langgraph import TetherSaver

    with TetherSaver.from_url(url) as saver:
        yield saver


def tether_bytes(url: str, thread: str) -> int:
    from tether.integrations.langgraph._layout import ns_key
    from tether.sync import open_store_sync

    with open_store_sync(url) as store:
        return sum(h.size for h in store.history(ns_key(thread, "")))


@contextmanager
def sqlite_saver(path: str) -> Iterator[Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(path) as saver:
        saver.conn.execute("PRAGMA secure_delete = FAST")  # what tether's SQLite store sets
        yield saver


def sqlite_bytes(path: str, thread: str) -> int:
    c = sqlite3.connect(path)
    q = (
        "SELECT (SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints WHERE thread_id = ?)"
        " + (SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes WHERE thread_id = ?)"
    )
    (n,) = c.execute(q, (thread, thread)).fetchone()
    c.close()
    return int(n)


@contextmanager
def postgres_saver(url: str) -> Iterator[Any]:
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        yield saver


def postgres_bytes(url: str, thread: str) -> int:
    import psycopg

    with psycopg.connect(url) as c:
        row = c.execute(
            "SELECT (SELECT COALESCE(SUM(pg_column_size(checkpoint) + pg_column_size(metadata)), 0)"
            " FROM checkpoints WHERE thread_id = %s)"
            " + (SELECT COALESCE(SUM(octet_length(blob)), 0) FROM checkpoint_blobs WHERE thread_id = %s)"
            " + (SELECT COALESCE(SUM(octet_length(blob)), 0) FROM checkpoint_writes WHERE thread_id = %s)",
            (thread, thread, thread),
        ).fetchone()
    return int(row[0]) if row else 0


class FloorSaver(BaseCheckpointSaver[str]):
    """Keeps checkpoints by reference in memory; with ``write``, also serialises what a
    delta saver must store each step and hands those bytes to one durable write."""

    def __init__(self, write: Callable[[bytes], None] | None = None) -> None:
        super().__init__()
        self.write = write
        self.cps: dict[str, list[tuple[str, Any, Any, str | None]]] = {}
        self.writes: dict[tuple[str, str], list[tuple[str, str, Any]]] = {}
        self.lengths: dict[tuple[str, str], int] = {}
        self.bytes: dict[str, int] = {}

    def _conf(self, thread: str, cid: str | None) -> Any:
        return {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": cid}}

    def get_tuple(self, config: Any) -> CheckpointTuple | None:
        conf = config["configurable"]
        thread, cid = conf["thread_id"], conf.get("checkpoint_id")
        for key, cp, md, parent in reversed(self.cps.get(thread, [])):
            if cid is None or key == cid:
                return CheckpointTuple(
                    self._conf(thread, key),
                    cp,
                    md,
                    self._conf(thread, parent) if parent else None,
                    list(self.writes.get((thread, key), [])),
                )
        return None

    def list(self, config: Any, **kwargs: Any) -> Iterator[CheckpointTuple]:
        return iter(())

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        conf = config["configurable"]
        thread = conf["thread_id"]
        if self.write is not None:
            values, parts = checkpoint["channel_values"], []
            for ch in new_versions:
                value = values.get(ch)
                if type(value) is list:  # only what the list gained
                    seen = self.lengths.get((thread, ch), 0)
                    parts.append(self.serde.dumps_typed(value[seen:])[1])
                    self.lengths[thread, ch] = len(value)
                elif value is not None:
                    parts.append(self.serde.dumps_typed(value)[1])
            record = {k: v for k, v in checkpoint.items() if k != "channel_values"}
            parts.append(self.serde.dumps_typed(record)[1])
            parts.append(self.serde.dumps_typed(dict(metadata))[1])
            data = b"".join(parts)
            self.write(data)
            self.bytes[thread] = self.bytes.get(thread, 0) + len(data)
        self.cps.setdefault(thread, []).append(
            (checkpoint["id"], checkpoint, metadata, conf.get("checkpoint_id"))
        )
        return self._conf(thread, checkpoint["id"])

    def put_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        conf = config["configurable"]
        if self.write is not None:  # stored with the next put's write, as TetherSaver does
            for _ch, value in writes:
                self.serde.dumps_typed(value)
        kept = self.writes.setdefault((conf["thread_id"], conf["checkpoint_id"]), [])
        kept.extend((task_id, ch, value) for ch, value in writes)

    def delete_thread(self, thread_id: str) -> None:
        self.cps.pop(thread_id, None)


class Subject:
    def __init__(
        self,
        name: str,
        open_: Callable[[], AbstractContextManager[Any]],
        stored: Callable[[str], int],
        delta: bool = False,
        floor: bool = False,
    ) -> None:
        self.name, self.open, self.stored, self.delta, self.floor = name, open_, stored, delta, floor
        low = name.lower()
        self.backend = next((b for b in ("postgres", "redis", "mysql") if b in low), "sqlite")


def floors(raw: RawWrites) -> list[Subject]:
    """LangGraph alone, and one floor per backend (see the module's docstring)."""

    def floor_of(backend: str | None) -> Subject:
        saver = FloorSaver(None if backend is None else functools.partial(raw.write, backend))

        @contextmanager
        def opened() -> Iterator[Any]:
            yield saver

        name = "LangGraph alone" if backend is None else f"floor {backend}"
        return Subject(name, opened, lambda thread: saver.bytes.get(thread, 0), floor=True)

    return [floor_of(None), *(floor_of(b) for b in ("sqlite", "postgres", "redis", "mysql"))]


def subjects(tmp: Path, only: set[str] | None, raw: RawWrites) -> list[Subject]:
    t_sqlite = f"sqlite:///{tmp}/tether.db"
    lg_sqlite = str(tmp / "langgraph.db")
    out = [
        Subject(
            "TetherSaver sqlite", lambda: tether_saver(t_sqlite), functools.partial(tether_bytes, t_sqlite)
        ),
        Subject("TetherSaver postgresql", lambda: tether_saver(PG), functools.partial(tether_bytes, PG)),
        Subject("TetherSaver redis", lambda: tether_saver(REDIS), functools.partial(tether_bytes, REDIS)),
        Subject("TetherSaver mysql", lambda: tether_saver(MYSQL), functools.partial(tether_bytes, MYSQL)),
        Subject("SqliteSaver", lambda: sqlite_saver(lg_sqlite), functools.partial(sqlite_bytes, lg_sqlite)),
        Subject("PostgresSaver", lambda: postgres_saver(PG), functools.partial(postgres_bytes, PG)),
        Subject(
            "SqliteSaver + DeltaChannel",
            lambda: sqlite_saver(lg_sqlite),
            functools.partial(sqlite_bytes, lg_sqlite),
            delta=True,
        ),
    ]
    out += floors(raw)
    return [s for s in out if only is None or any(o in s.name.lower() for o in only)]


# == measuring ========================================================================
def _median_time(write: Callable[[], None], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        write()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


class RawWrites:
    """One raw durable 1 KB write per backend: the floor a checkpoint per step sits on.

    Measured right before and right after each saver's steps (the median of each, averaged),
    since the disks of a shared machine are fast one minute and slow the next."""

    def __init__(self, tmp: Path) -> None:
        self.blob = os.urandom(KB)
        # a floor saver writes from LangGraph's background thread
        self.sqlite = sqlite3.connect(tmp / "raw.db", isolation_level=None, check_same_thread=False)
        self.sqlite.execute("PRAGMA journal_mode = WAL")
        self.sqlite.execute("PRAGMA synchronous = FULL")
        self.sqlite.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, b BLOB)")
        self.pg: Any = None
        self.table = f"bench_raw_{uuid.uuid4().hex[:8]}"  # this run's own, WAL-logged as real ones
        self.redis: Any = None
        self.key = f"bench-raw-{uuid.uuid4().hex}"
        self.my: Any = None
        self.my_loop: Any = None

    def _sqlite(self) -> None:
        self.sqlite.execute("BEGIN IMMEDIATE")
        self.sqlite.execute("INSERT INTO t (b) VALUES (?)", (self.blob,))
        self.sqlite.execute("COMMIT")

    def _mysql(self) -> None:
        if self.my is None:
            import asyncio
            from urllib.parse import urlsplit

            import asyncmy

            u = urlsplit(MYSQL)
            self.my_loop = asyncio.new_event_loop()
            self.my = self.my_loop.run_until_complete(
                asyncmy.connect(
                    host=u.hostname,
                    port=u.port or 3306,
                    user=u.username or "root",
                    password=u.password or "",
                    db=u.path.lstrip("/") or "test",
                    autocommit=True,
                )
            )
            self._my_sql(f"CREATE TABLE {self.table} (id INT AUTO_INCREMENT PRIMARY KEY, b LONGBLOB)")
        self._my_sql(f"INSERT INTO {self.table} (b) VALUES (%s)", self.blob)

    def _my_sql(self, sql: str, *args: Any) -> None:
        async def run() -> None:
            async with self.my.cursor() as cur:
                await cur.execute(sql, args or None)

        self.my_loop.run_until_complete(run())

    def _postgres(self) -> None:
        if self.pg is None:
            import psycopg

            self.pg = psycopg.connect(PG, autocommit=True)
            self.pg.execute(f"CREATE TABLE {self.table} (id SERIAL PRIMARY KEY, b BYTEA)")
        self.pg.execute(f"INSERT INTO {self.table} (b) VALUES (%s)", (self.blob,))

    def _redis(self) -> None:
        if self.redis is None:
            import redis

            self.redis = redis.Redis.from_url(REDIS)
        self.redis.rpush(self.key, self.blob)

    def write(self, backend: str, data: bytes) -> None:
        """One raw durable write of ``data`` (a floor saver's step)."""
        self.blob, kept = data, self.blob
        try:
            getattr(self, "_" + backend)()
        finally:
            self.blob = kept

    def median(self, backend: str, n: int = 40) -> float:
        return _median_time(getattr(self, "_" + backend), n)

    def close(self) -> None:
        self.sqlite.close()
        if self.pg is not None:
            self.pg.execute(f"DROP TABLE {self.table}")
            self.pg.close()
        if self.redis is not None:
            self.redis.delete(self.key)
            self.redis.close()
        if self.my is not None:
            self._my_sql(f"DROP TABLE {self.table}")
            self.my.close()
            self.my_loop.close()


def no_checkpointer_step(initial: list[AIMessage], steps: int) -> float:
    graph = build().compile()
    t0 = time.perf_counter()
    graph.invoke({"messages": initial, "left": steps}, {"recursion_limit": steps + 10})
    return (time.perf_counter() - t0) / steps


def run_subject(
    s: Subject, initial: list[AIMessage], steps: int, reads: int, seed: str, raw: RawWrites
) -> dict[str, Any]:
    thread = f"bench-{uuid.uuid4().hex[:10]}"
    cfg: dict[str, Any] = {"configurable": {"thread_id": thread}, "recursion_limit": steps + 10}
    with s.open() as saver:
        graph = build(s.delta).compile(checkpointer=saver)
        if seed == "input":  # LangGraph then also stores the input channel: one more copy
            graph.invoke({"messages": initial, "left": 0}, cfg)
        else:
            graph.update_state(cfg, {"messages": initial, "left": 0}, as_node="agent")
        if hasattr(saver, "flush"):
            saver.flush()
        setup = s.stored(thread)
        old_cfg = graph.get_state(cfg).config  # the checkpoint before the steps: time travel
        floor = raw.median(s.backend)
        t0 = time.perf_counter()
        graph.invoke({"left": steps}, cfg)
        step = (time.perf_counter() - t0) / steps
        floor = (floor + raw.median(s.backend)) / 2
        final = graph.get_state(cfg).values["messages"]
        warm = _median_time(lambda: graph.get_state(cfg), reads)
        old = _median_time(lambda: graph.get_state(old_cfg), reads)
    assert len(final) == len(initial) + steps, (s.name, len(final))
    serde = JsonPlusSerializer()
    size = len(serde.dumps_typed(final)[1])
    added = len(serde.dumps_typed(final[len(initial) :])[1])
    total = s.stored(thread)
    return {
        "raw": floor,
        "step": step,
        "warm": warm,
        "old": old,
        "thread": thread,
        "final": len(final),
        "stored": total / size,
        "setup": setup / size,
        "steps_bytes": (total - setup) / added,
    }


def cold_reads(subjects: list[Subject], rows: dict[str, dict[str, Any]], reads: int) -> None:
    """``get_state`` through a freshly opened saver, subjects interleaved rep by rep so that
    the noise of a shared machine hits them alike; the median goes to ``rows[...]["cold"]``."""
    times: dict[str, list[float]] = {s.name: [] for s in subjects if s.name in rows}
    for _ in range(reads):
        for s in subjects:
            if s.name not in rows or s.floor:  # a floor keeps its checkpoints in memory only
                continue
            cfg = {"configurable": {"thread_id": rows[s.name]["thread"]}}
            with s.open() as saver:
                graph = build(s.delta).compile(checkpointer=saver)
                t0 = time.perf_counter()
                again = graph.get_state(cfg).values["messages"]
                times[s.name].append(time.perf_counter() - t0)
            assert len(again) == rows[s.name]["final"]
    for name, ts in times.items():
        if ts:
            rows[name]["cold"] = statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 MB only, 3 reads: a minute or two")
    ap.add_argument("--sizes", default=None, help="default 1MB,10MB (1MB with --quick)")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument(
        "--runs", type=int, default=3, help="graph runs per saver (a target counts when met in most)"
    )
    ap.add_argument("--only", default="", help="comma-separated saver name parts (e.g. tether,sqlitesaver)")
    ap.add_argument(
        "--reads", type=int, default=None, help="get_state repetitions (median); 5, 3 with --quick"
    )
    ap.add_argument(
        "--seed",
        choices=["update", "input"],
        default="update",
        help="how the big state enters the thread: update_state (one copy) or graph input",
    )
    args = ap.parse_args()
    args.sizes = args.sizes or ("1MB" if args.quick else "1MB,10MB")
    args.reads = args.reads or (3 if args.quick else 5)
    only = {o.strip().lower() for o in args.only.split(",") if o.strip()} or None
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        raw = RawWrites(tmp)
        try:
            verdicts = [
                line for size in args.sizes.split(",") for line in run_size(args, size, tmp, raw, only)
            ]
        finally:
            raw.close()
    print("\nTargets (TetherSaver; per step: met in most runs):")
    for line in verdicts:
        print(line)


def run_size(
    args: argparse.Namespace, size: str, tmp: Path, raw: RawWrites, only: set[str] | None
) -> list[str]:
    mb = int(size.upper().removesuffix("MB"))
    initial = [message(i) for i in range(mb * MB // KB)]
    chosen = subjects(tmp, only, raw)
    runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in chosen}
    bares: list[float] = []
    for _ in range(args.runs):  # subjects interleaved run by run, each beside its own baseline
        bare = no_checkpointer_step(initial, args.steps)
        bares.append(bare)
        for s in chosen:
            if runs[s.name] is None:
                continue
            try:
                r = run_subject(s, initial, args.steps, args.reads, args.seed, raw)
            except Exception as exc:  # a server not running: say so, go on
                print(f"{s.name:28} failed: {type(exc).__name__}: {str(exc)[:120]}")
                runs[s.name] = None  # type: ignore[assignment]
                continue
            r["x"] = r["step"] / (bare + r["raw"])
            runs[s.name].append(r)
    rows: dict[str, dict[str, Any]] = {}
    for name, rs in runs.items():
        if rs:
            row = dict(rs[-1])
            for k in ("raw", "step", "warm", "old", "x"):
                row[k] = statistics.median(r[k] for r in rs)
            row["xs"] = [r["x"] for r in rs]
            rows[name] = row
    cold_reads(chosen, rows, args.reads)
    for s in chosen:  # the servers are shared: leave no threads behind
        if runs[s.name]:
            with s.open() as saver:
                for r in runs[s.name]:
                    saver.delete_thread(r["thread"])
    print(
        f"\n{size}: {len(initial)} messages, {args.steps} steps, {args.runs} runs (medians); no checkpointer "
        f"{statistics.median(bares) * 1e3:.2f} ms/step; x base = step / (no checkpointer + one raw write "
        "on the saver's backend)"
    )
    print(
        f"{'saver':28} {'raw ms':>7} {'step ms':>8} {'x base':>7} {'runs':>16} {'warm ms':>8} {'cold ms':>8} "
        f"{'old ms':>7} {'stored/state':>13} {'setup/state':>12} {'steps/appended':>15}"
    )
    for s in chosen:
        if s.name not in rows:
            continue
        r = rows[s.name]
        xs = "/".join(f"{x:.2f}" for x in r["xs"])
        cold = f"{r['cold'] * 1e3:8.2f}" if "cold" in r else f"{'-':>8}"
        print(
            f"{s.name:28} {r['raw'] * 1e3:7.2f} {r['step'] * 1e3:8.2f} {r['x']:7.2f} {xs:>16} "
            f"{r['warm'] * 1e3:8.2f} {cold} {r['old'] * 1e3:7.2f} {r['stored']:13.2f} "
            f"{r['setup']:12.2f} {r['steps_bytes']:15.2f}"
        )
    return verdicts(size, rows)


def verdicts(size: str, rows: dict[str, dict[str, Any]]) -> list[str]:
    """One line per target and TetherSaver backend, ending in PASS or FAIL."""
    out = []
    ref = rows.get("SqliteSaver")
    for name, r in rows.items():
        if not name.startswith("TetherSaver"):
            continue
        met = sum(x <= STEP_TARGET for x in r["xs"])
        ok = met * 2 > len(r["xs"])
        backend = name.split()[-1].replace("postgresql", "postgres")
        floor = rows.get(f"floor {backend}")
        beside = f"; its floor {floor['x']:.2f}x" if floor else ""
        out.append(
            f"  {size} {name}: step {r['x']:.2f}x base (runs {'/'.join(f'{x:.2f}' for x in r['xs'])}; "
            f"met {met} of {len(r['xs'])}{beside}), target <= {STEP_TARGET}x: {'PASS' if ok else 'FAIL'}"
        )
        if ref is not None:
            ratio = r["cold"] / ref["cold"]
            out.append(
                f"  {size} {name}: cold get_state {r['cold'] * 1e3:.1f} ms = {ratio:.2f}x SqliteSaver's, "
                f"target <= 1x: {'PASS' if ratio <= 1 else 'FAIL'}"
            )
        out.append(
            f"  {size} {name}: stored {r['stored']:.2f}x the final state, target <= {STORED_TARGET}x: "
            f"{'PASS' if r['stored'] <= STORED_TARGET else 'FAIL'}"
        )
    return out


if __name__ == "__main__":
    main()
