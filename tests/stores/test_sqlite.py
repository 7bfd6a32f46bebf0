"""How the SQLite store reads a chain: on the event loop when small, on its DB thread when big.

A resuming process (a store that never saw the run) must not pay a size probe before
every load, and must never read a big chain on the event loop.
"""

from __future__ import annotations

import threading
from pathlib import Path

from tether.state import ExecutionContext
from tether.stores.sqlite import SqliteStore

from .conftest import new_id


def traced(store: SqliteStore) -> list[tuple[str, str]]:
    """(thread name, statement) for every statement the store's connection runs."""
    seen: list[tuple[str, str]] = []
    assert store._conn is not None
    store._conn.set_trace_callback(lambda sql: seen.append((threading.current_thread().name, sql)))
    return seen


async def test_a_fresh_store_loads_a_small_run_in_one_statement_on_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    writer = SqliteStore(path)
    await writer.setup()
    ctx = ExecutionContext(new_id(), {"messages": ["hello"] * 10})
    await writer.commit(ctx)
    reader = SqliteStore(path)
    await reader.setup()
    try:
        seen = traced(reader)
        cp = await reader.load(ctx.run_id)
        assert cp is not None and cp.state == ctx.snapshot()
        assert len(seen) == 1, seen  # no size probe first
        assert seen[0][0] == threading.current_thread().name
        seen.clear()
        assert await reader.load(new_id()) is None
        assert len(seen) == 1
    finally:
        await reader.aclose()
        await writer.aclose()


async def test_a_big_run_is_read_on_the_db_thread_even_by_a_fresh_store(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    writer = SqliteStore(path)
    await writer.setup()
    ctx = ExecutionContext(new_id(), {"blob": "x" * 4_000_000})
    await writer.commit(ctx)
    reader = SqliteStore(path)
    await reader.setup()
    assert reader.inline_read_bytes < 4_000_000
    try:
        seen = traced(reader)
        cp = await reader.load(ctx.run_id)
        assert cp is not None and cp.state == ctx.snapshot()
        loop_thread = threading.current_thread().name
        # the loop may learn the size, but every statement that returns payloads runs elsewhere
        full_reads = [(t, sql) for t, sql in seen if "c.payload" in sql and "CASE" not in sql]
        assert full_reads and all(t != loop_thread for t, _ in full_reads), seen
        seen.clear()
        assert (await reader.load(ctx.run_id)).state == ctx.snapshot()
        assert all(t != loop_thread for t, _ in seen), seen  # size now known: straight to the thread
    finally:
        await reader.aclose()
        await writer.aclose()
