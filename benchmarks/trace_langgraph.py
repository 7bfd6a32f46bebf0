"""Where a LangGraph graph step on TetherSaver spends its time: the graph's own thread against
the puts LangGraph hands to its background thread, for TetherSaver and for the floors of
``bench_langgraph`` (a checkpointer that stores nothing but serialises the step's delta and
makes one raw durable write).

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/trace_langgraph.py                  # 1 MB, timeline
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/trace_langgraph.py --callgrind      # instructions per step
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/trace_langgraph.py --sizes 10MB --only tether
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/trace_langgraph.py --callgrind --only tether --policy seal_versions=0
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/trace_langgraph.py --bytes          # stored per step, by key
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/trace_langgraph.py --cold           # a cold get_state, counted
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/trace_langgraph.py --replay         # the puts' CPU, one at a time
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/trace_langgraph.py --parts          # a put's CPU by its parts
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/trace_langgraph.py --ops            # a commit by its ops' shape

The graph, chat and savers are ``bench_langgraph``'s. Seven views, none with targets: they
say why ``bench_langgraph``'s step ratios are what they are, so that a change can be aimed.

* Timeline (default): per invoke of ``--steps`` steps, when the graph's last node ran against
  when the invoke returned, how many of the puts started only after that last node (a put
  LangGraph's background thread could not run while the graph held the interpreter), and
  each put's wall time and the CPU time of its thread. A put that waits for the graph's
  thread is charged to the step whole, its database round trip included. Then the CPU time
  per step of the graph's thread and of the others (the puts), and the wall time of the
  ``get_tuple`` LangGraph makes at the invoke's start: a step is CPU-bound (one interpreter
  lock), so its time is close to those CPU times summed, and TetherSaver's ``get_tuple``
  is the copy of the state it hands out (the caller's own objects), paid once per invoke.
  Then the drain: how many puts were done by half the graph's run (a put's thread gets the
  interpreter only between the graph's switch intervals, so few are), and for the puts
  started after the last node, which run one after another with nothing else to do, each
  one's wall time and the part of it not on its thread's CPU (the wait for its database
  round trip, idle time a step pays whole), and the gap between one such put's return and
  the next one's call. On Redis, the server's CPU per step (its main thread's, from ``INFO
  cpu``): the part of that wait the server spends working.
* ``--bytes``: what a TetherSaver thread on SQLite stores per step, by key of its delta ops
  (the messages' append, the checkpoint record, the pending writes, the channels' versions,
  the metadata...), read back from its delta and segment rows after the invokes:
  every byte stored is encoded, sealed and merged by later puts, and read by a cold load.
* ``--cold``: the instructions of a cold ``get_state`` (a new process, the saver opened
  uncounted) on TetherSaver (SQLite, PostgreSQL, Redis) and on ``SqliteSaver``, of a thread
  grown as ``bench_langgraph`` grows it before its cold reads: host-independent, where the
  wall-clock cold read moves by tens of percent on a shared host. Beside each TetherSaver
  subject, the store's read alone (in another new process): what TetherSaver pays beyond the
  decoding of the messages, which ``SqliteSaver`` pays too.
* ``--replay``: the saver calls of one invoke (recorded on TetherSaver), made again on a
  fresh saver of each subject in this one thread, ``--rounds`` times, subjects interleaved:
  the CPU and wall time of the puts and writes per step, with no graph competing for the
  interpreter, and TetherSaver's CPU against its floor's. In a graph the puts mostly run
  one after another once its last node is done, so this is the share of a step a change to
  the put path can move, and the least of the rounds moves less between runs than a step's
  wall time does. (The replaying saver's ``get_tuple`` is made
  untimed, and the puts after it are given its items in place of the recorded ones, as a
  graph would extend what it was handed.) On PostgreSQL and Redis it also prints what the
  server counted for the puts per step, beside the floor's: the bytes of write-ahead log
  PostgreSQL wrote, the bytes Redis received. Those counts are the same on any host (the
  same calls), where the puts' wall time includes the server's own work and moves with it.
  Beside the floors, ``store-<backend>`` subjects write the floor's bytes through a
  TetherSaver store's own backend (``StoreWrites``): what the saver and the state engine add
  to the store's write is TetherSaver's CPU against theirs.
* ``--parts``: the replay of ``--replay``, each TetherSaver subject's rounds made once plain
  and once with its parts timed (``PARTS``: serialising, copying what the graph handed over,
  the state's ops, planning the row, its overwrites and seals, the backend's write...): the
  CPU per step of each, indented under the part that holds it, beside the whole puts' CPU
  replayed plain and the floors'. Each timed call costs about a microsecond more, so the
  parts read a little above the plain figure. It says which parts a change could move.
* ``--ops``: the instructions of ``--steps`` commits of the store alone (SQLite, the saver's
  inline store), each shape in a new process under callgrind, for data shaped as a LangGraph
  step's. The shapes: the message's chunk and the index entry appended (what a step must
  store); those and the record, two scalar channels, the channels' versions and three
  pending writes, each its own op (what TetherSaver's puts make); the same data carried by
  the index entry (two ops); and the same packed into one bytes value there. It tells
  what the number of a step's ops costs, apart from their bytes.
* ``--callgrind``: each subject in a process of its own under valgrind's callgrind, counting
  instructions only during one invoke (after a warm-up invoke), per thread: the graph's
  (the main thread: LangGraph's steps and the copy a ``get_tuple`` hands out) and the rest
  (LangGraph's background threads: the puts). Counts move by 1-4% between repeats
  (which thread a young collection lands in, where the segment merges fall), whatever else
  the host runs, so two versions of the put path compare on a busy host.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import glob
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import bench_langgraph as bl
from harness import Report

SUBJECTS = (
    "tether-sqlite",
    "tether-postgres",
    "tether-redis",
    "floor-sqlite",
    "floor-postgres",
    "floor-redis",
)
STORE_SUBJECTS = ("store-sqlite", "store-postgres", "store-redis")
"""For ``--replay`` and ``--parts``: the floor's bytes written by TetherSaver's own store
(see ``StoreWrites``)."""
SIZES = {"1MB": 1 << 20, "10MB": 10 << 20}


POLICY: dict[str, int] = {}
"""``--policy``: the TetherSaver stores' compaction settings (``CompactionPolicy`` fields)."""


