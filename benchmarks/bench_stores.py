#!/usr/bin/env python
"""Checkpoint-store benchmark: tether's stores beside the raw floor and LangGraph's savers.

Run from the repository root (``PYTHONPATH=src:benchmarks``)::

    .venv/bin/python benchmarks/bench_stores.py                  # every available backend, 3 runs
    .venv/bin/python benchmarks/bench_stores.py --quick          # 1 short run, sizes up to 1 MB
    .venv/bin/python benchmarks/bench_stores.py --backends sqlite,postgresql --json out.json

Sections (see benchmarks/README.md for what each column means):

1. save (``store.commit`` of a new run) and load latest (``store.load``) at 1 KB, 100 KB,
   1 MB, 10 MB of chat messages, against the raw floor: the same state serialised once
   with ormsgpack plus one round trip of those bytes to the same server;
2. the append step: one ~1 KB message appended to a 10 MB run and committed;
3. storage growth of a 1,000-step append-only run of ~10 KB messages, and (3c, section
   ``small``) the same with ~1 KB messages: a chain of small deltas, a load's hard case.

Tables 1b, 2b and 3b run LangGraph's saver for the same backend (where installed) on the
same states. The states and messages are seeded corpus chats (``benchmarks/corpus.py``:
prose, tool calls, JSON rows, log lines, code), the same bytes on every machine.

Every ratio compares numbers measured in this run, on this machine; the subjects are
interleaved rep by rep (in a turning order) so that noise from a shared host hits them alike.

Targets, per backend and row (met when they hold in two of three runs): load <= 1.5x its
floor (every size, after the appends, at the end of each growth run); the append step's
median <= 5 ms on a 10 MB run (SQLite, Redis, PostgreSQL); stored bytes <= 2x the final
state and the SQLite file <= 2.5x after each growth run; tether / LangGraph's
``AsyncSqliteSaver`` and ``AsyncPostgresSaver`` < 1 on every row both ran
(``InMemorySaver``'s rows are printed for reference only).
"""

from __future__ import annotations

import abc
import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import ormsgpack
from harness import Report, corpus

from tether.state.context import ExecutionContext
from tether.stores.base import CheckpointStore
from tether.stores.registry import create_store

Msg = dict[str, Any]
KB = 1024
MB = 1024 * 1024

DEFAULT_URLS: dict[str, str] = {
    "memory": "memory://?cache=1",  # the opt-in cached backend: the store's own overhead
    "sqlite": "",  # a fresh file in the work directory
    "redis": "redis://127.0.0.1:6379/0",
    "postgresql": "postgresql://127.0.0.1:5432/test",
    "mysql": "mysql://root@127.0.0.1:3306/test",
    "tiered": "tiered+redis://127.0.0.1:6379/2?sql=" + quote("mysql://root@127.0.0.1:3306/test", safe=""),
}
ALIASES = {"postgres": "postgresql", "pg": "postgresql", "mariadb": "mysql", "sqlite3": "sqlite"}
NAMED_SAVERS = ("sqlite", "postgresql")
"""Backends whose LangGraph saver the issue names (``langgraph-checkpoint-sqlite``,
``-postgres``): the "faster than LangGraph" target. The memory backend's ``InMemorySaver``
rows are printed and summed up apart, for reference: at 1 MB and 10 MB a load on both sides
is one ormsgpack decode of the same bytes, a tie by construction."""
APPEND_TARGET_MS = 5.0
APPEND_TARGET_BACKENDS = ("sqlite", "redis", "postgresql")
LOAD_TARGET = 1.5
ALL_SIZES = {"1KB": KB, "100KB": 100 * KB, "1MB": MB, "10MB": 10 * MB}
FULL_REPS = {"1KB": 67, "100KB": 21, "1MB": 11, "10MB": 9}
"""Reps per size in each of the three runs: a 10 MB load's spread on a shared 2-core host is
wide, so a target is read over the runs (met in two of three), not from one long median."""
SECTIONS = ("latency", "append", "growth", "small")
SMALL_MSG = 1024
"""The message size of section 3c, the small-steps growth run: a chain's load pays per row,
so small deltas are its hard case."""
GROWTH_TARGET = 2.0
FILE_TARGET = 2.5


# == configuration ===================================================================
@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    quick: bool
    sizes: dict[str, int]
    reps: dict[str, int]
    warmup: int
    append_base: str
    append_steps: int
    append_msg: int
    load_reps: int
    growth_steps: int
    growth_msg: int
    lg_growth_steps: int
    langgraph: bool
    workdir: Path
    urls: dict[str, str]
    sections: tuple[str, ...] = SECTIONS
    sqlite_options: str = ""
    """A query for every tether SQLite URL the bench opens (``--sqlite-options``)."""
    runs: int = 3
    seed: int = 20240601


def sqlite_url(path: Path, options: str) -> str:
    return f"sqlite:///{path}" + (f"?{options}" if options else "")


def make_config(args: argparse.Namespace, workdir: Path) -> Config:
    if args.quick:
        sizes = {"1KB": KB, "100KB": 100 * KB, "1MB": MB}
        reps = {"1KB": 5, "100KB": 4, "1MB": 3}
        base, steps, gsteps, gmsg, lgsteps, load_reps, warmup = "1MB", 15, 150, KB, 20, 3, 1
    else:
        sizes = dict(ALL_SIZES)
        reps = dict(FULL_REPS)
        base, steps, gsteps, gmsg, lgsteps, load_reps, warmup = "10MB", 100, 1000, 10 * KB, 100, 9, 2
    if args.sizes:
        wanted = [x.strip().upper() for x in args.sizes.split(",") if x.strip()]
        unknown = [x for x in wanted if x not in ALL_SIZES]
        if unknown:
            raise SystemExit(f"unknown size {unknown[0]!r}; known: {', '.join(ALL_SIZES)}")
        sizes = {x: ALL_SIZES[x] for x in wanted}
        reps = {x: reps.get(x, FULL_REPS[x]) for x in wanted}
    default = [x for x in SECTIONS if not (args.quick and x == "small")]
    sections = tuple(x.strip() for x in (args.sections or ",".join(default)).split(",") if x.strip())
    if any(x not in SECTIONS for x in sections):
        raise SystemExit(f"--sections takes {', '.join(SECTIONS)}")
    urls = dict(DEFAULT_URLS)
    urls["sqlite"] = sqlite_url(workdir / "tether.db", args.sqlite_options)
    for name in ("redis", "postgresql", "mysql", "tiered"):
        override = getattr(args, f"{name}_url")
        if override:
            urls[name] = override
    return Config(
        quick=args.quick,
        sizes=sizes,
        reps=reps,
        warmup=warmup,
        append_base=base,
        append_steps=args.append_steps or steps,
        append_msg=KB,
        load_reps=load_reps,
        growth_steps=args.growth_steps or gsteps,
        growth_msg=args.growth_msg or gmsg,
        lg_growth_steps=args.lg_growth_steps or lgsteps,
        langgraph=not args.no_langgraph,
        workdir=workdir,
        urls=urls,
        sections=sections,
        sqlite_options=args.sqlite_options,
        runs=args.runs or (1 if args.quick else 3),
    )


# == data: seeded corpus chats (benchmarks/corpus.py) =================================
def _packed(obj: Any) -> int:
    return corpus.packed_size(obj)


@dataclass(slots=True)
class Data:
    states: dict[str, list[Msg]]
    append_msgs: list[Msg]
    growth_msgs: list[Msg]
    small_msgs: list[Msg]


def make_data(cfg: Config) -> Data:
    """The same bytes on every machine: a state per size, and the messages the append,
    growth and small-steps sections add (each of a fixed packed size, a user message or a
    tool result in turn)."""
    rng = random.Random(cfg.seed)
    states = {name: corpus.packed_messages(rng, size) for name, size in cfg.sizes.items()}
    if cfg.append_base not in states:
        states[cfg.append_base] = corpus.packed_messages(rng, ALL_SIZES[cfg.append_base])
    append = [corpus.packed_message(rng, 10_000 + i, cfg.append_msg) for i in range(cfg.append_steps)]
    growth = [corpus.packed_message(rng, i, cfg.growth_msg) for i in range(cfg.growth_steps + 1)]
    small = (
        [corpus.packed_message(rng, 20_000 + i, SMALL_MSG) for i in range(cfg.growth_steps + 1)]
        if "small" in cfg.sections
        else []
    )
    return Data(states=states, append_msgs=append, growth_msgs=growth, small_msgs=small)


