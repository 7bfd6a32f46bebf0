"""The rows a chain engine keeps, and the replay it keeps with them (``stores/_kept.py``).

Properties: a load that starts from a kept replay returns the same checkpoint as a replay
of every row, whatever versions are read in whatever order as the run grows; a row whose
bytes changed is caught (a typed error naming its version) even once a replay is kept; the
replays count in the budget. On SQLite, the same through a store, its rows read by rowid.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.errors import CheckpointCorrupt
from tether.state import ExecutionContext
from tether.state.model import NO_CHAIN
from tether.state.serde import Codec
from tether.stores._chain import ChainEngine, CompactionPolicy, Known
from tether.stores.registry import open_store

from .test_chain_engine import _REG, Rows, _apply, _commit, policies, steps


def _fields(cp: Any) -> tuple[Any, ...]:
    return (
        cp.run_id,
        cp.version,
        cp.state,
        cp.executed_node_ids,
        cp.node_id,
        cp.status,
        cp.timestamp,
        cp.metadata,
    )


@settings(max_examples=120, deadline=None)
@given(steps, policies, st.data())
def test_a_load_from_a_kept_replay_is_the_load_of_every_row(script, policy, data):
    """Commits and loads interleaved (each load repeated, so replays are kept and used, at
    any version, latest or not): every checkpoint equals a cold engine's, which keeps none."""
    engine = ChainEngine(Codec(), policy, seals=True, splits_state=False)
    cold = ChainEngine(Codec(), policy, seals=True, splits_state=False, vouch_bytes=0)
    ctx = ExecutionContext("r", {"messages": []}, reducers=_REG)
    rows, known = Rows(), Known(0, NO_CHAIN, [])
    known = _commit(engine, ctx, rows, known)
    for key, value in script:
        _apply(ctx, key, value)
        known = _commit(engine, ctx, rows, known)
        for _ in range(data.draw(st.integers(0, 2))):
            version = data.draw(st.sampled_from([rows.version, rows.version, *range(1, rows.version + 1)]))
            chain = rows.chain_to(version)
            want = _fields(cold.checkpoint_of("r", chain))
            for _again in range(data.draw(st.integers(1, 3))):
                again = [(v, bytes(bytearray(p))) for v, p in chain]  # equal bytes, other objects
                assert _fields(engine.checkpoint_of("r", again)) == want
        latest = rows.chain_to(rows.version)
        assert engine.checkpoint_of("r", latest).state == ctx.snapshot()


def _grown(engine: ChainEngine, n: int) -> tuple[Rows, ExecutionContext]:
    ctx = ExecutionContext("r", {"messages": []}, reducers=_REG)
    rows, known = Rows(), Known(0, NO_CHAIN, [])
    for i in range(n):
        ctx.merge({"messages": [f"message {i} that will change"]})
        known = _commit(engine, ctx, rows, known)
    return rows, ctx


def test_a_row_changed_after_its_replay_was_kept_is_caught_and_the_replay_still_holds():
    engine = ChainEngine(Codec(), CompactionPolicy(), seals=True, splits_state=False)
    rows, ctx = _grown(engine, 12)
    chain = rows.chain_to(rows.version)
    for _ in range(3):  # read, read again (the replay is kept), and from the replay
        assert engine.checkpoint_of("r", chain).state == ctx.snapshot()
    assert engine.kept.replayed("r", chain, engine.kept.vouched("r", chain)) is not None
    for at, (version, payload) in enumerate(chain):
        if not payload:
            continue
        flipped = bytearray(payload)
        flipped[flipped.index(b"that will")] ^= 0x01
        damaged = [*chain[:at], (version, bytes(flipped)), *chain[at + 1 :]]
        with pytest.raises(CheckpointCorrupt, match="checksum mismatch") as err:
            engine.checkpoint_of("r", damaged)
        assert err.value.version == version
        assert engine.checkpoint_of("r", chain).state == ctx.snapshot()
    # a commit after it: loaded from the replay plus the new row, then a replay of them kept
    ctx.merge({"messages": ["one more"]})
    _commit(engine, ctx, rows, Known(rows.version, rows.chain, None))
    longer = rows.chain_to(rows.version)
    for _ in range(3):
        assert engine.checkpoint_of("r", longer).state == ctx.snapshot()
    done = engine.kept.replayed("r", longer, engine.kept.vouched("r", longer))
    assert done is not None and done[0].version == rows.version


def test_kept_replays_count_in_the_budget():
    engine = ChainEngine(Codec(), CompactionPolicy(), seals=True, splits_state=False, vouch_bytes=40_000)
    for n in range(6):
        rows, _ctx = _grown(engine, 10)
        chain = rows.chain_to(rows.version)
        for _ in range(2):
            engine.checkpoint_of(f"r{n}", chain)
        sizes = engine.kept.sizes()
        rows_bytes = sum(len(p) for _, p in chain)
        assert sizes[f"r{n}"] > rows_bytes  # the rows and the replay
        assert engine.kept.nbytes == sum(sizes.values()) <= 40_000


async def test_sqlite_loads_read_again_by_rowid_see_new_commits_and_damage(tmp_path):
    """A store reading a chain again (by rowid, from a kept replay) sees a commit made by
    another store on the same file, and a byte changed on disk is CheckpointCorrupt."""
    url = f"sqlite:///{tmp_path / 'kept.db'}"
    async with open_store(url) as store, open_store(url) as other:
        ctx = ExecutionContext("r", {"messages": []}, reducers=_REG)
        for i in range(40):
            ctx.merge({"messages": [f"message {i} that will change " + "x" * 200]})
            await store.commit(ctx)
        for _ in range(4):
            assert (await store.load("r")).state == ctx.snapshot()
        assert store.backend._rowids.get("r") is not None  # read by rowid
        ctx.merge({"messages": ["from the other store"]})
        await other.commit(ctx)
        for _ in range(3):
            cp = await store.load("r")
            assert cp.state == ctx.snapshot() and cp.version == 41
        con = sqlite3.connect(tmp_path / "kept.db")
        version, row = con.execute(
            "SELECT version, payload FROM tether_checkpoints WHERE run_id = 'r' AND length(payload) > 0 "
            "AND version > 1 ORDER BY version LIMIT 1"
        ).fetchone()
        flipped = bytearray(row)
        flipped[flipped.index(b"will change")] ^= 0x01
        con.execute(
            "UPDATE tether_checkpoints SET payload = ? WHERE run_id = 'r' AND version = ?",
            (bytes(flipped), version),
        )
        con.commit()
        con.close()
        with pytest.raises(CheckpointCorrupt, match="checksum mismatch") as err:
            await store.load("r")
        assert err.value.version == version


async def test_a_run_deleted_and_written_again_loads_its_new_rows(tmp_path):
    """Same id, same versions, other rows: neither the rowids nor the replay kept of the
    first run can make a load return it."""
    async with open_store(f"sqlite:///{tmp_path / 'again.db'}") as store:
        for word in ("first", "second"):
            ctx = ExecutionContext("r", {"messages": []}, reducers=_REG)
            for i in range(30):
                ctx.merge({"messages": [f"{word} run, message {i} " + "y" * 100]})
                await store.commit(ctx)
            for _ in range(3):
                cp = await store.load("r")
                assert cp.state == ctx.snapshot() and cp.state["messages"][0].startswith(word)
            await store.delete("r")