class StoreWrites:
    """A floor's write made by a TetherSaver store's own backend: each step's bytes as the
    next version of one run (the run's record moved and the row added in one atomic write,
    with the version check, the write id and the chain's statistics, as a put's commit
    does), without the saver, the state's ops or the planning of the row. What a put path
    that handed its delta's bytes straight to the store would pay at least."""

    def __init__(self, saver: Any) -> None:
        self.store = saver.inline_store  # (its twin: the blocking store a sync put commits on)
        if self.store.twin is None:
            raise SystemExit(f"{type(self.store.store).__name__} has no blocking twin to write through")
        self.run_id = f"trace-store-floor-{uuid.uuid4().hex[:12]}"
        self.version = 0

    def __call__(self, data: bytes) -> None:
        from tether.state.model import RunStatus
        from tether.stores._chain import Write
        from tether.stores.blocking import run_inline

        write = Write(
            run_id=self.run_id,
            kind="delta" if self.version else "full",
            payload=data,
            node_id=None,
            status=RunStatus.RUNNING,
            created_at=time.time(),
            expires_at=None,
            expected_version=self.version,
            growth_bytes=len(data) if self.version else 0,
            write_id=f"{self.run_id}-{self.version}",
        )
        self.version, _ = run_inline(self.store.twin.backend.append(write))

    def close(self) -> None:
        from tether.stores.blocking import run_inline

        run_inline(self.store.delete(self.run_id))


@contextlib.contextmanager
def opened(subject: str, tmp: Path, raw: bl.RawWrites) -> Iterator[Any]:
    """The saver of ``subject`` (``tether-<backend>``, ``floor-<backend>`` or
    ``store-<backend>``: the floor writing through TetherSaver's store), open."""
    kind, backend = subject.split("-")
    if kind == "floor":
        yield bl.FloorSaver(lambda data: raw.write(backend, data))
        return
    with tether_saver(tether_url(backend, tmp / f"trace-{uuid.uuid4().hex[:8]}.db")) as saver:
        if kind == "store":
            writes = StoreWrites(saver)
            try:
                yield bl.FloorSaver(writes)
            finally:
                writes.close()
            return
        yield saver


def tether_url(backend: str, sqlite_file: Path) -> str:
    """The store URL of a TetherSaver subject on ``backend`` (SQLite: in ``sqlite_file``)."""
    return {"sqlite": f"sqlite:///{sqlite_file}", "postgres": bl.PG, "redis": bl.REDIS}[backend]


@contextlib.contextmanager
def tether_saver(url: str) -> Iterator[Any]:
    """A TetherSaver on ``url``, its store compacting as ``--policy`` says."""
    from tether.integrations.langgraph import TetherSaver
    from tether.stores.policies import CompactionPolicy

    options = {"compaction": CompactionPolicy(**POLICY)} if POLICY else {}
    with TetherSaver.from_url(url, **options) as saver:
        yield saver


def floor_of(subject: str) -> str:
    """The floor on the backend of ``subject`` (``tether-<backend>``)."""
    return "floor-" + subject.split("-")[1]


def picked(subjects: tuple[str, ...], only: str) -> list[str]:
    """The ``subjects`` that ``--only`` (comma-separated name parts; empty: all) names."""
    parts = [o for o in only.split(",") if o]
    return [s for s in subjects if not parts or any(o in s for o in parts)]


def policy(text: str) -> dict[str, int]:
    """``seal_versions=16,seal_fanout=8`` as keyword arguments."""
    out = {}
    for part in filter(None, text.split(",")):
        name, _, value = part.partition("=")
        out[name.strip()] = int(value)
    return out


def seeded(saver: Any, initial: list[Any], steps: int) -> tuple[Any, dict[str, Any]]:
    """A graph on ``saver`` and the config of a new thread holding ``initial``."""
    graph = bl.build().compile(checkpointer=saver)
    cfg: dict[str, Any] = {
        "configurable": {"thread_id": f"trace-{uuid.uuid4().hex[:10]}"},
        "recursion_limit": steps + 10,
    }
    graph.update_state(cfg, {"messages": initial, "left": 0}, as_node="agent")
    flush(saver)
    return graph, cfg


def flush(saver: Any) -> None:
    if hasattr(saver, "flush"):
        saver.flush()


