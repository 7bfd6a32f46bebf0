"""What only the SQLite store does: it reads a chain on the event loop when small and on
its DB thread when big, and, when asked (``checkpoint_bytes``), checkpoints its WAL on a
thread of its own.

A resuming process (a store that never saw the run) must not pay a size probe before
every load, and must never read a big chain on the event loop.
"""

from __future__ import annotations

import random
import sqlite3
import threading
from pathlib import Path

import pytest

from tether.errors import ConfigError
from tether.state import ExecutionContext
from tether.stores.registry import create_store
from tether.stores.sqlite import SqliteStore

from ._worker import blob
from .conftest import kill_after, new_id


def traced(store: SqliteStore) -> list[tuple[str, str]]:
    """(thread name, statement) for every statement the store's connection runs."""
    seen: list[tuple[str, str]] = []
    assert store.backend._conn is not None
    store.backend._conn.set_trace_callback(lambda sql: seen.append((threading.current_thread().name, sql)))
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
        # a miss asks one more small question: expired (RunExpired) or never stored (None)?
        assert len(seen) == 2 and seen[1][1].startswith("SELECT r.expires_at")
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


# -- WAL checkpoints off the commit path ---------------------------------------------
def _wal_frames(path: Path) -> tuple[int, int]:
    """(frames in the WAL, frames of it already copied into the database file)."""
    with sqlite3.connect(path) as spy:
        _busy, log, done = spy.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(log), int(done)


async def _commit_megabytes(store: SqliteStore, n: int) -> list[ExecutionContext]:
    ctxs = []
    for i in range(n):
        ctx = ExecutionContext(new_id(), {"blob": bytes([i]) * 1_000_000})
        await store.commit(ctx)
        ctxs.append(ctx)
    return ctxs


async def test_big_writes_are_checkpointed_in_the_background(tmp_path: Path) -> None:
    """Past ``checkpoint_bytes`` a second connection copies the WAL into the database
    file; the writer's own connection never runs the checkpoint."""
    path = tmp_path / "t.db"
    store = SqliteStore(path, checkpoint_bytes=1_500_000)
    await store.setup()
    try:
        seen = traced(store)
        ctxs = await _commit_megabytes(store, 2)
        running = store.backend._checkpointing
        assert running is not None
        running.result(timeout=30)
        assert path.stat().st_size > 2_000_000  # both payloads now live in the database file
        assert not any("wal_checkpoint" in sql for _, sql in seen), seen
        # and what was copied reads back the same
        for ctx in ctxs:
            cp = await store.load(ctx.run_id)
            assert cp is not None and cp.state == ctx.snapshot()
    finally:
        await store.aclose()
    assert not any(t.name.startswith("tether-sqlite-wal") for t in threading.enumerate())


async def test_without_a_background_checkpoint_the_writes_stay_in_the_wal(tmp_path: Path) -> None:
    """The contrast: ``checkpoint_bytes=0`` (the default) leaves checkpoints to SQLite (at ~4 MB of WAL),
    so 2 MB of commits are still only in the WAL."""
    path = tmp_path / "t.db"
    store = SqliteStore(path, checkpoint_bytes=0)
    await store.setup()
    try:
        await _commit_megabytes(store, 2)
        assert store.backend._checkpointing is None
        assert path.stat().st_size < 1_000_000
        log, done = _wal_frames(path)  # this spy's checkpoint copies them now
        assert log > 480 and done == log
    finally:
        await store.aclose()


async def test_the_commit_still_checkpoints_when_the_background_cannot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the background checkpoint failing every time, the writer's own backstop (at 4x
    ``checkpoint_bytes``, not SQLite's ~4 MB) keeps the WAL bounded."""
    path = tmp_path / "t.db"
    store = SqliteStore(path, checkpoint_bytes=250_000)
    monkeypatch.setattr(store.backend, "_checkpoint", lambda: None)
    await store.setup()
    try:
        await _commit_megabytes(store, 8)
        # the WAL file keeps its high-water mark: the most frames it ever held at once
        most = Path(f"{path}-wal").stat().st_size // (4096 + 24)
        backstop = 4 * 250_000 // 4096
        assert most < backstop + 300, (most, backstop)  # the backstop plus one 1 MB commit
    finally:
        await store.aclose()


