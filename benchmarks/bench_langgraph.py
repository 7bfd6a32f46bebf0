#!/usr/bin/env python
"""A LangGraph graph on TetherSaver beside LangGraph's own savers, on realistic chats.

Run from the repository root::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_langgraph.py            # 1 MB and 10 MB, 3 runs
    PYTHONPATH=src .venv/bin/python benchmarks/bench_langgraph.py --quick    # the same, 1 run, 10 steps

``--quick`` measures every target (1 MB and 10 MB) in one run, on the savers the targets
name (TetherSaver on SQLite, PostgreSQL and Redis, SqliteSaver, the floors); the full run
adds TetherSaver on MySQL, PostgresSaver and SqliteSaver with LangGraph's DeltaChannel.

The messages: the harness corpus (``corpus.messages``, seed 7): a chat in rotation of user
prose, an assistant message with a tool call, the tool's result (JSON rows, log lines or
code) and an assistant answer, 80 to 6,000 characters each, as LangChain messages; 1 MB
or 10 MB of them are the thread's state before the steps. The graph: one node that
appends an ``AIMessage`` of ~1 KB of seeded prose (``add_messages``) and loops ``--steps``
times. For each saver, per run:

- step: wall time of the ``invoke`` / steps (every checkpoint and pending write included,
  LangGraph's default durability);
- get_state: ``graph.get_state`` at the end with the saver that ran the graph (warm), and
  in a new process with a freshly opened saver (cold: every saver's read starting 0.55 s
  after its opening started, see :func:`settle_before_read`; for a saver with targets, each of
  its cold reads made right beside one of ``SqliteSaver``'s, the two going first in turn,
  and the target the median of those pairs' quotients, a pair in each order taken
  together), and of the checkpoint before the steps with the saver that ran them (time
  travel; no target);
- stored: payload bytes the thread holds at the end / the final state's size.

Beside each line, in the same run: the graph with no checkpointer plus one raw 1 KB durable
write on the saver's backend (the base), and the floor: LangGraph with a checkpointer that
keeps references in memory and stores nothing, plus serialising what a delta saver must
store each step and one raw durable write of those bytes on the backend. No saver that
stores each step durably can be faster than its floor.

Targets (per run; met when they hold in two of three runs): a 10 MB step <= 1.5x the base
on SQLite, PostgreSQL and Redis; a 1 MB step <= 1.5x its floor and <= 0.2x SqliteSaver's
step; cold get_state <= 1.1x SqliteSaver's at 1 MB and 10 MB.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import os
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Report, corpus

KB, MB = 1024, 1024 * 1024
SEED = 7
MESSAGE_MODEL = (
    "messages: harness corpus.messages(seed=7) as LangChain messages (user prose; assistant "
    "with a tool call; tool results of JSON rows, log lines or code; assistant answers; 80-6,000 "
    "characters each; assistant ids run-<uuid>-0 from construction, the others a uuid given on entering "
    "the state); each step appends a ~1 KB AIMessage of seeded prose"
)
PG = os.environ.get("TETHER_TEST_POSTGRESQL_URL", "postgresql://127.0.0.1:5432/test")
REDIS = os.environ.get("TETHER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
MYSQL = os.environ.get("TETHER_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
STEP_TARGET, STORED_TARGET = 1.5, 2.0


_IDS = uuid.UUID(int=SEED)


def message_id(i: int) -> str:
    """The id of the chat's ``i``-th message when it is the assistant's, as LangChain's model
    wrappers make it (``run-<uuid>-0``), the same in every run: a different id from step to
    step, so each step appends."""
    return f"run-{uuid.uuid5(_IDS, str(i))}-0"


def entered_id(i: int) -> str:
    """The id of the chat's ``i``-th message when it is the user's or a tool's: those are
    built without one, and ``add_messages`` gives them a uuid4 string as they enter the
    state (seeded here, so that every run stores the same bytes)."""
    return str(uuid.uuid5(_IDS, f"entered-{i}"))


def chat(total_bytes: int, ids: Callable[[int], str] | None = None) -> list[Any]:
    """The corpus chat of about ``total_bytes``, as LangChain messages with fixed ids: as a
    LangGraph state holds them (assistant messages with the id they were built with, the
    others with the one they got on entering the state, made after them, see
    :func:`entered_id`); ``ids``: every message's id from its position, given as it is built."""
    from langchain_core.messages import HumanMessage, ToolMessage

    out: list[Any] = []
    entered: list[int] = []
    for i, m in enumerate(corpus.messages(SEED, total_bytes)):
        mid = ids(i) if ids is not None else None
        if m["role"] == "user":
            out.append(HumanMessage(content=m["content"], id=mid))
        elif m["role"] == "tool":
            out.append(
                ToolMessage(content=m["content"], tool_call_id=m["tool_call_id"], name=m["name"], id=mid)
            )
        else:
            calls = [
                {"id": c["id"], "name": c["function"]["name"], "args": json.loads(c["function"]["arguments"])}
                for c in m.get("tool_calls", [])
            ]
            out.append(AIMessage(content=m["content"], tool_calls=calls, id=mid or message_id(i)))
        if out[-1].id is None:
            entered.append(i)
    for i in entered:  # as add_messages does when the chat enters the state
        out[i].id = entered_id(i)
    return out