class Recorder:
    """Wraps a saver's ``put`` (an instance attribute over the class's method, as a test
    double would) to time each call; ``nodes`` gets the times the graph's node ran."""

    def __init__(self, saver: Any) -> None:
        self.puts: list[tuple[float, float, float]] = []  # start, wall, thread CPU
        self.nodes: list[float] = []
        self.reads: list[float] = []  # get_tuple's wall (the graph's thread, at the invoke's start)
        put, get_tuple = saver.put, saver.get_tuple

        def timed_put(*args: Any, **kwargs: Any) -> Any:
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return put(*args, **kwargs)
            finally:
                self.puts.append((t0, time.perf_counter() - t0, time.thread_time() - c0))

        def timed_get_tuple(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return get_tuple(*args, **kwargs)
            finally:
                self.reads.append(time.perf_counter() - t0)

        saver.put = timed_put
        saver.get_tuple = timed_get_tuple

    def clear(self) -> None:
        self.puts.clear()
        self.nodes.clear()
        self.reads.clear()


def timeline(report: Report, subject: str, initial: list[Any], args: argparse.Namespace, tmp: Path) -> None:
    raw = bl.RawWrites(tmp)
    try:
        with opened(subject, tmp, raw) as saver:
            rec = Recorder(saver)
            graph, cfg = seeded(saver, initial, args.steps)
            made = bl.message

            def message(i: int) -> Any:
                rec.nodes.append(time.perf_counter())
                return made(i)

            bl.message = message  # the node looks it up at each call
            server = ServerBytes() if subject.endswith("-redis") else None
            try:
                rows = [one_invoke(graph, cfg, saver, rec, args.steps, server) for _ in range(args.invokes)]
            finally:
                bl.message = made
                if server is not None:
                    server.close()
    finally:
        raw.close()
    steps = args.steps

    def med(i: int) -> float:
        return statistics.median(r[i] for r in rows)

    report.line(f"{subject}: step", med(0) * 1e3 / steps, "ms", note=f"median of {len(rows)} invokes")
    report.line(
        f"{subject}: graph's last node after",
        med(1) * 1e3,
        "ms",
        note=f"invoke returned at {med(0) * 1e3:.1f} ms",
    )
    report.line(f"{subject}: puts started after the last node", med(2), "", note=f"of {med(6):.0f} puts")
    report.line(
        f"{subject}: puts done by half the graph's run",
        med(13),
        "",
        note="the rest wait for the interpreter while the graph runs",
    )
    report.line(
        f"{subject}: put wall, after the last node",
        med(14) * 1e3,
        "ms",
        note=f"mean; {med(15) * 1e3:.3f} ms of it not on the put's CPU (its round trip's wait)",
    )
    report.line(
        f"{subject}: gap between those puts",
        med(16) * 1e3,
        "ms",
        note="median; one put's return to the next one's call (LangGraph's hand-off, put_writes)",
    )
    if not math.isnan(med(17)):
        report.line(
            f"{subject}: Redis's CPU per step",
            med(17) * 1e3 / steps,
            "ms",
            note="its main thread's, INFO cpu: requests read, commands and scripts run, replies",
        )
    report.line(
        f"{subject}: put wall", med(3) * 1e3, "ms", note=f"mean; its thread's CPU {med(4) * 1e3:.3f} ms"
    )
    report.line(
        f"{subject}: puts' wall per step",
        med(5) * 1e3 / steps,
        "ms",
        note="waits for the interpreter included",
    )
    report.line(
        f"{subject}: graph's thread CPU per step",
        med(7) * 1e3 / steps,
        "ms",
        note=f"the other threads' (the puts) {med(8) * 1e3 / steps:.3f} ms",
    )
    report.line(
        f"{subject}: get_tuple at the invoke's start",
        med(9) * 1e3,
        "ms",
        note=f"{med(9) * 1e3 / steps:.3f} ms a step; TetherSaver's is the copy it hands out",
    )
    report.line(
        f"{subject}: garbage collector per step",
        med(10) * 1e3 / steps,
        "ms",
        note=f"full passes {med(12):.0f} an invoke, {med(11) * 1e3:.1f} ms",
    )


class Collections:
    """The garbage collector's passes during an invoke: the seconds spent in each
    generation's and how many of the full (generation 2) ones there were."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.full = 0
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            return
        self.seconds[info["generation"]] += time.perf_counter() - self._start
        self.full += info["generation"] == 2

    def __enter__(self) -> Collections:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def one_invoke(
    graph: Any, cfg: dict[str, Any], saver: Any, rec: Recorder, steps: int, server: ServerBytes | None
) -> tuple[float, ...]:
    rec.clear()
    gc.collect()
    busy = server.redis_cpu() if server is not None else 0.0
    t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
    with Collections() as passes:
        graph.invoke({"left": steps}, cfg)
        flush(saver)
    wall = time.perf_counter() - t0
    mine, every = time.thread_time() - c0, time.process_time() - p0
    busy = server.redis_cpu() - busy if server is not None else math.nan
    last = rec.nodes[-1]
    after = sum(1 for p in rec.puts if p[0] > last)
    half = t0 + (last - t0) / 2
    drained = sorted(p for p in rec.puts if p[0] > last)
    gaps = [b[0] - (a[0] + a[1]) for a, b in zip(drained, drained[1:], strict=False)]
    return (
        wall,
        last - t0,
        after,
        statistics.mean(p[1] for p in rec.puts),
        statistics.mean(p[2] for p in rec.puts),
        sum(p[1] for p in rec.puts),
        len(rec.puts),
        mine,
        every - mine,
        sum(rec.reads),
        sum(passes.seconds),
        passes.seconds[2],
        passes.full,
        sum(1 for p in rec.puts if p[0] + p[1] <= half),
        statistics.mean(p[1] for p in drained) if drained else math.nan,
        statistics.mean(p[1] - p[2] for p in drained) if drained else math.nan,
        statistics.median(gaps) if gaps else math.nan,
        busy,
    )


# == the puts replayed one at a time ==================================================
Call = tuple[str, tuple[Any, ...], dict[str, Any], Any]
"""A saver call LangGraph made: the method's name, its arguments, and what it returned."""


def recorded(initial: list[Any], steps: int, tmp: Path) -> tuple[list[Call], int]:
    """The saver calls of a thread seeded with ``initial`` and run for two invokes of
    ``steps`` steps on TetherSaver (SQLite), in the order LangGraph made them, and the index
    of the second invoke's first call."""
    calls: list[Call] = []
    lock = threading.Lock()
    with tether_saver(tether_url("sqlite", tmp / "record.db")) as saver:
        for name in ("get_tuple", "put", "put_writes"):
            method = getattr(saver, name)

            def record(*args: Any, _method: Any = method, _name: str = name, **kwargs: Any) -> Any:
                out = _method(*args, **kwargs)
                with lock:  # (LangGraph's threads call one at a time; the order is theirs)
                    calls.append((_name, args, kwargs, out))
                return out

            setattr(saver, name, record)  # an instance attribute over the method, as in Recorder
        graph, cfg = seeded(saver, initial, steps)
        graph.invoke({"left": steps}, cfg)
        flush(saver)
        mark = len(calls)
        graph.invoke({"left": steps}, cfg)
        flush(saver)
    return calls, mark


def as_handed(calls: list[Call], got: Any, start: int) -> None:
    """Make the puts in ``calls`` from ``start`` on extend what ``got`` (a replaying saver's
    ``get_tuple``) handed out, as the graph's did what the recording saver handed it: its
    items are put in place of the recorded ones (a saver tells appends by the items' identity)."""
    handed = calls[start - 1][3]  # what the recording saver's get_tuple returned
    if handed is None or got is None:
        return
    swap: dict[int, Any] = {}
    for ch, value in handed.checkpoint["channel_values"].items():
        mine = got.checkpoint["channel_values"].get(ch)
        if type(value) is list and type(mine) is list:
            swap.update((id(a), b) for a, b in zip(value, mine, strict=False))
    for i in range(start, len(calls)):
        name, args, kwargs, out = calls[i]
        if name != "put":
            continue
        checkpoint = dict(args[1])
        checkpoint["channel_values"] = {
            ch: [swap.get(id(x), x) for x in v] if type(v) is list else v
            for ch, v in checkpoint["channel_values"].items()
        }
        calls[i] = (name, (args[0], checkpoint, *args[2:]), kwargs, out)


class ServerBytes:
    """A count the server keeps of what a subject's puts made it do, read before and after
    them: on PostgreSQL the bytes of write-ahead log it wrote (``pg_current_wal_lsn``), on
    Redis the bytes it received (``total_net_input_bytes``). The same calls give nearly the
    same count on any host, where the puts' wall time moves with it. (SQLite keeps no such
    count: its log file is reused from its start after each checkpoint.)"""

    def __init__(self) -> None:
        self.pg: Any = None
        self.redis: Any = None

    def read(self, backend: str) -> int | None:
        if backend == "postgres":
            if self.pg is None:
                import psycopg

                self.pg = psycopg.connect(bl.PG, autocommit=True)
            return int(self.pg.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])
        if backend == "redis":
            if self.redis is None:
                import redis

                self.redis = redis.Redis.from_url(bl.REDIS)
            return int(self.redis.info("stats")["total_net_input_bytes"])
        return None

    def redis_cpu(self) -> float:
        """The CPU seconds of Redis's main thread (``INFO cpu``: reading requests, running the
        commands and scripts, writing replies): read around an invoke, the server's own share
        of the puts' round trips, which a put waits for with the interpreter idle once the
        graph is done. Other clients of the server count too."""
        if self.redis is None:
            import redis

            self.redis = redis.Redis.from_url(bl.REDIS)
        cpu = self.redis.info("cpu")
        return float(cpu["used_cpu_user_main_thread"]) + float(cpu["used_cpu_sys_main_thread"])

    def close(self) -> None:
        if self.pg is not None:
            self.pg.close()
        if self.redis is not None:
            self.redis.close()


