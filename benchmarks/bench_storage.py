#!/usr/bin/env python
"""Stored bytes over a run's whole history against its final state, and what a load of
the latest state costs against its floor.

    .venv/bin/python benchmarks/bench_storage.py            # 1,000 and 10,000 commits, 3 runs
    .venv/bin/python benchmarks/bench_storage.py --full     # and 100,000 commits (minutes)
    .venv/bin/python benchmarks/bench_storage.py --quick    # 1,000 commits, 1 run

Every case runs on a fresh SQLite file (the embedded default) and keeps every version
loadable (nothing is pruned). Data come from the seeded corpus (``corpus.py``): chat
messages of varied prose, tool calls and tool results (JSON rows, logs, code).

1. **Appends**: a run that appends one message per commit, N commits. Printed: the payload
   bytes of every version in its history over the final state's own MessagePack bytes
   (target <= 2x), the SQLite file (database + WAL after a checkpoint) over the final state
   (target <= 2.5x), and the load of the final version against its floor.
2. **Orchestration**: a real ``Orchestrator`` run of 200 MAIN iterations on SQLite (TEST,
   DEV and REVIEW write reports of realistic size; MAIN's reasons are varied prose): stored
   bytes over the final state (target <= 1.3x) and the file (target <= 2.5x).
3. **Agent run**: ``AgentLoop`` with a scripted model, 200 iterations of shell commands
   whose output is seeded tool output, under an 8k budget: the same two ratios.
4. **Loads at 100 KB and 1 MB**: a run grown by appends to that size, its latest state
   loaded by ``store.load`` (a long-lived store, as a server holds one), interleaved with
   its floor (target <= 1.5x).

The floor of a load: the same state's MessagePack bytes, stored as one row of a table in a
database file opened with the same settings as the store's (WAL, memory map, page cache),
read with one ``SELECT`` and decoded by ``ormsgpack`` with the cyclic collector paused for
big bodies (the fastest decode measured here: ``bench_decode_gc.py``). Anything tether
does beyond that (its statement, the payload's integrity check, the head, replaying the
chain's rows, building the ``Checkpoint``) is what the ratio shows.

Byte counts are exact and the same on every machine; only load times depend on the host.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import random
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import ormsgpack
from harness import Report, ainterleave, corpus

from tether.state.context import ExecutionContext
from tether.stores.registry import open_store

_BULK = 256 * 1024


def file_bytes(path: Path) -> int:
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


async def stored_bytes(store: Any, run_id: str) -> tuple[int, dict[str, int], int]:
    """(payload bytes of every version kept, bytes per row kind, versions)."""
    stored, versions, kinds = 0, 0, {}
    before = None
    while True:
        page = await store.history(run_id, before=before, limit=1000)
        if not page:
            break
        for h in page:
            stored += h.size
            kinds[h.kind] = kinds.get(h.kind, 0) + h.size
            versions += 1
        before = page[-1].version
    return stored, kinds, versions


def ratios(rep: Report, label: str, stored: int, final: int, fbytes: int, goal: float) -> None:
    rep.target(f"{label}: stored bytes / final state", stored / final, goal=goal)
    rep.target(f"{label}: SQLite file / final state", fbytes / final, goal=2.5)


# == 1. appends ===========================================================================
async def grow(
    path: Path, run_id: str, n: int, seed: int, *, until_bytes: int = 0, copy: bool = True
) -> dict[str, Any]:
    """Commit appends of corpus messages: ``n`` of them, or until the state packs to
    ``until_bytes``; the final state (the context's own, not a copy, unless ``copy``)."""
    rng = random.Random(seed)
    async with open_store(f"sqlite:///{path}") as store:
        ctx = ExecutionContext(run_id, {"messages": []})
        size, i = 0, 0
        while (i < n) if not until_bytes else (size < until_bytes):
            msg = corpus.message(rng, i)
            ctx.merge({"messages": [msg]})
            ctx.mark_executed("step")
            await store.commit(ctx, node_id="step")
            size += len(ormsgpack.packb(msg))
            i += 1
        return ctx.snapshot() if copy else ctx.state_view()


async def appends(rep: Report, workdir: Path, n: int, rounds: int) -> None:
    path = workdir / f"appends-{n}.db"
    timed = n < 100_000  # the loads' targets are at 100 KB and 1 MB (section 4)
    state = await grow(path, "grow", n, seed=n, copy=timed)
    final = len(ormsgpack.packb(state))
    async with open_store(f"sqlite:///{path}") as store:
        stored, kinds, versions = await stored_bytes(store, "grow")
    label = f"{n:,} appends"
    rep.line(f"{label}: final state", final / 1e6, "MB", note=f"{versions:,} versions, bytes by kind {kinds}")
    ratios(rep, label, stored, final, file_bytes(path), goal=2.0)
    if timed:
        await load_vs_floor(rep, path, "grow", state, label, rounds)
    for p in path.parent.glob(path.stem + "*"):  # (100,000 appends: about 150 MB)
        p.unlink()


# == 2. orchestration =====================================================================
def _report(role: str, it: int, rng: random.Random) -> str:
    verdict = "PASS" if role != "TEST" or it % 4 == 0 else "FAIL"
    blocker = "无" if verdict == "PASS" else f"tests/test_mod{it % 7}.py::test_case_{it % 11} - assert"
    return (
        f"iteration: {it}\n结论：{verdict}\n阻塞：{blocker}\n命令：python -m pytest -q\n\n## 证据\n```\n"
        + corpus.log_lines(rng, rng.randint(10, 60))
        + "\n```\n\n## notes\n"
        + corpus.prose(rng, rng.randint(300, 1500))
        + "\n"
    )


async def orchestration(rep: Report, workdir: Path, iterations: int) -> None:
    from tether.orchestrator import (
        MainDecision,
        Orchestrator,
        OrchestratorConfig,
        RoleOutput,
        ScriptedMain,
        ScriptedRunner,
    )

    rng = random.Random(34)
    order = ["TEST", "DEV", "REVIEW"]

    def role(name: str) -> Any:
        def run(request: Any) -> RoleOutput:
            return RoleOutput(report=_report(name, request.iteration, rng))

        return run

    def main(req: Any) -> MainDecision:
        if req.mode == "finish_check":
            return MainDecision(next_agent="FINISH", reason="every report passes")
        if req.iteration >= iterations:
            return MainDecision(next_agent="FINISH", reason="the suite passes")
        return MainDecision(
            next_agent=order[req.iteration % 3], reason=corpus.prose(rng, rng.randint(40, 240))
        )

    board = workdir / "orch"
    board.mkdir()
    path = workdir / "orch.db"
    logging.getLogger("tether.orchestrator").setLevel(logging.ERROR)  # stall warnings: scripted
    async with open_store(f"sqlite:///{path}") as store:
        runners = ScriptedRunner({r: role(r) for r in [*order, "FINISH_REVIEW"]})
        config = OrchestratorConfig(max_iterations=iterations + 5, subloop=False)
        orch = Orchestrator(board, store, main=ScriptedMain(main), runners=runners, config=config)
        await orch.start("bench-orch", "make the test suite pass")
        cp = await store.load("bench-orch")
        assert cp is not None
        stored, kinds, versions = await stored_bytes(store, "bench-orch")
    final = len(ormsgpack.packb(cp.state))
    label = f"orchestration, {iterations} iterations"
    rep.line(f"{label}: final state", final / 1e3, "KB", note=f"{versions} versions, bytes by kind {kinds}")
    ratios(rep, label, stored, final, file_bytes(path), goal=1.3)


# == 3. agent run =========================================================================
async def agent(rep: Report, workdir: Path, iterations: int) -> None:
    from tether.agent import AgentLoop, LoopConfig
    from tether.models import ScriptedModel
    from tether.tools.local import LocalSession

    rng = random.Random(35)
    replies = corpus.reading_agent(rng, workdir / "outputs", iterations, "done")
    path = workdir / "agent.db"
    async with open_store(f"sqlite:///{path}") as store:
        config = LoopConfig(max_iterations=iterations, budget=8_000)
        await AgentLoop(ScriptedModel(replies), LocalSession(cwd=str(workdir)), store, config=config).start(
            "bench-agent", "read every output"
        )
        cp = await store.load("bench-agent")
        assert cp is not None and str(cp.status) == "COMPLETED", f"the agent run ended {cp.status}"
        stored, kinds, versions = await stored_bytes(store, "bench-agent")
    final = len(ormsgpack.packb(cp.state))
    label = f"agent run, {iterations} iterations"
    rep.line(f"{label}: final state", final / 1e3, "KB", note=f"{versions} versions, bytes by kind {kinds}")
    ratios(rep, label, stored, final, file_bytes(path), goal=1.3)


# == 4. loads =============================================================================
def floor_connection(path: Path, packed: bytes) -> sqlite3.Connection:
    """The floor's database: one row, the store's own connection settings."""
    con = sqlite3.connect(path, isolation_level=None)
    for pragma in (
        "journal_mode = WAL",
        "synchronous = FULL",
        "mmap_size = 268435456",
        "cache_size = -32768",
    ):
        con.execute(f"PRAGMA {pragma}")
    con.execute("CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v BLOB NOT NULL)")
    con.execute("INSERT OR REPLACE INTO t VALUES ('run', ?)", (packed,))
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # read from the file, as the store's rows are
    return con


def floor_decode(data: bytes) -> Any:
    if len(data) < _BULK:
        return ormsgpack.unpackb(data)
    gc.disable()
    try:
        return ormsgpack.unpackb(data)
    finally:
        gc.enable()


async def load_vs_floor(
    rep: Report, path: Path, run_id: str, state: dict[str, Any], label: str, rounds: int
) -> None:
    packed = ormsgpack.packb(state)
    n = len(state["messages"])
    file_bytes(path)  # both databases checkpointed: rows read from the file, not the WAL
    con = floor_connection(path.with_name(path.stem + "-floor.db"), packed)
    async with open_store(f"sqlite:///{path}") as store:

        async def load() -> None:
            cp = await store.load(run_id)
            assert cp is not None and len(cp.state["messages"]) == n

        async def floor() -> None:
            row = con.execute("SELECT v FROM t WHERE k = 'run'").fetchone()
            assert len(floor_decode(row[0])["messages"]) == n

        t = await ainterleave({"load": load, "floor": floor}, rounds=rounds, warmup=2)
    con.close()
    lo, fl = statistics.median(t["load"]), statistics.median(t["floor"])
    scale, unit = (1e6, "us") if fl < 1e-3 else (1e3, "ms")  # small loads take microseconds
    rep.line(f"{label}: load latest, p50", lo * scale, unit)
    rep.line(f"{label}: floor (one row read + decode), p50", fl * scale, unit)
    rep.target(f"{label}: load / floor", lo / fl, goal=1.5)


async def loads(rep: Report, workdir: Path, size: int, rounds: int) -> None:
    label = f"{size // 1024:,} KB state" if size < 1 << 20 else f"{size / (1 << 20):g} MB state"
    path = workdir / f"load-{size}.db"
    state = await grow(path, "load", 0, seed=size, until_bytes=size)
    rep.line(f"{label}: messages appended", len(state["messages"]))
    await load_vs_floor(rep, path, "load", state, label, rounds)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1,000 appends, one run")
    ap.add_argument("--full", action="store_true", help="also 100,000 appends (several minutes)")
    ap.add_argument("--runs", type=int, default=0, help="repeats (default 3; 1 with --quick)")
    ap.add_argument("--iterations", type=int, default=200, help="orchestration and agent iterations")
    ap.add_argument("--only", default="", help="comma-separated: appends, orchestration, agent, loads")
    args = ap.parse_args()
    sizes = [1_000] if args.quick else [1_000, 10_000] + ([100_000] if args.full else [])
    parts = {p for p in args.only.split(",") if p} or {"appends", "orchestration", "agent", "loads"}
    rounds = 7 if args.quick else 21
    rep = Report("bench_storage", "stored bytes over a whole history, and loads against their floor")
    with tempfile.TemporaryDirectory(prefix="tether-storage-") as tmp:
        for run in rep.runs(args.runs or (1 if args.quick else 3)):
            workdir = Path(tmp) / f"r{run}"
            workdir.mkdir()
            if "appends" in parts:
                rep.section("appends")
                for n in sizes:
                    await appends(rep, workdir, n, rounds=rounds)
            if "orchestration" in parts:
                rep.section("orchestration")
                (workdir / "o").mkdir()
                await orchestration(rep, workdir / "o", args.iterations)
            if "agent" in parts:
                rep.section("agent run")
                (workdir / "a").mkdir()
                await agent(rep, workdir / "a", args.iterations)
            if "loads" in parts:
                rep.section("loads of the latest state")
                for size in (100 * 1024, 1 << 20):
                    await loads(rep, workdir, size, rounds=rounds * 3 if size < 1 << 20 else rounds)
    return rep.finish()


if __name__ == "__main__":
    os.environ.setdefault("TETHER_LOG_LEVEL", "WARNING")
    sys.exit(asyncio.run(main()))