_PROSE = [corpus.prose(random.Random(SEED + i), KB) for i in range(64)]


def message(i: int) -> AIMessage:
    """The ~1 KB answer a step appends (seeded prose, varied from step to step)."""
    return AIMessage(content=_PROSE[i % len(_PROSE)], id=message_id(i))


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
        return {"messages": [message(len(state["messages"]))], "left": left - 1}  # a new id each step

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
        saver.setup()  # at opening, as TetherSaver's store does (not inside a timed first read)
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


QUICK_SUBJECTS = {
    "TetherSaver sqlite",
    "TetherSaver postgresql",
    "TetherSaver redis",
    "SqliteSaver",
    "LangGraph alone",
    "floor sqlite",
    "floor postgres",
    "floor redis",
}
"""What ``--quick`` runs: every saver a target compares, and their floors."""


def subjects(
    tmp: Path, only: set[str] | None, raw: RawWrites | None, names: set[str] | None = None
) -> list[Subject]:
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
    if raw is not None:
        out += floors(raw)
    return [
        s
        for s in out
        if (only is None or any(o in s.name.lower() for o in only)) and (names is None or s.name in names)
    ]


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


@dataclass
class Running:
    """One saver open for a size's run: its graph, its thread, and what was timed."""

    subject: Subject
    saver: Any
    graph: Any
    cfg: dict[str, Any]
    setup: int
    old_cfg: Any
    steps: list[float] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)


def start_subject(s: Subject, initial: list[AIMessage], steps: int, seed: str, stack: ExitStack) -> Running:
    """Open ``s``'s saver (kept open in ``stack``) and seed a new thread with ``initial``."""
    thread = f"bench-{uuid.uuid4().hex[:10]}"
    cfg: dict[str, Any] = {"configurable": {"thread_id": thread}, "recursion_limit": steps + 10}
    saver = stack.enter_context(s.open())
    graph = build(s.delta).compile(checkpointer=saver)
    if seed == "input":  # LangGraph then also stores the input channel: one more copy
        graph.invoke({"messages": initial, "left": 0}, cfg)
    else:
        graph.update_state(cfg, {"messages": initial, "left": 0}, as_node="agent")
    if hasattr(saver, "flush"):
        saver.flush()
    setup = s.stored(thread)
    old_cfg = graph.get_state(cfg).config  # the checkpoint before the steps: time travel
    return Running(s, saver, graph, cfg, setup, old_cfg)


def timed_steps(r: Running, steps: int, raw: RawWrites) -> None:
    """One ``invoke`` of ``steps`` steps (and the flush of any writes it left waiting, so no
    saver's background commit runs into the next subject's timing), after a collection,
    beside a few raw writes on the saver's backend measured right before it."""
    r.raw.append(raw.median(r.subject.backend, 8))
    gc.collect()
    t0 = time.perf_counter()
    r.graph.invoke({"left": steps}, r.cfg)
    if hasattr(r.saver, "flush"):
        r.saver.flush()
    r.steps.append((time.perf_counter() - t0) / steps)


def finish_subject(r: Running, initial: list[AIMessage], reads: int, steps: int) -> dict[str, Any]:
    """The warm reads and the stored bytes of a subject whose steps are done."""
    graph, cfg = r.graph, r.cfg
    final = graph.get_state(cfg).values["messages"]
    warm = _median_time(lambda: graph.get_state(cfg), reads)
    old = _median_time(lambda: graph.get_state(r.old_cfg), reads)
    assert len(final) == len(initial) + steps * len(r.steps), (r.subject.name, len(final))
    serde = JsonPlusSerializer()
    size = len(serde.dumps_typed(final)[1])
    added = len(serde.dumps_typed(final[len(initial) :])[1])
    thread = cfg["configurable"]["thread_id"]
    total = r.subject.stored(thread)
    return {
        "raw": statistics.median(r.raw),
        "step": statistics.median(r.steps),
        "step_p95": _p95(r.steps),
        "step_samples": list(r.steps),
        "warm": warm,
        "old": old,
        "thread": thread,
        "final": len(final),
        "stored": total / size,
        "setup": r.setup / size,
        "steps_bytes": (total - r.setup) / added,
    }