def replayed(
    subject: str,
    calls: list[Call],
    mark: int,
    tmp: Path,
    raw: bl.RawWrites,
    server: ServerBytes,
    timing: Callable[[], None] = lambda: None,
) -> tuple[float, float, int | None]:
    """Wall and CPU seconds of the puts and writes of ``calls[mark:]`` (the flush after them
    included) on a fresh saver of ``subject`` that first made ``calls[:mark]`` untimed, and
    the server's count of them (see ``ServerBytes``); the ``get_tuple`` calls are made
    untimed too. ``timing`` is called as the timed calls start."""
    calls = list(calls)
    backend = subject.split("-")[1]
    with opened(subject, tmp, raw) as saver:
        thread = calls[0][1][0]["configurable"]["thread_id"]
        saver.delete_thread(thread)  # (a server's copy of an earlier round)
        wall = cpu = 0.0
        before: int | None = None
        started = False
        for i, (name, args, kwargs, _out) in enumerate(calls):
            method = getattr(saver, name)
            if name == "get_tuple":
                as_handed(calls, method(*args, **kwargs), i + 1)
                continue
            if i < mark:
                method(*args, **kwargs)
                if i == mark - 1:
                    flush(saver)
                    gc.collect()
                continue
            if not started:
                started = True
                before = server.read(backend)
                timing()
            t0, c0 = time.perf_counter(), time.thread_time()
            method(*args, **kwargs)
            wall += time.perf_counter() - t0
            cpu += time.thread_time() - c0
        t0, c0 = time.perf_counter(), time.thread_time()
        flush(saver)
        wall, cpu = wall + time.perf_counter() - t0, cpu + time.thread_time() - c0
        after = server.read(backend)
        return wall, cpu, None if after is None or before is None else after - before