def state_bytes(messages: list[Msg]) -> int:
    return _packed({"messages": messages})


# == statistics and formatting =========================================================
def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def p95(xs: Sequence[float]) -> float:
    if not xs:
        return math.nan
    s = sorted(xs)
    return s[max(0, math.ceil(0.95 * len(s)) - 1)]


def summary(xs: Sequence[float]) -> dict[str, Any]:
    return {"median_ms": median(xs), "p95_ms": p95(xs), "n": len(xs), "samples_ms": list(xs)}


def fms(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "-"
    if x < 1:
        return f"{x:.3f}"
    if x < 10:
        return f"{x:.2f}"
    if x < 1000:
        return f"{x:.1f}"
    return f"{x:,.0f}"


def fx(x: float | None) -> str:
    if x is None or math.isnan(x) or math.isinf(x):
        return "-"
    return f"{x:.2f}x"


def fbytes(n: float | None) -> str:
    if n is None or math.isnan(n):
        return "-"
    for unit, scale in (("GB", 1024**3), ("MB", MB), ("KB", KB)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def ratio(a: float | None, b: float | None) -> float:
    if a is None or b is None or math.isnan(a) or math.isnan(b) or b <= 0:
        return math.nan
    return a / b


def table(
    title: str, header: Sequence[str], rows: Sequence[Sequence[str]], notes: Sequence[str] = ()
) -> None:
    print()
    print(title)
    if not rows:
        print("  (no rows)")
    else:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

        def line(cells: Sequence[str]) -> str:
            first = cells[0].ljust(widths[0])
            rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
            return "  " + "  ".join((first, *rest))

        print(line(header))
        print("  " + "  ".join("-" * w for w in widths))
        for r in rows:
            print(line(r))
    for note in notes:
        print(f"  {note}")
    sys.stdout.flush()


# == subjects: tether, the raw floor, LangGraph =====================================
class Subject(abc.ABC):
    """Something that stores a ``{"messages": [...]}`` state under a key."""

    label = ""

    def __init__(self) -> None:
        self.live: set[str] = set()

    @abc.abstractmethod
    async def open(self) -> None: ...

    async def close(self) -> None:
        for key in list(self.live):
            with contextlib.suppress(Exception):
                await self.delete(key)

    def prepare(self, key: str, messages: list[Msg]) -> Any:
        """Untimed setup before a full save (building the context, for tether)."""
        return (key, messages)

    @abc.abstractmethod
    async def save(self, prepared: Any) -> None:
        """Write a new run's whole state (timed)."""

    @abc.abstractmethod
    async def load(self, key: str) -> int:
        """Read the latest state back as Python objects (timed); returns its message count."""

    async def step(self, key: str, msg: Msg) -> None:
        """Append one message and checkpoint (timed)."""
        raise NotImplementedError

    def forget(self, key: str) -> None:
        """Drop what the writer keeps in memory for ``key`` (untimed), so that a load is
        timed as a resuming process does it. A live copy of a 10 MB state left behind by
        the writer slowed the next 10 MB decode by ~18% in a one-off experiment (allocator
        state), which would charge the writer's memory to the load."""
        return None

    @abc.abstractmethod
    async def stored_bytes(self, key: str) -> int: ...

    @abc.abstractmethod
    async def delete(self, key: str) -> None: ...


class TetherSubject(Subject):
    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.label = "tether"
        self.store: CheckpointStore | None = None
        self._ctx: dict[str, ExecutionContext] = {}

    @property
    def s(self) -> CheckpointStore:
        assert self.store is not None
        return self.store

    async def open(self) -> None:
        self.store = create_store(self.url)
        await asyncio.wait_for(self.store.setup(), 30)
        # bound once, as the floor calls its own get/put: the timed calls pay no
        # property call (``s`` is a Python call the floor does not make)
        self._commit, self._load = self.store.commit, self.store.load

    async def close(self) -> None:
        await super().close()
        if self.store is not None:
            with contextlib.suppress(Exception):
                await self.store.aclose()
            self.store = None

    def prepare(self, key: str, messages: list[Msg]) -> Any:
        return ExecutionContext(key, {"messages": messages})

    async def save(self, prepared: Any) -> None:
        ctx: ExecutionContext = prepared
        self.live.add(ctx.run_id)
        await self._commit(ctx)
        self._ctx[ctx.run_id] = ctx

    async def load(self, key: str) -> int:
        cp = await self._load(key)
        assert cp is not None, key
        return len(cp.state["messages"])

    def forget(self, key: str) -> None:
        self._ctx.pop(key, None)

    async def resume(self, key: str) -> None:
        """Take the run up again after :meth:`forget`, as a resuming process does."""
        ctx = await self.s.load_context(key)
        assert ctx is not None, key
        self._ctx[key] = ctx

    async def step(self, key: str, msg: Msg) -> None:
        ctx = self._ctx[key]
        ctx.merge({"messages": [msg]})
        await self._commit(ctx)

    async def stored_bytes(self, key: str) -> int:
        return sum(h.size for h in await self.s.history(key))

    async def history_stats(self, key: str, upto: int | None = None) -> dict[str, int]:
        hist = await self.s.history(key)
        if upto is not None:
            hist = [h for h in hist if h.version <= upto]
        return {
            "versions": len(hist),
            "full_rows": sum(1 for h in hist if h.kind == "full"),
            "bytes": sum(h.size for h in hist),
        }

    async def delete(self, key: str) -> None:
        self._ctx.pop(key, None)
        self.live.discard(key)
        await self.s.delete(key)


class Floor(Subject):
    """Serialise once with ormsgpack + one round trip of the bytes; nothing else."""

    label = "floor"
    detail = ""

    async def save(self, prepared: Any) -> None:
        key, messages = prepared
        self.live.add(key)
        await self.put(key, ormsgpack.packb({"messages": messages}))

    async def load(self, key: str) -> int:
        data = await self.get(key)
        return len(ormsgpack.unpackb(data)["messages"])

    async def load_fresh(self, key: str) -> int:
        """:meth:`load` as another process would do it (the floor of a fresh store's load)."""
        return len(ormsgpack.unpackb(await self.get_fresh(key))["messages"])

    async def get_fresh(self, key: str) -> bytes:
        """On a server any connection reads alike; an embedded file differs (below)."""
        return await self.get(key)

    async def stored_bytes(self, key: str) -> int:
        return len(await self.get(key))

    async def delete(self, key: str) -> None:
        self.live.discard(key)
        await self.remove(key)

    @abc.abstractmethod
    async def put(self, key: str, data: bytes) -> None: ...

    @abc.abstractmethod
    async def get(self, key: str) -> bytes: ...

    @abc.abstractmethod
    async def remove(self, key: str) -> None: ...

    async def server_facts(self) -> str:
        return ""


class MemoryFloor(Floor):
    detail = "ormsgpack packb / unpackb of the state (no I/O)"

    def __init__(self) -> None:
        super().__init__()
        self._d: dict[str, bytes] = {}

    async def open(self) -> None:
        return None

    async def put(self, key: str, data: bytes) -> None:
        self._d[key] = data

    async def get(self, key: str) -> bytes:
        return self._d[key]

    async def remove(self, key: str) -> None:
        self._d.pop(key, None)


class SqliteFloor(Floor):
    detail = "INSERT a BLOB in a scratch DB file (WAL, synchronous=FULL, secure_delete=FAST), SELECT it back"

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._c: sqlite3.Connection | None = None
        self._c2: sqlite3.Connection | None = None

    @property
    def c(self) -> sqlite3.Connection:
        assert self._c is not None
        return self._c

    async def open(self) -> None:
        self._c = sqlite3.connect(self.path, isolation_level=None)
        self.c.execute("PRAGMA journal_mode = WAL")
        self.c.execute("PRAGMA synchronous = FULL")
        # as tether's store sets it: with Debian's default (ON) every removed blob is rewritten
        self.c.execute("PRAGMA secure_delete = FAST")
        self.c.execute("CREATE TABLE IF NOT EXISTS bench_floor (k TEXT PRIMARY KEY, v BLOB NOT NULL)")
        self._c2 = sqlite3.connect(self.path, isolation_level=None)

    async def close(self) -> None:
        await super().close()
        if self._c2 is not None:
            self._c2.close()
            self._c2 = None
        if self._c is not None:
            self._c.execute("DROP TABLE IF EXISTS bench_floor")
            self._c.close()
            self._c = None

    async def put(self, key: str, data: bytes) -> None:
        self.c.execute("INSERT INTO bench_floor (k, v) VALUES (?, ?)", (key, data))

    async def get(self, key: str) -> bytes:
        row = self.c.execute("SELECT v FROM bench_floor WHERE k = ?", (key,)).fetchone()
        return bytes(row[0])

    async def get_fresh(self, key: str) -> bytes:
        # a second connection: its page cache is stale once the first one has written
        assert self._c2 is not None
        row = self._c2.execute("SELECT v FROM bench_floor WHERE k = ?", (key,)).fetchone()
        return bytes(row[0])

    async def remove(self, key: str) -> None:
        self.c.execute("DELETE FROM bench_floor WHERE k = ?", (key,))

    async def server_facts(self) -> str:
        return f"sqlite {sqlite3.sqlite_version}"


class PgFloor(Floor):
    detail = "psycopg3 async, binary: INSERT a bytea (lz4 column, as tether's) / SELECT it"

    def __init__(self, url: str, tag: str) -> None:
        super().__init__()
        self.url = url
        self.table = f"bench_floor_{tag}"
        self._c: Any = None

    async def open(self) -> None:
        import psycopg

        self._c = await psycopg.AsyncConnection.connect(self.url, autocommit=True, connect_timeout=5)
        await self._c.execute(f"CREATE TABLE {self.table} (k TEXT PRIMARY KEY, v BYTEA NOT NULL)")
        with contextlib.suppress(Exception):
            await self._c.execute(f"ALTER TABLE {self.table} ALTER COLUMN v SET COMPRESSION lz4")

    async def close(self) -> None:
        await super().close()
        if self._c is not None:
            with contextlib.suppress(Exception):
                await self._c.execute(f"DROP TABLE IF EXISTS {self.table}")
            await self._c.close()
            self._c = None

    async def put(self, key: str, data: bytes) -> None:
        await self._c.execute(f"INSERT INTO {self.table} (k, v) VALUES (%s, %b)", (key, data))

    async def get(self, key: str) -> bytes:
        cur = await self._c.execute(f"SELECT v FROM {self.table} WHERE k = %s", (key,), binary=True)
        row = await cur.fetchone()
        return bytes(row[0])

    async def remove(self, key: str) -> None:
        await self._c.execute(f"DELETE FROM {self.table} WHERE k = %s", (key,))

    async def server_facts(self) -> str:
        cur = await self._c.execute("SHOW server_version")
        version = (await cur.fetchone())[0]
        cur = await self._c.execute("SHOW synchronous_commit")
        sync = (await cur.fetchone())[0]
        return f"PostgreSQL {version} (synchronous_commit={sync})"


class MyFloor(Floor):
    detail = "asyncmy: INSERT a LONGBLOB (InnoDB) / SELECT it"

    def __init__(self, url: str, tag: str) -> None:
        super().__init__()
        parts = urlsplit(url)
        self.params: dict[str, Any] = {
            "host": parts.hostname or "127.0.0.1",
            "port": parts.port or 3306,
            "user": parts.username or "root",
            "password": parts.password or "",
            "db": parts.path.lstrip("/") or "test",
            "autocommit": True,
            "connect_timeout": 5,
        }
        self.table = f"bench_floor_{tag}"
        self._c: Any = None

    async def _run(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        async with self._c.cursor() as cur:
            await cur.execute(sql, params)
            return await cur.fetchall()

    async def open(self) -> None:
        import asyncmy

        self._c = await asyncmy.connect(**self.params)
        await self._run(
            f"CREATE TABLE {self.table} (k VARCHAR(100) PRIMARY KEY, v LONGBLOB NOT NULL) ENGINE=InnoDB"
        )

    async def close(self) -> None:
        await super().close()
        if self._c is not None:
            with contextlib.suppress(Exception):
                await self._run(f"DROP TABLE IF EXISTS {self.table}")
            self._c.close()
            self._c = None

    async def put(self, key: str, data: bytes) -> None:
        await self._run(f"INSERT INTO {self.table} (k, v) VALUES (%s, %s)", (key, data))

    async def get(self, key: str) -> bytes:
        rows = await self._run(f"SELECT v FROM {self.table} WHERE k = %s", (key,))
        return bytes(rows[0][0])

    async def remove(self, key: str) -> None:
        await self._run(f"DELETE FROM {self.table} WHERE k = %s", (key,))

    async def server_facts(self) -> str:
        rows = await self._run("SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@max_allowed_packet")
        v, flush, packet = rows[0]
        return f"MariaDB/MySQL {v} (innodb_flush_log_at_trx_commit={flush}, max_allowed_packet={packet})"


class RedisFloor(Floor):
    detail = "redis.asyncio: SET / GET of the bytes"

    def __init__(self, url: str, tag: str) -> None:
        super().__init__()
        self.url = url
        self.prefix = f"bench:floor:{tag}:"
        self._r: Any = None

    async def open(self) -> None:
        import redis.asyncio as aioredis

        self._r = aioredis.Redis.from_url(self.url, socket_connect_timeout=5)
        await self._r.ping()

    async def close(self) -> None:
        await super().close()
        if self._r is not None:
            await self._r.aclose()
            self._r = None

    async def put(self, key: str, data: bytes) -> None:
        await self._r.set(self.prefix + key, data)

    async def get(self, key: str) -> bytes:
        data = await self._r.get(self.prefix + key)
        return bytes(data)

    async def remove(self, key: str) -> None:
        await self._r.delete(self.prefix + key)

    async def server_facts(self) -> str:
        info = await self._r.info("server")
        facts = f"Redis {info.get('redis_version')}"
        with contextlib.suppress(Exception):
            aof = (await self._r.config_get("appendonly")).get("appendonly")
            fsync = (await self._r.config_get("appendfsync")).get("appendfsync")
            save = (await self._r.config_get("save")).get("save")
            facts += f" (appendonly={aof}, appendfsync={fsync}, save={save!r})"
        return facts


class TieredFloor(Floor):
    """Redis SET + SQL INSERT (what a write-through tier must do); load = Redis GET."""

    def __init__(self, primary: Floor, durable: Floor) -> None:
        super().__init__()
        self.primary = primary
        self.durable = durable
        self.detail = f"save: Redis SET then SQL INSERT; load: Redis GET ({durable.detail})"

    async def open(self) -> None:
        await self.primary.open()
        await self.durable.open()

    async def close(self) -> None:
        await super().close()
        await self.primary.close()
        await self.durable.close()

    async def put(self, key: str, data: bytes) -> None:
        await self.primary.put(key, data)
        await self.durable.put(key, data)

    async def get(self, key: str) -> bytes:
        return await self.primary.get(key)

    async def remove(self, key: str) -> None:
        await self.primary.remove(key)
        await self.durable.remove(key)

    async def server_facts(self) -> str:
        return f"{await self.primary.server_facts()}; {await self.durable.server_facts()}"


@dataclass(slots=True)
class _Thread:
    messages: list[Msg] = field(default_factory=list)
    version: str | None = None
    step: int = -1
    config: dict[str, Any] | None = None


class LangGraphSubject(Subject):
    """A LangGraph saver storing the same list in a ``messages`` channel.

    Each checkpoint is a proper ``Checkpoint`` (from ``empty_checkpoint()``) whose
    ``channel_values`` hold the whole list and whose ``channel_versions`` bump the
    channel, exactly what a graph with an ``operator.add`` channel hands its saver
    after every step (plain dicts: LangGraph's best case; ``add_messages`` would
    build message objects, which decode far slower). Only ``aput`` is timed, not
    the graph around it nor ``aput_writes``.
    """

    def __init__(self, kind: str, target: str, tag: str) -> None:
        super().__init__()
        self.kind = kind
        self.target = target
        self.tag = tag
        self.saver: Any = None
        self.label = {
            "sqlite": "AsyncSqliteSaver",
            "postgresql": "AsyncPostgresSaver",
            "memory": "InMemorySaver",
        }[kind]
        self._threads: dict[str, _Thread] = {}
        self._stack = contextlib.AsyncExitStack()
        self._conn: Any = None
        self._schema = f"bench_lg_{tag}"

    async def open(self) -> None:
        from langgraph.checkpoint.base import empty_checkpoint
        from langgraph.checkpoint.base.id import uuid6

        self._empty = empty_checkpoint
        self._uuid6 = uuid6
        if self.kind == "sqlite":
            import aiosqlite
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            self._conn = await aiosqlite.connect(self.target)
            await self._conn.execute("PRAGMA journal_mode = WAL")
            await self._conn.execute("PRAGMA synchronous = FULL")
            # tether's pragma too: Debian's SQLite zeroes freed pages, and the section deletes
            # each run it saved, so with the build's default LangGraph's WAL would carry more
            await self._conn.execute("PRAGMA secure_delete = FAST")
            self.saver = AsyncSqliteSaver(self._conn)
            await self.saver.setup()
        elif self.kind == "postgresql":
            import psycopg
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

            # LangGraph's tables go to a scratch schema dropped at the end.
            async with await psycopg.AsyncConnection.connect(self.target, autocommit=True) as c:
                await c.execute(f"CREATE SCHEMA {self._schema}")
            sep = "&" if "?" in self.target else "?"
            url = f"{self.target}{sep}options=-csearch_path%3D{self._schema}"
            self.saver = await self._stack.enter_async_context(AsyncPostgresSaver.from_conn_string(url))
            await self.saver.setup()
        else:
            from langgraph.checkpoint.memory import InMemorySaver

            self.saver = InMemorySaver()

    async def close(self) -> None:
        await super().close()
        await self._stack.aclose()
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
        if self.kind == "postgresql":
            import psycopg

            with contextlib.suppress(Exception):
                async with await psycopg.AsyncConnection.connect(self.target, autocommit=True) as c:
                    await c.execute(f"DROP SCHEMA IF EXISTS {self._schema} CASCADE")

    async def _put(self, key: str, messages: list[Msg]) -> None:
        th = self._threads.setdefault(key, _Thread())
        version = self.saver.get_next_version(th.version, None)
        th.step += 1
        cp = self._empty()
        cp["id"] = str(self._uuid6(clock_seq=th.step))
        cp["channel_values"] = {"messages": messages}
        cp["channel_versions"] = {"messages": version}
        cp["versions_seen"] = {"agent": {"messages": th.version}} if th.version else {}
        cp["updated_channels"] = ["messages"]
        config: dict[str, Any] = th.config or {"configurable": {"thread_id": key, "checkpoint_ns": ""}}
        meta = {"source": "loop", "step": th.step, "parents": {}}
        th.config = await self.saver.aput(config, cp, meta, {"messages": version})
        th.version = version
        th.messages = messages

    async def save(self, prepared: Any) -> None:
        key, messages = prepared
        self.live.add(key)
        await self._put(key, list(messages))

    async def step(self, key: str, msg: Msg) -> None:
        th = self._threads[key]
        await self._put(key, th.messages + [msg])  # what an operator.add channel produces

    def forget(self, key: str) -> None:
        if key in self._threads:
            self._threads[key].messages = []

    async def load(self, key: str) -> int:
        tup = await self.saver.aget_tuple({"configurable": {"thread_id": key, "checkpoint_ns": ""}})
        assert tup is not None, key
        return len(tup.checkpoint["channel_values"]["messages"])

    async def stored_bytes(self, key: str) -> int:
        if self.kind == "sqlite":
            total = 0
            for sql in (
                "SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints "
                "WHERE thread_id = ?",
                "SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes WHERE thread_id = ?",
            ):
                async with self._conn.execute(sql, (key,)) as cur:
                    row = await cur.fetchone()
                    total += int(row[0])
            return total
        if self.kind == "postgresql":
            total = 0
            for sql in (
                "SELECT COALESCE(SUM(octet_length(blob)), 0) AS n FROM checkpoint_blobs WHERE thread_id = %s",
                "SELECT COALESCE(SUM(octet_length(checkpoint::text) + octet_length(metadata::text)), 0) "
                "AS n FROM checkpoints WHERE thread_id = %s",
                "SELECT COALESCE(SUM(octet_length(blob)), 0) AS n FROM checkpoint_writes "
                "WHERE thread_id = %s",
            ):
                cur = await self.saver.conn.execute(sql, (key,))
                row = await cur.fetchone()
                total += int(row["n"])
            return total
        blobs = sum(len(v[1]) for k, v in self.saver.blobs.items() if k[0] == key)
        cps = sum(
            len(c[1]) + len(m[1])
            for ns in self.saver.storage.get(key, {}).values()
            for c, m, _parent in ns.values()
        )
        return blobs + cps

    async def delete(self, key: str) -> None:
        self.live.discard(key)
        self._threads.pop(key, None)
        await self.saver.adelete_thread(key)


# == backends =========================================================================
@dataclass(slots=True)
class Backend:
    name: str
    url: str
    tether: TetherSubject
    floor: Floor
    lg: LangGraphSubject | None
    lg_note: str
    sqlite_path: Path | None = None
    facts: str = ""
    fresh: TetherSubject | None = None
    """A second store on the same URL that never wrote: loads as a resuming process does."""
    pg_schema: str = ""
    """PostgreSQL: the schema made for this run (dropped at the end)."""


def _tag() -> str:
    return f"{os.getpid()}_{uuid.uuid4().hex[:6]}"


def floor_for(name: str, cfg: Config, tag: str) -> Floor:
    urls = cfg.urls
    if name == "memory":
        return MemoryFloor()
    if name == "sqlite":
        return SqliteFloor(cfg.workdir / "floor.db")
    if name == "redis":
        return RedisFloor(urls["redis"], tag)
    if name == "postgresql":
        return PgFloor(urls["postgresql"], tag)
    if name == "mysql":
        return MyFloor(urls["mysql"], tag)
    if name == "tiered":
        parts = urlsplit(urls["tiered"])
        from urllib.parse import parse_qs

        sql = parse_qs(parts.query).get("sql", [urls["mysql"]])[0]
        redis_url = f"redis://{parts.netloc}{parts.path}"
        durable: Floor = PgFloor(sql, tag) if sql.startswith("postgres") else MyFloor(sql, tag)
        return TieredFloor(RedisFloor(redis_url, tag + "t"), durable)
    raise ValueError(name)


def langgraph_for(
    name: str, cfg: Config, tag: str, path: Path | None = None, url: str = ""
) -> tuple[LangGraphSubject | None, str]:
    if not cfg.langgraph:
        return None, "disabled (--no-langgraph)"
    package = {
        "sqlite": "langgraph-checkpoint-sqlite",
        "postgresql": "langgraph-checkpoint-postgres",
        "memory": "langgraph-checkpoint",
    }.get(name)
    if package is None:
        why = {
            "redis": "langgraph-checkpoint-redis needs RedisJSON + RediSearch (absent from plain Redis)",
            "mysql": "no LangGraph MySQL saver in the bench environment",
            "tiered": "LangGraph has no tiered saver",
        }
        return None, why.get(name, "no LangGraph saver")
    module = {
        "sqlite": "langgraph.checkpoint.sqlite.aio",
        "postgresql": "langgraph.checkpoint.postgres.aio",
        "memory": "langgraph.checkpoint.memory",
    }[name]
    try:
        __import__(module)
    except ImportError as exc:
        return None, f"{package} not installed ({exc.name})"
    target = str(path or cfg.workdir / "langgraph.db") if name == "sqlite" else url or cfg.urls.get(name, "")
    return LangGraphSubject(name, target, tag), ""


async def open_backend(name: str, cfg: Config) -> tuple[Backend | None, str]:
    tag = _tag()
    url, schema = cfg.urls[name], ""
    if name == "postgresql":
        try:
            schema, url = await _fresh_pg_schema(url, tag)
        except Exception as exc:
            return None, f"server unavailable: {type(exc).__name__}: {exc}"
    tether = TetherSubject(url)
    try:
        await tether.open()
    except Exception as exc:
        await tether.close()
        return None, f"tether store unavailable: {type(exc).__name__}: {exc}"
    floor = floor_for(name, cfg, tag)
    try:
        await asyncio.wait_for(floor.open(), 30)
        facts = await floor.server_facts()
    except Exception as exc:
        await tether.close()
        with contextlib.suppress(Exception):
            await floor.close()
        return None, f"raw floor unavailable: {type(exc).__name__}: {exc}"
    lg, note = langgraph_for(name, cfg, tag, url=url)
    if lg is not None:
        try:
            await asyncio.wait_for(lg.open(), 60)
        except Exception as exc:
            with contextlib.suppress(Exception):
                await lg.close()
            lg, note = None, f"LangGraph saver failed to open: {type(exc).__name__}: {exc}"
    path = cfg.workdir / "tether.db" if name == "sqlite" else None
    fresh = None
    if name != "memory":  # a memory store's data lives in its own object
        fresh = TetherSubject(url)
        fresh.label = "tether_fresh"
        await fresh.open()
    return Backend(name, url, tether, floor, lg, note, path, facts, fresh, schema), ""


async def close_backend(be: Backend) -> None:
    for subject in (be.tether, be.floor, be.lg, be.fresh):
        if subject is not None:
            with contextlib.suppress(Exception):
                await subject.close()
    if be.pg_schema:
        with contextlib.suppress(Exception):
            await _drop_pg_schema(be.url, be.pg_schema)


async def _fresh_pg_schema(url: str, tag: str) -> tuple[str, str]:
    """A new schema for this run's tables, and the URL that puts every subject in it.

    The floor writes to a table made for the run, while tether's and LangGraph's tables
    in the shared database carry the dead rows of earlier runs and of the test suite (the
    servers here run with autovacuum off), so every subject starts as empty as the floor.
    (This did not remove the spread of the growth run's chain loads, 1.2-2.9x the floor
    across runs of the same code, which shows in a fresh schema too.)"""
    import psycopg

    schema = f"tether_bench_{tag}"
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=5) as conn:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in url else "?"
    return schema, f"{url}{sep}options={quote(f'-c search_path={schema}')}"


async def _drop_pg_schema(url: str, schema: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=5) as conn:
        await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


# == measuring ========================================================================
_counter = 0


def new_key(prefix: str = "bench") -> str:
    global _counter
    _counter += 1
    return f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}-{_counter}"


async def timed(fn: Callable[..., Awaitable[Any]], *args: Any, collect: bool = True) -> tuple[float, Any]:
    if collect:
        gc.collect()
    t0 = time.perf_counter()
    out = await fn(*args)
    return (time.perf_counter() - t0) * 1000.0, out


async def interleaved_loads(
    cfg: Config, subject: tuple[Subject, str], floor: tuple[Subject, str], expect: int
) -> tuple[list[float], list[float]]:
    """``cfg.load_reps`` loads each of a subject's run and the floor's, alternating which
    goes first, so that noise from a shared host hits both alike."""
    times: dict[int, list[float]] = {0: [], 1: []}
    pair = (subject, floor)
    for rep in range(cfg.load_reps):
        for i in (0, 1) if rep % 2 == 0 else (1, 0):
            who, key = pair[i]
            t, got = await timed(who.load, key)
            if got != expect:
                raise AssertionError(f"{who.label} loaded {got} messages, expected {expect}")
            times[i].append(t)
    return times[0], times[1]


def _rotate(xs: list[Subject], n: int) -> list[Subject]:
    k = n % len(xs)
    return xs[k:] + xs[:k]


async def measure_latency(be: Backend, cfg: Config, data: Data) -> dict[str, Any]:
    """Section 1: save (full write of a new run) and load latest, per size."""
    out: dict[str, Any] = {}
    subjects: list[Subject] = [be.tether, be.floor] + ([be.lg] if be.lg else [])
    for size_name in cfg.sizes:
        msgs = data.states[size_name]
        res: dict[str, Any] = {"state_bytes": state_bytes(msgs), "messages": len(msgs)}
        saves: dict[str, list[float]] = {s.label: [] for s in subjects}
        loads: dict[str, list[float]] = {s.label: [] for s in subjects}
        fresh_loads: dict[str, list[float]] = {"tether": [], "floor": []}
        errors: dict[str, str] = {}
        for rep in range(-cfg.warmup, cfg.reps[size_name]):
            for s in _rotate(subjects, rep):
                if s.label in errors:
                    continue
                key = new_key()
                try:
                    prepared = s.prepare(key, msgs)
                    t_save, _ = await timed(s.save, prepared)
                    del prepared
                    s.forget(key)
                    t_load, n = await timed(s.load, key)
                    if n != len(msgs):
                        raise AssertionError(f"loaded {n} messages, saved {len(msgs)}")
                    fresh = be.fresh.load if s is be.tether and be.fresh else None
                    if s is be.floor and be.fresh:
                        fresh = be.floor.load_fresh
                    if fresh is not None:
                        t_fresh, n = await timed(fresh, key)
                        if n != len(msgs):
                            raise AssertionError(f"a fresh {s.label} loaded {n} messages, saved {len(msgs)}")
                        if rep >= 0:
                            fresh_loads[s.label].append(t_fresh)
                    await s.delete(key)
                except Exception as exc:
                    errors[s.label] = f"{type(exc).__name__}: {exc}"[:200]
                    with contextlib.suppress(Exception):
                        await s.delete(key)
                    continue
                if rep >= 0:
                    saves[s.label].append(t_save)
                    loads[s.label].append(t_load)
        for s in subjects:
            res[s.label] = {"save": summary(saves[s.label]), "load": summary(loads[s.label])}
            if s.label in errors:
                res[s.label]["error"] = errors[s.label]
        if fresh_loads["tether"]:
            res["tether"]["load_fresh"] = summary(fresh_loads["tether"])
            res["floor"]["load_fresh"] = summary(fresh_loads["floor"])
        out[size_name] = res
        print(f"  [{be.name}] latency {size_name} done", file=sys.stderr, flush=True)
    return out


async def measure_append(be: Backend, cfg: Config, data: Data) -> dict[str, Any]:
    """Section 2: N one-message append steps on a large run, then load latest."""
    base = data.states[cfg.append_base]
    steps = data.append_msgs[: cfg.append_steps]
    final = base + steps
    stepping: list[Subject] = [be.tether] + ([be.lg] if be.lg else [])
    keys = {s.label: new_key("append") for s in stepping}
    times: dict[str, list[float]] = {s.label: [] for s in stepping}
    floor_steps: list[float] = []
    errors: dict[str, str] = {}
    before: dict[str, int] = {}
    for s in stepping:
        try:
            await s.save(s.prepare(keys[s.label], base))
            before[s.label] = await s.stored_bytes(keys[s.label])
        except Exception as exc:
            errors[s.label] = f"{type(exc).__name__}: {exc}"[:200]
    for i, msg in enumerate(steps):
        for s in _rotate(stepping, i):
            if s.label in errors:
                continue
            try:
                t, _ = await timed(s.step, keys[s.label], msg)
                times[s.label].append(t)
            except Exception as exc:
                errors[s.label] = f"{type(exc).__name__}: {exc}"[:200]
        fkey = new_key("appendfloor")
        t, _ = await timed(be.floor.save, be.floor.prepare(fkey, [msg]))
        floor_steps.append(t)
        await be.floor.delete(fkey)
    res: dict[str, Any] = {
        "base": cfg.append_base,
        "base_bytes": state_bytes(base),
        "steps": len(steps),
        "message_bytes": cfg.append_msg,
        "final_bytes": state_bytes(final),
        "floor_step": summary(floor_steps),
    }
    fkey = new_key("appendfloor")
    await be.floor.save(be.floor.prepare(fkey, final))
    floor_loads: list[float] = []
    for s in stepping:
        entry: dict[str, Any] = {"step": summary(times[s.label])}
        if s.label not in errors:
            s.forget(keys[s.label])
            try:
                after = await s.stored_bytes(keys[s.label])
                entry["bytes_per_step"] = (after - before[s.label]) / max(1, len(steps))
                loads, beside = await interleaved_loads(cfg, (s, keys[s.label]), (be.floor, fkey), len(final))
                entry["load_after"] = summary(loads)
                if s is be.tether:
                    floor_loads = beside
            except Exception as exc:
                errors[s.label] = f"{type(exc).__name__}: {exc}"[:200]
        if s.label in errors:
            entry["error"] = errors[s.label]
        with contextlib.suppress(Exception):
            await s.delete(keys[s.label])
        res[s.label] = entry
    await be.floor.delete(fkey)
    res["floor_load_after"] = summary(floor_loads)
    print(f"  [{be.name}] append steps done", file=sys.stderr, flush=True)
    return res


def _sqlite_file_bytes(path: Path) -> int:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    total = 0
    for suffix in ("", "-wal"):
        p = Path(str(path) + suffix)
        if p.exists():
            total += p.stat().st_size
    return total


async def measure_growth(
    be: Backend, cfg: Config, every: list[Msg], msg_bytes: int, *, name: str = "growth"
) -> dict[str, Any]:
    """Section 3 (and 3c): an append-only run of ``growth_steps`` commits of ``every``'s
    messages; bytes stored vs state. LangGraph runs beside it in section 3 only."""
    msgs = every[: cfg.growth_steps]
    n = len(msgs)
    # SQLite gets fresh files so that the file size is this run's alone.
    tether = be.tether
    own_tether = None
    if be.name == "sqlite":
        own_tether = TetherSubject(sqlite_url(cfg.workdir / f"{name}-tether.db", cfg.sqlite_options))
        await own_tether.open()
        tether = own_tether
    key = new_key(name)
    lg_steps = min(cfg.lg_growth_steps, n)
    res: dict[str, Any] = {"steps": n, "message_bytes": msg_bytes}
    try:
        await tether.save(tether.prepare(key, msgs[:1]))
        step_times: list[float] = []
        t_start = time.perf_counter()
        for msg in msgs[1:]:
            t, _ = await timed(tether.step, key, msg, collect=False)
            step_times.append(t)
        res["total_s"] = time.perf_counter() - t_start
        final_bytes = state_bytes(msgs)
        stats = await tether.history_stats(key)
        res["final_state_bytes"] = final_bytes
        res["tether"] = {
            "step": summary(step_times),
            **stats,
            "ratio": stats["bytes"] / final_bytes,
        }
        if own_tether is not None:
            fb = _sqlite_file_bytes(cfg.workdir / f"{name}-tether.db")
            res["tether"]["sqlite_file_bytes"] = fb
            res["tether"]["sqlite_file_ratio"] = fb / final_bytes
        fkey = new_key("growthfloor")
        await be.floor.save(be.floor.prepare(fkey, msgs))
        tether.forget(key)  # as in sections 1 and 2: the writer's live copy is not the load's
        loads, floor_loads = await interleaved_loads(cfg, (tether, key), (be.floor, fkey), n)
        await be.floor.delete(fkey)
        res["tether"]["load_final"] = summary(loads)
        res["floor_load_final"] = summary(floor_loads)
        # LangGraph: the first lg_steps steps of the same run (it rewrites the whole list
        # every step, so 1,000 steps would write gigabytes), plus an extrapolation.
        res["tether"]["prefix"] = {
            "steps": lg_steps,
            "step": summary(step_times[: lg_steps - 1]),
            **(await tether.history_stats(key, upto=lg_steps)),
        }
        # One commit more: shows where the compaction policy writes its next full state
        # (by a context read back from the store, untimed, as a resuming process has it).
        await tether.resume(key)
        t_next, _ = await timed(tether.step, key, every[n])
        after = await tether.history_stats(key)
        res["tether"]["next"] = {
            **after,
            "step_ms": t_next,
            "ratio": after["bytes"] / state_bytes(every[: n + 1]),
        }
    finally:
        with contextlib.suppress(Exception):
            await tether.delete(key)
        if own_tether is not None:
            await own_tether.close()
    if be.lg is not None and name == "growth":
        res["langgraph"] = await _lg_growth(be, cfg, msgs, lg_steps)
    print(f"  [{be.name}] {name} run done", file=sys.stderr, flush=True)
    return res


async def _lg_growth(be: Backend, cfg: Config, msgs: list[Msg], lg_steps: int) -> dict[str, Any]:
    assert be.lg is not None
    lg = be.lg
    own = None
    if be.name == "sqlite":
        own, _ = langgraph_for("sqlite", cfg, _tag(), cfg.workdir / "growth-langgraph.db")
        assert own is not None
        await own.open()
        lg = own
    key = new_key("lggrowth")
    out: dict[str, Any] = {"label": lg.label, "steps": lg_steps}
    try:
        await lg.save(lg.prepare(key, msgs[:1]))
        times = []
        for msg in msgs[1:lg_steps]:
            t, _ = await timed(lg.step, key, msg, collect=False)
            times.append(t)
        measured = await lg.stored_bytes(key)
        out["step"] = summary(times)
        out["bytes"] = measured
        # Each LangGraph checkpoint holds the whole list: bytes grow with the sum of
        # the state sizes after every step. Scale the measured bytes by that sum.
        sizes = _prefix_state_sizes(msgs)
        out["extrapolated_steps"] = len(msgs)
        out["extrapolated_bytes"] = measured * sum(sizes) / sum(sizes[:lg_steps])
        if own is not None:
            await own.close()
            out["sqlite_file_bytes"] = _sqlite_file_bytes(cfg.workdir / "growth-langgraph.db")
            own = None
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        if own is not None:
            await own.close()
        else:
            with contextlib.suppress(Exception):
                await lg.delete(key)
    return out


def _prefix_state_sizes(msgs: list[Msg]) -> list[int]:
    base = state_bytes([])
    sizes, total = [], base
    for m in msgs:
        total += _packed(m)
        sizes.append(total)
    return sizes


# == reporting ========================================================================
def _m(d: dict[str, Any] | None, op: str, stat: str = "median_ms") -> float:
    if not d or op not in d:
        return math.nan
    v = d[op].get(stat)
    return math.nan if v is None else float(v)


class Targets:
    """Every row checked against its target, recorded in the harness report: the summary at
    the end says, per row, in how many runs it held (met in two thirds of them). The tables
    print each verdict, so the report prints no line of its own."""

    def __init__(self, rep: Report) -> None:
        self.rep = rep

    def add(self, target: str, backend: str, row: str, value: float, *, goal: float, unit: str = "x") -> str:
        if isinstance(value, float) and math.isnan(value):
            return "-"  # the row did not run (its error is in the table)
        ok = self.rep.target(f"{backend} {row}: {target}", value, goal=goal, unit=unit, echo=False)
        return "met" if ok else "NOT met"

    def faster(self, backend: str, saver: str, row: str, value: float) -> None:
        """tether / LangGraph's saver below 1; ``InMemorySaver``'s rows are printed for
        reference only (see ``NAMED_SAVERS``)."""
        if backend in NAMED_SAVERS and not math.isnan(value):
            self.rep.target(f"{backend} {row}: tether / {saver}", value, goal=1.0, op="<", echo=False)


def _report_latency(ran: dict[str, Any], tg: Targets) -> None:
    rows, lg_rows = [], []
    for name, r in ran.items():
        for size, x in r.get("latency", {}).items():
            t, f = x.get("tether"), x.get("floor")
            rl = ratio(_m(t, "load"), _m(f, "load"))
            verdict = tg.add("load / floor", name, size, rl, goal=LOAD_TARGET)
            rows.append(
                [name, size, fbytes(x["state_bytes"]), str(t["save"]["n"] if t else 0)]
                + [fms(_m(t, "save")), fms(_m(t, "save", "p95_ms")), fms(_m(f, "save"))]
                + [fx(ratio(_m(t, "save"), _m(f, "save")))]
                + [fms(_m(t, "load")), fms(_m(t, "load", "p95_ms")), fms(_m(f, "load")), fx(rl), verdict]
                + [fx(ratio(_m(t, "load_fresh"), _m(f, "load_fresh")))]
            )
            lg_label = r.get("langgraph")
            if not lg_label:
                continue
            g = x.get(lg_label)
            rs, rl2 = ratio(_m(t, "save"), _m(g, "save")), ratio(_m(t, "load"), _m(g, "load"))
            tg.faster(name, lg_label, f"save {size}", rs)
            tg.faster(name, lg_label, f"load {size}", rl2)
            lg_rows.append(
                [name, size, lg_label, fms(_m(g, "save")), fms(_m(g, "save", "p95_ms"))]
                + [fms(_m(g, "load")), fms(_m(g, "load", "p95_ms")), fx(rs), fx(rl2)]
                + [(g or {}).get("error", "")[:60]]
            )
    table(
        "== 1. Save (commit of a new run) and load latest, vs the raw floor (ms) ==",
        ["backend", "size", "state", "reps", "save", "p95", "floor", "save/fl"]
        + ["load", "p95", "floor", "load/fl", "<=1.5x", "fresh/fl"],
        rows,
        [
            "save/load: medians over reps (p95 beside); floor = ormsgpack serialise (save) or deserialise",
            "(load) of the same state + one write or read of those bytes on the same server (notes below).",
            "fresh/fl: the same load by a second store on the same URL that never saw the run (what a",
            "resuming process does: no remembered chain size or Redis hint), against the floor's read",
            "on a second connection (the same read on a server; SQLite's page cache is per connection).",
        ],
    )
    table(
        "== 1b. The same save/load with LangGraph's saver (ms; tether/LG below 1 = tether faster) ==",
        ["backend", "size", "saver", "LG save", "p95", "LG load", "p95", "t/LG save", "t/LG load", "error"],
        lg_rows,
    )


def _report_append(ran: dict[str, Any], tg: Targets, cfg: Config) -> None:
    rows, lg_rows = [], []
    for name, r in ran.items():
        a = r.get("append")
        if not a:
            continue
        t = a.get("tether", {})
        step = _m(t, "step")
        if name in APPEND_TARGET_BACKENDS and a["base"] == "10MB":
            verdict = tg.add("append step median", name, "10MB", step, goal=APPEND_TARGET_MS, unit="ms")
        else:
            verdict = "(info)"
        rl = ratio(_m(t, "load_after"), _m(a, "floor_load_after"))
        tg.add("load / floor", name, f"after {a['steps']} appends", rl, goal=LOAD_TARGET)
        rows.append(
            [name, fbytes(a["base_bytes"]), str(a["steps"]), fms(step), fms(_m(t, "step", "p95_ms"))]
            + [fms(_m(a, "floor_step")), fbytes(t.get("bytes_per_step"))]
            + [fms(_m(t, "load_after")), fms(_m(a, "floor_load_after")), fx(rl), verdict]
        )
        lg_label = r.get("langgraph")
        if lg_label and lg_label in a:
            g = a[lg_label]
            rs, rl2 = ratio(step, _m(g, "step")), ratio(_m(t, "load_after"), _m(g, "load_after"))
            tg.faster(name, lg_label, "append step", rs)
            tg.faster(name, lg_label, "load after appends", rl2)
            lg_rows.append(
                [name, lg_label, fms(_m(g, "step")), fms(_m(g, "step", "p95_ms"))]
                + [fbytes(g.get("bytes_per_step")), fms(_m(g, "load_after")), fx(rs), fx(rl2)]
                + [g.get("error", "")[:60]]
            )
    table(
        f"== 2. Append step: one ~{fbytes(cfg.append_msg)} message appended + commit, "
        f"on a {cfg.append_base} run (ms) ==",
        ["backend", "base", "steps", "step", "p95", "floor 1msg", "bytes/step"]
        + ["load after", "floor", "load/fl", "<=5ms"],
        rows,
        [
            "step = ctx.merge({'messages': [msg]}) + store.commit(ctx); floor 1msg = the raw floor's save",
            "of a one-message state; bytes/step = bytes stored per step; load after = load latest after.",
        ],
    )
    table(
        "== 2b. The same append steps with LangGraph's saver (it rewrites the whole list every step) ==",
        ["backend", "saver", "LG step", "p95", "bytes/step", "LG load after", "t/LG step", "t/LG load"]
        + ["error"],
        lg_rows,
    )


def _report_growth(ran: dict[str, Any], tg: Targets, cfg: Config, section: str = "growth") -> None:
    rows, lg_rows = [], []
    small = section == "small"
    for name, r in ran.items():
        g = r.get(section)
        if not g or "tether" not in g:
            continue
        t = g["tether"]
        run_row = f"{section} {g['steps']} steps"
        verdict = tg.add("stored bytes / state", name, run_row, t["ratio"], goal=GROWTH_TARGET)
        rl = ratio(_m(t, "load_final"), _m(g, "floor_load_final"))
        tg.add("load / floor", name, f"end of {run_row}", rl, goal=LOAD_TARGET)
        file_part = "-"
        if "sqlite_file_bytes" in t:
            file_ok = tg.add("SQLite file / state", name, run_row, t["sqlite_file_ratio"], goal=FILE_TARGET)
            file_part = f"{fbytes(t['sqlite_file_bytes'])} ({fx(t['sqlite_file_ratio'])}, {file_ok})"
        nxt = t.get("next")
        next_part = f"{fx(nxt['ratio'])} ({nxt['full_rows']} full, {fms(nxt['step_ms'])} ms)" if nxt else "-"
        rows.append(
            [name, str(g["steps"]), fbytes(g["final_state_bytes"]), f"{t['versions']}/{t['full_rows']}"]
            + [
                fbytes(t["bytes"]),
                fx(t["ratio"]),
                file_part,
                fms(_m(t, "step")),
                fms(_m(t, "step", "p95_ms")),
            ]
            + [fms(_m(t, "load_final")), fms(_m(g, "floor_load_final")), fx(rl), verdict, next_part]
        )
        lgr = g.get("langgraph")
        if not lgr:
            continue
        if "error" in lgr:
            lg_rows.append([name, lgr["label"], str(lgr["steps"])] + ["-"] * 7 + [lgr["error"][:60]])
            continue
        pre = t["prefix"]
        rs = ratio(_m(pre, "step"), _m(lgr, "step"))
        tg.faster(name, lgr["label"], f"growth step (first {lgr['steps']})", rs)
        lg_file = fbytes(lgr["sqlite_file_bytes"]) if "sqlite_file_bytes" in lgr else "-"
        lg_rows.append(
            [name, lgr["label"], str(lgr["steps"]), fbytes(pre["bytes"]), fbytes(lgr["bytes"]), lg_file]
            + [fx(ratio(pre["bytes"], lgr["bytes"])), fms(_m(pre, "step")), fms(_m(lgr, "step")), fx(rs)]
            + [f"{fbytes(lgr['extrapolated_bytes'])} (tether measured: {fbytes(t['bytes'])})"]
        )
    number, msg = ("3c", SMALL_MSG) if small else ("3", cfg.growth_msg)
    table(
        f"== {number}. Storage growth: append-only run of {cfg.growth_steps} commits, one ~{fbytes(msg)} "
        "message each (the first creates the run) ==",
        ["backend", "steps", "final state", "versions/full", "stored", "stored/state", "sqlite file"]
        + ["step", "p95", "load final", "floor", "load/fl", "<=2x", "one commit later"],
        rows,
        [
            "stored = sum of history() sizes (payload bytes); sqlite file = a file holding only this run,",
            "after a WAL checkpoint (TRUNCATE); step times here are taken without a collection before each.",
            "one commit later = stored/state after one more commit (full rows then, and that commit's time):",
            "where the compaction policy writes its next full state.",
        ]
        + (
            ["3c: small steps, a chain's hard case (a load pays per row); no LangGraph run."] if small else []
        ),
    )
    if small:
        return
    table(
        "== 3b. LangGraph on the first steps of the same run (measured), EXTRAPOLATED to the whole run ==",
        ["backend", "saver", "steps", "tether bytes", "LG bytes", "LG file", "t/LG bytes", "tether step"]
        + ["LG step", "t/LG step", f"LG bytes EXTRAPOLATED to {cfg.growth_steps} steps"],
        lg_rows,
        [
            "EXTRAPOLATED, not measured: LangGraph stores the whole list in every checkpoint, so its bytes",
            "scale with the sum of the state sizes after each step; measured bytes are scaled by that sum.",
        ],
    )


def report(results: dict[str, Any], cfg: Config, rep: Report, *, facts: bool) -> None:
    """One run's tables, each row's target recorded in ``rep``; ``facts`` adds what each
    floor, server and saver is (the same every run: printed after the first)."""
    backends: dict[str, Any] = results["backends"]
    ran = {k: v for k, v in backends.items() if "skipped" not in v}
    tg = Targets(rep)
    if "latency" in cfg.sections:
        _report_latency(ran, tg)
    if "append" in cfg.sections:
        _report_append(ran, tg, cfg)
    if "growth" in cfg.sections:
        _report_growth(ran, tg, cfg)
    if "small" in cfg.sections:
        _report_growth(ran, tg, cfg, "small")
    print()
    print("Floors, servers and savers:" if facts else "Backends:")
    for name, r in backends.items():
        if "skipped" in r:
            print(f"  {name:<10} SKIPPED: {r['skipped']}")
            continue
        if facts:
            print(f"  {name:<10} floor: {r['floor']}")
            print(f"  {'':<10} server: {r['facts'] or '-'}")
            print(f"  {'':<10} url: {r['url']}")
            print(f"  {'':<10} LangGraph: {r.get('langgraph') or 'n/a: ' + r.get('langgraph_note', '')}")
        else:
            print(f"  {name:<10} ran in {r.get('seconds', 0):.0f} s")
        if "error" in r:
            print(f"  {'':<10} FAILED: {r['error']}")
    sys.stdout.flush()


# == main =============================================================================
def machine_facts() -> dict[str, Any]:
    versions: dict[str, str] = {}
    from importlib import metadata

    dists = ("tether", "ormsgpack", "psycopg", "asyncmy", "redis", "langgraph", "langgraph-checkpoint")
    for dist in (*dists, "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[dist] = metadata.version(dist)
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count() or 0
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": affinity,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "sqlite": sqlite3.sqlite_version,
        "packages": versions,
    }


async def run_backend(name: str, cfg: Config, data: Data) -> dict[str, Any]:
    """Every section on one backend, opened fresh for the run and closed after it."""
    print(f"[{name}] opening...", file=sys.stderr, flush=True)
    be, why = await open_backend(name, cfg)
    if be is None:
        print(f"[{name}] SKIPPED: {why}", file=sys.stderr, flush=True)
        return {"skipped": why}
    entry: dict[str, Any] = {
        "url": be.url,
        "floor": be.floor.detail,
        "facts": be.facts,
        "langgraph": be.lg.label if be.lg else None,
        "langgraph_note": be.lg_note,
    }
    started = time.perf_counter()
    try:
        if "latency" in cfg.sections:
            entry["latency"] = await measure_latency(be, cfg, data)
        if "append" in cfg.sections:
            entry["append"] = await measure_append(be, cfg, data)
        if "growth" in cfg.sections:
            entry["growth"] = await measure_growth(be, cfg, data.growth_msgs, cfg.growth_msg)
        if "small" in cfg.sections:
            entry["small"] = await measure_growth(be, cfg, data.small_msgs, SMALL_MSG, name="small")
    except Exception as exc:
        entry["error"] = f"{type(exc).__name__}: {exc}"
        print(f"[{name}] FAILED: {entry['error']}", file=sys.stderr, flush=True)
    finally:
        await close_backend(be)
    entry["seconds"] = time.perf_counter() - started
    print(f"[{name}] done in {entry['seconds']:.0f} s", file=sys.stderr, flush=True)
    return entry


async def run(cfg: Config, names: list[str], json_path: str | None) -> int:
    rep = Report("bench_stores", "checkpoint stores against their floor and LangGraph's savers")
    facts = machine_facts()
    print(
        f"# machine: {facts['cpu_count']} CPUs ({facts['cpus_usable']} usable), {facts['platform']}, "
        f"SQLite {facts['sqlite']}"
    )
    print("# packages: " + ", ".join(f"{k} {v}" for k, v in facts["packages"].items()))
    print(
        f"# mode: {'quick' if cfg.quick else 'full'}; {cfg.runs} run(s); sizes {', '.join(cfg.sizes)}; reps "
        f"{', '.join(f'{k}:{v}' for k, v in cfg.reps.items())} (+{cfg.warmup} warm-up); append "
        f"{cfg.append_steps} x {fbytes(cfg.append_msg)} on {cfg.append_base}; growth {cfg.growth_steps} x "
        f"{fbytes(cfg.growth_msg)} (LangGraph: first {cfg.lg_growth_steps}); work dir {cfg.workdir}"
    )
    t0 = time.perf_counter()
    data = make_data(cfg)
    print(
        f"# data (corpus, seed {cfg.seed}): generated in {time.perf_counter() - t0:.1f} s; "
        + ", ".join(f"{k}={fbytes(state_bytes(v))}/{len(v)} msgs" for k, v in data.states.items())
    )
    sys.stdout.flush()
    runs: list[dict[str, Any]] = []
    for i in rep.runs(cfg.runs):
        results: dict[str, Any] = {"run": i, "backends": {}}
        for name in names:
            results["backends"][name] = await run_backend(name, cfg, data)
        report(results, cfg, rep, facts=i == 1)
        runs.append(results)
    rep.finish()
    if json_path:
        out = {"header": rep.header, "machine": facts, "config": _config_json(cfg), "runs": runs}
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(out, indent=1, default=str, allow_nan=True))
        print(f"# numbers (every sample) written to {json_path}")
    return 0