@pytest.mark.parametrize(("secure_delete", "zeroes"), [("FAST", False), ("ON", True)])
async def test_deleting_a_big_run_rewrites_its_pages_only_when_asked(
    tmp_path: Path, secure_delete: str, zeroes: bool
) -> None:
    """Debian's SQLite builds with SECURE_DELETE on, so by default a delete writes every
    freed overflow page back as zeros: as many WAL frames as the save did. ``FAST``
    (tether's default) zeroes only pages written anyway. The pragma is set either way, so
    the test holds on any build."""
    path = tmp_path / "t.db"
    store = SqliteStore(path, secure_delete=secure_delete)
    await store.setup()
    hold = sqlite3.connect(path, isolation_level=None)
    try:
        # a reader pinned at the start keeps the WAL from restarting, so frames only add up
        hold.execute("BEGIN")
        hold.execute("SELECT count(*) FROM sqlite_master").fetchall()
        ctx = (await _commit_megabytes(store, 1))[0]
        saved, _ = _wal_frames(path)
        await store.delete(ctx.run_id)
        deleted = _wal_frames(path)[0] - saved
        assert await store.load(ctx.run_id) is None
        assert saved > 240
        assert (deleted > 200) if zeroes else (deleted < 30), (saved, deleted)
    finally:
        hold.close()
        await store.aclose()


def test_sqlite_url_options_reach_the_store(tmp_path: Path) -> None:
    store = create_store(f"sqlite:///{tmp_path}/t.db?checkpoint_bytes=0&synchronous=normal&busy_timeout=2")
    assert isinstance(store, SqliteStore)
    assert (store.checkpoint_bytes, store.backend._synchronous, store.backend._busy_ms) == (0, "NORMAL", 2000)
    assert create_store(f"sqlite:///{tmp_path}/t.db?checkpoint_bytes=4194304").checkpoint_bytes == 4194304  # type: ignore[attr-defined]
    assert create_store(f"sqlite:///{tmp_path}/t.db").checkpoint_bytes == 0  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="unknown sqlite URL option 'wal'"):
        create_store(f"sqlite:///{tmp_path}/t.db?wal=1")
    with pytest.raises(ConfigError, match="checkpoint_bytes=.*'lots'"):
        create_store(f"sqlite:///{tmp_path}/t.db?checkpoint_bytes=lots")
    with pytest.raises(ConfigError, match="checkpoint_bytes must be an int >= 0"):
        SqliteStore(tmp_path / "t.db", checkpoint_bytes=-1)
    with pytest.raises(ConfigError, match="needs a path"):
        create_store("sqlite:///?checkpoint_bytes=0")
    for url, expected in (("t.db?secure_delete=on", 1), ("t.db", 2)):  # 1 = ON, 2 = FAST
        store = create_store(f"sqlite:///{tmp_path}/{url}")
        assert isinstance(store, SqliteStore)
        conn = store.backend._connect()
        try:
            assert conn.execute("PRAGMA secure_delete").fetchone()[0] == expected, url
        finally:
            conn.close()
    with pytest.raises(ConfigError, match="secure_delete must be ON, OFF or FAST"):
        create_store(f"sqlite:///{tmp_path}/t.db?secure_delete=maybe")


@pytest.mark.slow
async def test_kill_9_while_checkpointing_loses_no_commit(tmp_path: Path) -> None:
    """A writer that checkpoints after almost every 256 KB commit, SIGKILLed at random
    instants (often mid-checkpoint): every commit it reported is there, whole."""
    url = f"sqlite:///{tmp_path}/t.db?checkpoint_bytes=200000"
    run_id = new_id()
    rng = random.Random(5)
    store = create_store(url)
    await store.setup()
    try:
        for _ in range(4):
            last_reported = kill_after(url, run_id, "churn", 6, rng.uniform(0, 0.03))
            cp = await store.load(run_id)
            assert cp is not None
            step = cp.state["step"]
            assert step >= last_reported
            assert cp.state["blob"] == blob(step)
            assert cp.version == step
    finally:
        await store.aclose()