def replay(report: Report, initial: list[Any], args: argparse.Namespace, tmp: Path) -> None:
    """Per subject, ``--rounds`` replays of one invoke's saver calls, subjects interleaved:
    the puts' wall and CPU time per step, one call at a time in this thread, with no graph
    competing for the interpreter. The floors, and the floors through TetherSaver's stores
    (``StoreWrites``), replay the same calls."""
    calls, mark = recorded(initial, args.steps, tmp)
    steps = sum(1 for c in calls[mark:] if c[0] == "put")
    writes = sum(1 for c in calls[mark:] if c[0] == "put_writes")
    report.line("calls replayed", steps, "puts", note=f"and {writes} put_writes, of one invoke")
    chosen = picked(SUBJECTS + STORE_SUBJECTS, args.only)
    times: dict[str, list[tuple[float, float, int | None]]] = {s: [] for s in chosen}
    raw = bl.RawWrites(tmp)
    server = ServerBytes()
    try:
        for _ in range(args.rounds):
            for subject in chosen:
                times[subject].append(replayed(subject, calls, mark, tmp, raw, server))
    finally:
        raw.close()
        server.close()
    cpu: dict[str, float] = {}
    written: dict[str, float] = {}
    for subject, rows in times.items():
        walls, cpus = [w / steps * 1e6 for w, _, _ in rows], [c / steps * 1e6 for _, c, _ in rows]
        cpu[subject] = min(cpus)
        report.line(
            f"{subject}: puts and writes per step, CPU",
            min(cpus),
            "us",
            note=f"least of {len(rows)} rounds (median {statistics.median(cpus):.0f}); "
            f"wall {min(walls):.0f} (median {statistics.median(walls):.0f})",
        )
        counts = [n / steps for _, _, n in rows if n is not None]
        if counts:
            written[subject] = statistics.median(counts)
            what = "WAL written" if subject.endswith("postgres") else "bytes received"
            report.line(
                f"{subject}: the server's {what} per step",
                statistics.median(counts),
                "bytes",
                note=f"median of {len(counts)} rounds ({min(counts):,.0f}-{max(counts):,.0f})",
            )
    for subject in (s for s in chosen if s.startswith("tether-")):
        floor = cpu.get(floor_of(subject))
        if floor:
            report.line(
                f"{subject}: CPU per step / its floor's", cpu[subject] / floor, "x", note="least of each"
            )
        store = cpu.get(subject.replace("tether-", "store-"))
        if store:
            report.line(
                f"{subject}: CPU per step / the floor's through its store",
                cpu[subject] / store,
                "x",
                note="least of each: what the saver adds to its store's own write",
            )
        floor_bytes = written.get(floor_of(subject))
        if subject in written and floor_bytes:
            report.line(
                f"{subject}: the server's bytes per step / its floor's",
                written[subject] / floor_bytes,
                "x",
                note="medians",
            )


# == a put by its parts ================================================================
_LG = "tether.integrations.langgraph"
PARTS: tuple[tuple[int, str, str, str], ...] = (
    (0, "put (the saver's, whole)", f"{_LG}.saver:TetherSaver", "put"),
    (1, "LangGraph's metadata merge", f"{_LG}.saver", "get_serializable_checkpoint_metadata"),
    (1, "under the namespace's lock", f"{_LG}._pending:PendingWrites", "retrying"),
    (2, "the put's own work", f"{_LG}._put:Puts", "put_once"),
    (3, "serialising values (LangGraph's serde)", f"{_LG}._spaces:Spaces", "dumps"),
    (3, "copying what the graph handed over", f"{_LG}._put:Puts", "own"),
    (3, "the waiting writes merged in", f"{_LG}._pending:PendingWrites", "apply_writes"),
    (3, "the state's ops (merge)", "tether.state.context:ExecutionContext", "merge_trusted"),
    (3, "the state's ops (set)", "tether.state.context:ExecutionContext", "put_trusted"),
    (3, "the store's commit", "tether.stores.base:CheckpointStore", "commit"),
    (4, "planning the row", "tether.stores._chain:ChainEngine", "plan"),
    (5, "overwrites, stored whole", "tether.stores._chain", "whole_ops"),
    (5, "sealing (segments)", "tether.stores._chain:ChainEngine", "seal"),
    (4, "the backend's write", "tether.stores.sqlite:SqliteBackend", "append"),
    (4, "the backend's write", "tether.stores._sql:SqlBackend", "append"),
    (4, "the backend's write", "tether.stores.redis.store:RedisBackend", "append"),
    (0, "put_writes (the saver's, whole)", f"{_LG}.saver:TetherSaver", "put_writes"),
    (1, "serialising the writes", f"{_LG}._pending:PendingWrites", "writes_batch"),
)
"""``--parts``: (depth, label, where, attribute) of the calls timed inside a put; a part
holds the deeper ones listed after it. A label may name several functions (each backend's
write): the outermost call counts."""


@contextlib.contextmanager
def timed_parts(cpu: dict[str, float]) -> Iterator[None]:
    """While open, each part of ``PARTS`` adds its thread's CPU seconds to ``cpu[label]``:
    its function is replaced by a timing wrapper (the outermost call of a label only: the
    SQLite backend's write calls the SQL one's), and put back on exit."""
    import functools
    import importlib
    import inspect

    depth: dict[str, int] = {}
    undo: list[tuple[Any, str, Any]] = []

    def wrapped(label: str, f: Any) -> Any:
        def enter() -> float:
            depth[label] = depth.get(label, 0) + 1
            return time.thread_time()

        def leave(c0: float) -> None:
            depth[label] -= 1
            if not depth[label]:
                cpu[label] = cpu.get(label, 0.0) + time.thread_time() - c0

        if inspect.iscoroutinefunction(f):

            @functools.wraps(f)
            async def timed_async(*a: Any, **k: Any) -> Any:
                c0 = enter()
                try:
                    return await f(*a, **k)
                finally:
                    leave(c0)

            return timed_async

        @functools.wraps(f)
        def timed(*a: Any, **k: Any) -> Any:
            c0 = enter()
            try:
                return f(*a, **k)
            finally:
                leave(c0)

        return timed

    try:
        for _, label, where, name in PARTS:
            module, _, cls = where.partition(":")
            owner: Any = importlib.import_module(module)
            if cls:
                owner = getattr(owner, cls)
            original = owner.__dict__[name]
            undo.append((owner, name, original))
            setattr(owner, name, wrapped(label, original))
        yield
    finally:
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)