def _config_json(cfg: Config) -> dict[str, Any]:
    return {
        "quick": cfg.quick,
        "sizes": cfg.sizes,
        "reps": cfg.reps,
        "warmup": cfg.warmup,
        "append_base": cfg.append_base,
        "append_steps": cfg.append_steps,
        "append_msg_bytes": cfg.append_msg,
        "growth_steps": cfg.growth_steps,
        "growth_msg_bytes": cfg.growth_msg,
        "langgraph_growth_steps": cfg.lg_growth_steps,
        "load_reps": cfg.load_reps,
        "seed": cfg.seed,
        "runs": cfg.runs,
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    every = ",".join(DEFAULT_URLS)
    p.add_argument("--backends", default=every, help=f"comma-separated, from {every} (default: all)")
    p.add_argument("--quick", action="store_true", help="smoke run: fewer reps, sizes up to 1 MB")
    p.add_argument("--runs", type=int, default=0, help="repeats (default 3; 1 with --quick)")
    p.add_argument("--json", metavar="PATH", help="write every number (with raw samples) as JSON")
    p.add_argument("--sizes", default="", help="subset of 1KB,100KB,1MB,10MB for section 1")
    p.add_argument(
        "--sections",
        default="",
        help="subset of latency,append,growth,small (default: all; --quick: all but small, whose "
        "1 KB steps its growth run already takes)",
    )
    p.add_argument("--no-langgraph", action="store_true", help="skip LangGraph's savers")
    p.add_argument("--append-steps", type=int, default=0, help="append steps (default 100; quick 15)")
    p.add_argument("--growth-steps", type=int, default=0, help="growth-run commits (default 1000; quick 150)")
    p.add_argument(
        "--growth-msg", type=int, default=0, help="bytes per growth-run message (default 10240; quick 1024)"
    )
    p.add_argument(
        "--lg-growth-steps", type=int, default=0, help="LangGraph growth steps (default 100; quick 20)"
    )
    p.add_argument("--dir", help="directory for SQLite files (default: a fresh temporary one)")
    p.add_argument(
        "--sqlite-options",
        default="",
        help="query string for tether's SQLite URL, for A/B runs (e.g. checkpoint_bytes=4194304)",
    )
    for name in ("redis", "postgresql", "mysql", "tiered"):
        p.add_argument(f"--{name}-url", default="", help="default " + DEFAULT_URLS[name].replace("%", "%%"))
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    names: list[str] = []
    for raw in args.backends.split(","):
        n = ALIASES.get(raw.strip().lower(), raw.strip().lower())
        if not n:
            continue
        if n not in DEFAULT_URLS:
            print(f"unknown backend {raw!r}; known: {', '.join(DEFAULT_URLS)}", file=sys.stderr)
            return 2
        if n not in names:
            names.append(n)
    workdir = Path(tempfile.mkdtemp(prefix="tether-bench-", dir=args.dir))
    try:
        cfg = make_config(args, workdir)
        return asyncio.run(run(cfg, names, args.json))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