def _p95(xs: Sequence[float]) -> float:
    """The 95th percentile (nearest rank): the largest sample below 20 of them."""
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, max(0, -(-95 * len(ordered) // 100) - 1))]


def run_subjects(
    chosen: list[Subject], initial: list[AIMessage], args: argparse.Namespace, raw: RawWrites
) -> tuple[dict[str, dict[str, Any]], float]:
    """Every saver open at once, their ``invoke`` calls interleaved rep by rep in a turning
    order, so that the disk's and the host's slow minutes hit them alike (a durable write
    on a shared disk takes 0.2 ms one minute and 5 ms the next: timed one saver after the
    other, the same step varied 2x between runs). Returns the rows and the median step of
    the graph with no checkpointer, timed once per rep among them."""
    rows: dict[str, dict[str, Any]] = {}
    with ExitStack() as stack:
        running: list[Running] = []
        for s in chosen:
            try:
                running.append(start_subject(s, initial, args.steps, args.seed, stack))
            except Exception as exc:  # a server not running: say so, go on
                print(f"  {s.name}: failed: {type(exc).__name__}: {str(exc)[:120]}")
        bare: list[float] = []
        for rep in range(args.reps):
            turn = rep % max(1, len(running))
            gc.collect()
            bare.append(no_checkpointer_step(initial, args.steps))
            for r in running[turn:] + running[:turn]:
                timed_steps(r, args.steps, raw)
        for r in running:
            rows[r.subject.name] = finish_subject(r, initial, args.reads, args.steps)
    return rows, statistics.median(bare)


REFERENCE = "SqliteSaver"
"""The saver whose cold ``get_state`` the cold-read targets compare with."""


def targeted(s: Subject) -> bool:
    """Whether ``s`` has targets: TetherSaver on SQLite, PostgreSQL or Redis."""
    return s.name.startswith("TetherSaver") and s.backend != "mysql"


def cold_reads(subjects: list[Subject], rows: dict[str, dict[str, Any]], reads: int, tmp: Path) -> None:
    """``get_state`` through a freshly opened saver in a new process (no cache of this one
    can help), subjects interleaved rep by rep in a turning order so that the noise of a
    shared machine hits them alike; ``rows[...]`` gets ``cold`` (the median), ``cold_p95``
    and ``cold_open`` (the median time to open the saver, not counted in ``cold``).

    A subject with targets also gets ``cold_paired``: its reads made right beside one of
    ``SqliteSaver``'s, one pair per rep, which of the two goes first alternating. A shared
    host's speed changes from one second to the next, and one saver's median of reads made
    seconds away from the other's can land on a fast stretch where the other's landed on a
    slow one: the pairs see the same stretch. So that neither order weighs more (a pair's
    first read may pay for what ran before it, another saver's server still busy), each
    pair read in one order is taken with the next, read in the other, as the geometric mean
    of their two quotients; ``cold_paired`` is the median of those (``reads // 2`` of them)
    and ``cold_orders`` each order's median quotient."""
    names = [s.name for s in subjects if s.name in rows and not s.floor]  # a floor stores nothing
    paired = {s.name for s in subjects if targeted(s) and s.name in rows} if REFERENCE in rows else set()
    times: dict[str, list[float]] = {name: [] for name in names}
    opens: dict[str, list[float]] = {name: [] for name in names}
    faults: dict[str, list[int]] = {name: [] for name in names}
    quotients: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in paired}

    def read(name: str, own: bool = True) -> float:
        """One cold read of ``name``'s thread; ``own``: counted in ``name``'s own figures."""
        out = subprocess.run(
            [sys.executable, __file__, "--cold-read", name, rows[name]["thread"], "--dir", str(tmp)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        assert int(out[1]) == rows[name]["final"], (name, out)
        if own:
            times[name].append(float(out[0]))
            opens[name].append(float(out[2]))
            faults[name].append(int(out[3]))
        return float(out[0])

    for rep in range(reads):
        turn = rep % max(1, len(names))
        for name in names[turn:] + names[:turn]:
            if name not in paired:
                read(name)
            elif rep % 2:
                ref = read(REFERENCE, own=False)
                quotients[name][1].append(read(name) / ref)
            else:
                quotients[name][0].append(read(name) / read(REFERENCE, own=False))
    for name, ts in times.items():
        if ts:
            rows[name]["cold"] = statistics.median(ts)
            rows[name]["cold_p95"] = _p95(ts)
            rows[name]["cold_open"] = statistics.median(opens[name])
            rows[name]["cold_faults"] = statistics.median(faults[name])
    for name, (first, second) in quotients.items():
        if second:
            rows[name]["cold_paired"] = statistics.median(
                math.sqrt(a * b) for a, b in zip(first, second, strict=False)
            )
            rows[name]["cold_orders"] = (statistics.median(first), statistics.median(second))


READ_AT = 0.5
"""Seconds after a cold read's opening started at which its timed ``get_state`` starts."""
BUSY_BEFORE_READ = 0.05
"""Seconds the CPU is kept busy right before a cold read's timed ``get_state``."""


def settle_before_read(opening_started: float) -> None:
    """Wait until :data:`READ_AT` seconds after ``opening_started``, then keep the CPU busy
    for :data:`BUSY_BEFORE_READ`: every saver's cold ``get_state`` starts at the same moment
    of its process's life, on a busy CPU.

    A new process fills every page of memory it uses, and on some virtual machines what
    that costs depends on when it happens: the harness's chat, decoded in a new process
    with no saver at all, takes markedly longer one second after the imports than straight
    after them, whether the process slept or kept busy meanwhile (memory the machine freed
    a moment before is cheap to take again, memory freed a while ago is not; see
    ``benchmarks/probe_idle.py`` and its figures in ``benchmarks/README.md``). A saver that
    opens in a few milliseconds would read in the cheap moment and one that opens in a few
    hundred in a dearer one: the reads are compared at the same moment instead. A wait
    inside ``get_state`` (a server's round trip) still counts."""
    time.sleep(max(0.0, opening_started + READ_AT - time.perf_counter()))
    busy(BUSY_BEFORE_READ)


def busy(seconds: float) -> None:
    """Keep this thread on the CPU for ``seconds`` (a sleep would leave it idle)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def cold_read(name: str, thread: str, tmp: Path) -> None:
    """In a new process: open saver ``name`` on ``tmp``'s databases, time one ``get_state``
    of ``thread``; prints the seconds, the number of messages read, the seconds the opening
    took (imports of the saver's modules included) and the page faults the ``get_state``
    took (the first touch of each page of memory a new process fills)."""
    (s,) = [s for s in subjects(tmp, None, None) if s.name == name]
    t0 = time.perf_counter()
    with s.open() as saver:
        graph = build(s.delta).compile(checkpointer=saver)
        opened = time.perf_counter() - t0
        settle_before_read(t0)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        again = graph.get_state({"configurable": {"thread_id": thread}}).values["messages"]
        took = time.perf_counter() - t0
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    print(took, len(again), opened, faults)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 run, 10 steps, only the savers the targets name")
    ap.add_argument("--sizes", default="1MB,10MB", help="default 1MB,10MB")
    ap.add_argument("--steps", type=int, default=None, help="steps per invoke (100; 10 with --quick)")
    ap.add_argument(
        "--reps", type=int, default=None, help="timed invokes per saver, interleaved (3; 7 with --quick)"
    )
    ap.add_argument(
        "--cold-reads", type=int, default=None, help="cold get_state processes per saver (10; 8 with --quick)"
    )
    ap.add_argument("--runs", type=int, default=None, help="runs (3; 1 with --quick)")
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
    ap.add_argument("--cold-read", nargs=2, metavar=("SAVER", "THREAD"), help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.cold_read:
        cold_read(*args.cold_read, Path(args.dir))
        return
    args.reads = args.reads or (3 if args.quick else 5)
    args.steps = args.steps or (10 if args.quick else 100)
    args.reps = args.reps or (7 if args.quick else 3)
    args.cold_reads = args.cold_reads or (8 if args.quick else 10)
    args.runs = args.runs or (1 if args.quick else 3)
    only = {o.strip().lower() for o in args.only.split(",") if o.strip()} or None
    rep = Report(
        "bench_langgraph",
        "a LangGraph graph step and get_state on TetherSaver, LangGraph's savers and floors",
    )
    print(f"# {MESSAGE_MODEL}")
    chats = {size: chat(int(size.upper().removesuffix("MB")) * MB) for size in args.sizes.split(",")}
    for size, initial in chats.items():
        print(
            f"# {size}: {len(initial)} messages, {len(JsonPlusSerializer().dumps_typed(initial)[1]):,} bytes serialised"
        )
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        raw = RawWrites(tmp)
        try:
            for _ in rep.runs(args.runs):
                for size, initial in chats.items():
                    run_size(rep, args, size, initial, tmp, raw, only, QUICK_SUBJECTS if args.quick else None)
        finally:
            raw.close()
    rep.finish()


def run_size(
    rep: Report,
    args: argparse.Namespace,
    size: str,
    initial: list[Any],
    tmp: Path,
    raw: RawWrites,
    only: set[str] | None,
    names: set[str] | None = None,
) -> None:
    """One run at one size: every saver in turn beside its base and floor, then the cold reads."""
    chosen = subjects(tmp, only, raw, names)
    rows, bare = run_subjects(chosen, initial, args, raw)
    cold_reads(chosen, rows, args.cold_reads, tmp)
    for s in chosen:  # the servers are shared: leave no threads behind
        if s.name in rows and not s.floor:
            with s.open() as saver:
                saver.delete_thread(rows[s.name]["thread"])
    rep.section(
        f"{size}, {len(initial)} messages, {args.steps} steps per invoke, {args.reps} invokes per saver"
        " (interleaved); step: median over the invokes (p95 beside it)"
    )
    rep.line(f"{size} no checkpointer: step", bare * 1e3, "ms")
    alone = rows.get("LangGraph alone")
    if alone:
        rep.line(f"{size} LangGraph alone (stores nothing): step", alone["step"] * 1e3, "ms")
    ref = rows.get(REFERENCE)
    for s in chosen:
        r = rows.get(s.name)
        if r is None or s.floor:
            continue
        backend = s.backend
        floor = rows.get(f"floor {backend}")
        base = bare + r["raw"]
        beside = f"p95 {r['step_p95'] * 1e3:.2f} ms; base {base * 1e3:.2f} ms" + (
            f", floor {floor['step'] * 1e3:.2f} ms (p95 {floor['step_p95'] * 1e3:.2f})" if floor else ""
        )
        rep.line(f"{size} {s.name}: step", r["step"] * 1e3, "ms", note=beside)
        cold = r.get("cold")
        ref_cold = ref.get("cold") if ref else None
        rep.line(
            f"{size} {s.name}: get_state warm / cold",
            r["warm"] * 1e3,
            "ms",
            note=(f"cold {cold * 1e3:.1f} ms, p95 {r['cold_p95'] * 1e3:.1f}" if cold else "cold -")
            + (f", SqliteSaver cold {ref_cold * 1e3:.1f} ms" if ref_cold else "")
            + (f"; {r['cold_faults']:,.0f} page faults" if cold else "")
            + (f" (SqliteSaver {ref['cold_faults']:,.0f})" if ref_cold and ref is not r else "")
            + (f"; opening the saver {r['cold_open'] * 1e3:.0f} ms, not counted" if cold else ""),
        )
        rep.line(
            f"{size} {s.name}: time-travel get_state",
            r["old"] * 1e3,
            "ms",
            note="the checkpoint before the steps, warm saver",
        )
        rep.line(f"{size} {s.name}: stored / final state", r["stored"], "x")
        if not targeted(s):
            continue
        if size.upper() == "10MB":
            rep.target(
                f"{size} {s.name}: step / (no checkpointer + raw 1 KB write)", r["step"] / base, goal=1.5
            )
        if size.upper() == "1MB":
            if floor:
                rep.target(f"{size} {s.name}: step / its floor", paired(r, floor), goal=1.5)
            if ref:
                rep.target(f"{size} {s.name}: step / SqliteSaver's", paired(r, ref), goal=0.2)
        if cold and ref_cold:
            rep.line(
                f"{size} {s.name}: cold medians / SqliteSaver's",
                cold / ref_cold,
                "x",
                note="reads seconds apart: moves with the host's speed of the moment"
                + (
                    "; pairs read {:.2f}x with it first, {:.2f}x with SqliteSaver first".format(
                        *r["cold_orders"]
                    )
                    if "cold_orders" in r
                    else ""
                ),
            )
        if "cold_paired" in r:
            rep.target(f"{size} {s.name}: cold get_state / SqliteSaver's", r["cold_paired"], goal=1.1)


def paired(r: dict[str, Any], other: dict[str, Any]) -> float:
    """The median of the invoke-by-invoke ratios of two savers (each pair timed one right
    after the other, so a slow minute of the disk or the host hits both)."""
    return statistics.median(a / b for a, b in zip(r["step_samples"], other["step_samples"], strict=True))


if __name__ == "__main__":
    main()