def parts(report: Report, initial: list[Any], args: argparse.Namespace, tmp: Path) -> None:
    """Per TetherSaver subject, the CPU per step of each part of its puts (``PARTS``), from
    ``--rounds`` replays of one invoke's calls (the median of each part), beside the whole
    puts' CPU replayed without the timing wrappers and the floor's."""
    calls, mark = recorded(initial, args.steps, tmp)
    steps = sum(1 for c in calls[mark:] if c[0] == "put")
    chosen = picked(SUBJECTS + STORE_SUBJECTS, args.only)
    raw = bl.RawWrites(tmp)
    server = ServerBytes()
    plain: dict[str, list[float]] = {s: [] for s in chosen}
    timed: dict[str, list[dict[str, float]]] = {s: [] for s in chosen if s.startswith("tether-")}
    try:
        for _ in range(args.rounds):
            for subject in chosen:
                plain[subject].append(replayed(subject, calls, mark, tmp, raw, server)[1] / steps * 1e6)
                if subject in timed:
                    cpu: dict[str, float] = {}
                    with timed_parts(cpu):
                        replayed(subject, calls, mark, tmp, raw, server, timing=cpu.clear)
                    timed[subject].append(cpu)
    finally:
        raw.close()
        server.close()
    for subject in chosen:
        report.line(
            f"{subject}: puts and writes per step, CPU",
            statistics.median(plain[subject]),
            "us",
            note=f"median of {len(plain[subject])} rounds, no timing wrappers",
        )
    for subject, rounds in timed.items():
        print(
            f"  {subject}, by part (CPU per step, median of {len(rounds)} rounds; timing wrappers add ~1 us a call):"
        )
        shown: set[str] = set()
        for indent, label, _, _ in PARTS:
            if label in shown:
                continue
            shown.add(label)
            values = [r.get(label, 0.0) / steps * 1e6 for r in rounds]
            if max(values) > 0:
                report.line(f"{subject}: {'  ' * indent}{label}", statistics.median(values), "us")


# == bytes per step ====================================================================
def stored_bytes(report: Report, initial: list[Any], args: argparse.Namespace, tmp: Path) -> None:
    """Bytes per step by key of the delta ops a TetherSaver thread on SQLite stored."""
    import sqlite3
    from collections import Counter

    import ormsgpack

    from tether.integrations.langgraph._layout import ns_key
    from tether.state.serde import Codec

    path = tmp / f"bytes-{uuid.uuid4().hex[:8]}.db"
    with tether_saver(f"sqlite:///{path}") as saver:
        graph, cfg = seeded(saver, initial, args.steps)
        for _ in range(args.invokes):
            graph.invoke({"left": args.steps}, cfg)
        flush(saver)
    run_id = ns_key(cfg["configurable"]["thread_id"], "")
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT kind, payload FROM tether_checkpoints WHERE run_id = ? AND kind IN ('delta', 'segment')",
            (run_id,),
        ).fetchall()
    finally:
        conn.close()
    codec, sizes, versions, row_bytes = Codec(), Counter[str](), 0, 0
    for kind, payload in rows:
        body = codec.decode(bytes(payload))
        row_bytes += len(payload)
        names = body.get("names")
        versions += body["n"] if kind == "segment" else 1
        for entry in body["ops"]:
            key, op = (names[entry[0]], names[entry[1]]) if names is not None else (entry[0], entry[1])
            # a run's versions: its outcome, and each earlier argument as bytes beside it
            sizes[f"{key} ({op})"] += len(ormsgpack.packb(entry[2])) + (
                len(entry[5]) if len(entry) == 6 else 0
            )
    report.line("steps read back", versions, "", note=f"{len(rows)} delta and segment rows")
    report.line(
        "stored per step, rows whole", row_bytes / versions, "bytes", note="payloads, framing included"
    )
    for key, total in sizes.most_common():
        report.line(f"  {key}", total / versions, "bytes/step")


# == callgrind =========================================================================
def counted(subject: str, size: str, steps: int) -> dict[int, int]:
    """Instructions per thread (callgrind's thread numbers, 1 the main thread) of one invoke
    of ``subject`` in a new process under callgrind."""
    return under_callgrind(["--child", subject, "--sizes", size, "--steps", str(steps)])


def under_callgrind(child_args: list[str]) -> dict[int, int]:
    """Instructions per thread of this script run with ``child_args`` (and ``--policy``)
    under callgrind, counted while the child has switched counting on (``toggle``)."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("--callgrind needs valgrind and its callgrind_control (Debian's valgrind package)")
    with tempfile.TemporaryDirectory(prefix="trace-cg-") as d:
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--separate-threads=yes",
            f"--callgrind-out-file={d}/cg.out",
            sys.executable,
            __file__,
            *child_args,
            "--policy",
            ",".join(f"{k}={v}" for k, v in POLICY.items()),
        ]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out: dict[int, int] = {}
        for path in glob.glob(f"{d}/cg.out-*"):
            thread = int(path.rsplit("-", 1)[1])
            with open(path) as f:
                for line in f:
                    if line.startswith("totals:"):
                        out[thread] = int(line.split()[1])
        return out


def child(subject: str, size: str, steps: int) -> None:
    """Under callgrind: seed, warm up with one invoke, count one invoke."""
    initial = bl.chat(SIZES[size])
    with tempfile.TemporaryDirectory(prefix="trace-") as d:
        raw = bl.RawWrites(Path(d))
        try:
            with opened(subject, Path(d), raw) as saver:
                graph, cfg = seeded(saver, initial, steps)
                graph.invoke({"left": steps}, cfg)  # caches, prepared statements
                flush(saver)
                toggle(True)
                graph.invoke({"left": steps}, cfg)
                flush(saver)
                toggle(False)
        finally:
            raw.close()


def toggle(on: bool) -> None:
    cmd = ["callgrind_control", "-i", "on" if on else "off", str(os.getpid())]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


# == cold get_state, counted ==========================================================
COLD_SUBJECTS = ("tether-sqlite", "tether-postgres", "tether-redis", "sqlitesaver")


@contextlib.contextmanager
def cold_opened(subject: str, tmp: Path) -> Iterator[Any]:
    """The saver of a ``--cold`` subject on ``tmp``'s database files (the same each time)."""
    if subject == "sqlitesaver":
        with bl.sqlite_saver(str(tmp / "langgraph.db")) as saver:
            yield saver
        return
    with tether_saver(tether_url(subject.split("-")[1], tmp / "cold.db")) as saver:
        yield saver


def cold_instructions(report: Report, size: str, args: argparse.Namespace, tmp: Path) -> None:
    """Per subject: a thread seeded with the chat and grown by ``--invokes`` invokes of
    ``--steps`` steps (as ``bench_langgraph`` grows it before its cold reads), then the
    instructions of one ``get_state`` in a new process, its saver opened uncounted."""
    initial = bl.chat(SIZES[size])
    chosen = picked(COLD_SUBJECTS, args.only)
    counts: dict[str, float] = {}
    for subject in chosen:
        with cold_opened(subject, tmp) as saver:
            graph, cfg = seeded(saver, initial, args.steps)
            for _ in range(args.invokes):
                graph.invoke({"left": args.steps}, cfg)
                flush(saver)
        thread = cfg["configurable"]["thread_id"]
        threads = under_callgrind(["--cold-child", subject, thread, "--dir", str(tmp)])
        counts[subject] = sum(threads.values()) / 1e6
        report.line(f"{subject}: cold get_state", counts[subject], "M instr", note="all threads")
        if subject != "sqlitesaver":
            alone = under_callgrind(["--cold-child", subject, thread, "--dir", str(tmp), "--store-only"])
            report.line(
                f"{subject}: the store's read alone",
                sum(alone.values()) / 1e6,
                "M instr",
                note="rows fetched, checked, decoded and replayed; no LangGraph decoding",
            )
    ref = counts.get("sqlitesaver")
    for subject, count in counts.items():
        if ref and subject != "sqlitesaver":
            report.line(f"{subject}: cold get_state / SqliteSaver's", count / ref, "x", note="instructions")


def cold_child(subject: str, thread: str, tmp: Path, store_only: bool = False) -> None:
    """Under callgrind: open ``subject``'s saver, count one ``get_state`` of ``thread`` (or,
    ``store_only``, one read of the thread's latest state by the saver's store alone: what a
    cold read pays beyond the LangGraph decoding that ``SqliteSaver`` pays too)."""
    with cold_opened(subject, tmp) as saver:
        if store_only:
            from tether.integrations.langgraph._layout import ns_key
            from tether.stores.blocking import run_inline

            key = ns_key(thread, "")
            toggle(True)
            cp = run_inline(saver.inline_store.load(key))
            toggle(False)
            if cp is None or not cp.state.get("c:messages"):
                raise SystemExit(f"{subject}: thread {thread} read back empty")
            return
        graph = bl.build().compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": thread}}
        toggle(True)
        values = graph.get_state(cfg).values
        toggle(False)
    if not values.get("messages"):
        raise SystemExit(f"{subject}: thread {thread} read back empty")


def instructions(report: Report, subject: str, size: str, steps: int) -> None:
    threads = counted(subject, size, steps)
    graph = threads.get(1, 0) / steps / 1e6
    rest = sum(v for k, v in threads.items() if k != 1) / steps / 1e6
    report.line(
        f"{subject}: graph's thread", graph, "M instr/step", note="LangGraph's step and get_tuple's copy"
    )
    report.line(f"{subject}: background threads", rest, "M instr/step", note="the puts")


# == the store's commit by the shape of a step's ops, counted =============================
OP_SHAPES = {
    "appends": "the message's chunk and the index entry appended: what a step must store",
    "langgraph": "and the record, two scalar channels, the versions and the pending writes, "
    "each its own op (TetherSaver's puts today)",
    "folded": "the same data, carried by the index entry: two ops",
    "packed": "the same data, packed into one bytes value of the index entry",
}


def op_shapes(report: Report, args: argparse.Namespace) -> None:
    """Per shape, the instructions of ``--steps`` commits of the store alone (SQLite, the
    saver's own inline store), each a new process under callgrind: what the number of ops a
    step makes costs, apart from their bytes."""
    if args.steps < 1:
        raise SystemExit("--ops counts --steps commits: give --steps 1 or more")
    counts: dict[str, float] = {}
    for shape, what in OP_SHAPES.items():
        threads = under_callgrind(["--ops-child", shape, "--steps", str(args.steps)])
        counts[shape] = sum(threads.values()) / args.steps / 1e6
        report.line(f"{shape}: a commit", counts[shape], "M instr", note=what)
    for shape in ("appends", "folded", "packed"):
        report.line(f"{shape} / langgraph", counts[shape] / counts["langgraph"], "x", note="per commit")


def ops_child(shape: str, steps: int) -> None:
    """Under callgrind: a run grown by ``steps`` commits of ``shape`` (after 16 uncounted
    ones), with data shaped as a LangGraph step's: a chat message's chunk, a checkpoint
    record with its versions, the channels' versions, three pending writes."""
    import ormsgpack
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from tether.integrations.langgraph._layout import REDUCERS
    from tether.state import ExecutionContext
    from tether.stores.blocking import run_inline

    serde, rng = JsonPlusSerializer(), random.Random(11)
    total = steps + 16

    def version(i: int) -> str:
        return f"{i:032}.{rng.random():016}"

    def ident() -> str:
        return str(uuid.UUID(int=rng.getrandbits(128)))

    chunks = [list(serde.dumps_typed([bl.message(i)])) for i in range(total)]
    ids = [ident() for _ in range(total + 1)]
    plan: list[tuple[list[Any], Any, bytes, dict[str, Any], list[Any]]] = []
    for i in range(total):
        v = version(i + 2)
        record = {"v": 4, "id": ids[i + 1], "ts": f"2026-11-30T10:{i // 60 % 60:02}:{i % 60:02}+00:00"}
        record["versions_seen"] = {"__start__": {"__start__": version(1)}, "agent": {"branch:to:agent": v}}
        record["updated_channels"] = ["branch:to:agent", "left", "messages"]
        meta = serde.dumps_typed({"source": "loop", "step": i, "parents": {}})
        entry = [ids[i + 1], i + 2, ids[i], *meta]
        task, path = ident(), "~__pregel_pull, agent"
        writes = [
            [ids[i], task, 0, "messages", "@c", i, path],
            [ids[i], task, 1, "left", *serde.dumps_typed(total - i), path],
            [ids[i], task, 2, "branch:to:agent", *serde.dumps_typed(None), path],
        ]
        versions = {"messages": [v, 1], "left": [v, 0], "branch:to:agent": [v, 2]}
        plan.append((entry, total - i, serde.dumps_typed(record)[1], versions, writes))
    with (
        tempfile.TemporaryDirectory(prefix="trace-ops-") as d,
        tether_saver(f"sqlite:///{d}/ops.db") as saver,
    ):
        store = saver.inline_store
        ctx = ExecutionContext("lg:ops", reducers=REDUCERS)
        ctx.merge({"c:messages": [], "ix": [], "w": [], "m": {}})
        run_inline(store.commit(ctx))
        for i, (entry, left, record_bytes, versions, writes) in enumerate(plan):
            if i == 16:
                toggle(True)
            grow: dict[str, Any] = {"c:messages": [chunks[i]]}
            if shape == "langgraph":
                ctx.put_trusted("c:left", left)
                ctx.put_trusted("c:branch:to:agent", None)
                ctx.put_trusted("cp", record_bytes)
                grow.update(w=writes, m=versions)
            elif shape == "folded":
                entry = [*entry, record_bytes, versions, writes, left, None]
            elif shape == "packed":
                entry = [*entry, ormsgpack.packb([record_bytes, versions, writes, left, None])]
            grow["ix"] = [entry]
            ctx.merge_trusted(grow, set())
            run_inline(store.commit(ctx))
        toggle(False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1MB", help="1MB, 10MB or both (comma-separated)")
    ap.add_argument("--steps", type=int, default=100, help="steps per invoke (100)")
    ap.add_argument("--invokes", type=int, default=3, help="timed invokes per subject (3)")
    ap.add_argument(
        "--only", default="", help="comma-separated subject name parts (e.g. tether,floor-sqlite)"
    )
    ap.add_argument("--callgrind", action="store_true", help="count instructions per thread instead")
    ap.add_argument("--bytes", action="store_true", help="bytes a TetherSaver thread stores per step, by key")
    ap.add_argument(
        "--cold",
        action="store_true",
        help="count the instructions of a cold get_state (new process) against SqliteSaver's",
    )
    ap.add_argument(
        "--replay",
        action="store_true",
        help="replay one invoke's saver calls in this thread: the puts' CPU per step, no graph running",
    )
    ap.add_argument(
        "--parts",
        action="store_true",
        help="replay one invoke's saver calls and time each part of a put (serialising, the commit, the write...)",
    )
    ap.add_argument("--rounds", type=int, default=7, help="--replay, --parts: replays per subject (7)")
    ap.add_argument(
        "--ops",
        action="store_true",
        help="count a store commit (SQLite) by the shape of a step's ops: separate, or in the index entry",
    )
    ap.add_argument(
        "--policy", default="", help="TetherSaver compaction settings, e.g. seal_versions=16,seal_fanout=8"
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--cold-child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--store-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ops-child", choices=list(OP_SHAPES), help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    POLICY.update(policy(args.policy))
    if args.child:
        child(args.child, args.sizes, args.steps)
        return 0
    if args.cold_child:
        cold_child(*args.cold_child, Path(args.dir), store_only=args.store_only)
        return 0
    if args.ops_child:
        ops_child(args.ops_child, args.steps)
        return 0
    chosen = picked(SUBJECTS, args.only)
    what = (
        "instructions of a store commit by the shape of a step's ops (callgrind)"
        if args.ops
        else "instructions of a cold get_state (callgrind)"
        if args.cold
        else "instructions per thread (callgrind)"
        if args.callgrind
        else "bytes stored per step"
        if args.bytes
        else "the puts replayed one at a time"
        if args.replay
        else "a put's CPU by its parts"
        if args.parts
        else "the graph's thread against its puts"
    )
    report = Report("trace_langgraph", f"a LangGraph step on TetherSaver and on the floors: {what}")
    print(f"# {bl.MESSAGE_MODEL}")
    if POLICY:
        print(f"# TetherSaver's compaction: {POLICY} (the rest as by default)")
    if args.ops:
        report.section(f"{args.steps} commits of one run, SQLite")
        op_shapes(report, args)
        return report.finish()
    for size in args.sizes.split(","):
        report.section(f"{size}, {args.steps} steps per invoke")
        if args.callgrind:
            for subject in chosen:
                instructions(report, subject, size, args.steps)
            continue
        if args.cold:
            with tempfile.TemporaryDirectory(prefix="trace-") as d:
                cold_instructions(report, size, args, Path(d))
            continue
        initial = bl.chat(SIZES[size])
        with tempfile.TemporaryDirectory(prefix="trace-") as d:
            if args.bytes:
                stored_bytes(report, initial, args, Path(d))
                continue
            if args.replay:
                replay(report, initial, args, Path(d))
                continue
            if args.parts:
                parts(report, initial, args, Path(d))
                continue
            for subject in chosen:
                timeline(report, subject, initial, args, Path(d))
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
