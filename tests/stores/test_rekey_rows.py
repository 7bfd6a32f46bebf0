"""A key rotation re-encrypts every stored row in place, on every backend: each version
still loads as it did, history is unchanged, a rollback to an old version works, and a
writer committing meanwhile loses nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tether.errors import DecryptionError, RunNotFound
from tether.state import Codec, ExecutionContext, RunStatus, generate_key
from tether.stores import CheckpointStore
from tether.stores.policies import CompactionPolicy
from tether.stores.rekey import rekey_runs

from .conftest import new_id

OLD, NEW = generate_key(), generate_key()
# short chains: the run gets full rows, deltas, segments and sealed rows
SMALL = CompactionPolicy(max_chain=5, seal_versions=3, row_cost_bytes=1 << 20)


def _view(cp: Any) -> dict[str, Any]:
    return {
        "version": cp.version,
        "node_id": cp.node_id,
        "status": cp.status,
        "state": cp.state,
        "executed": list(cp.executed_node_ids),
        "metadata": cp.metadata,
    }


async def _fill(store: CheckpointStore, run_id: str, steps: int) -> None:
    ctx = ExecutionContext(run_id, {"n": 0})
    for n in range(steps):
        ctx.merge({"messages": [f"m{n}"], "n": n, f"step{n % 3}_output": {"n": n}})
        await store.commit(ctx, node_id=f"node{n % 4}", status=RunStatus.PAUSED, metadata={"step": n})


async def _all_versions(store: CheckpointStore, run_id: str) -> tuple[list[Any], dict[int, Any]]:
    history = await store.history(run_id)
    loads = {}
    for info in history:
        cp = await store.load(run_id, info.version)
        assert cp is not None
        loads[info.version] = _view(cp)
    return history, loads


async def test_rekey_keeps_every_version_history_and_rollback(make_store):
    run_id = new_id("rekey-rows")
    async with make_store(codec=Codec(encryption_key=OLD), compaction=SMALL) as old:
        await _fill(old, run_id, 23)
        await old.rollback(run_id, 4)  # a rollback point in the history already
        history, loads = await _all_versions(old, run_id)
    kinds = {info.kind for info in history}
    assert "full" in kinds and len(history) == 24 and len(loads) == 24

    async with make_store(codec=Codec(encryption_key=[NEW, OLD]), compaction=SMALL) as both:
        report = await rekey_runs(both, [run_id])
        assert report.ok and report.rekeyed == [run_id], report
        assert report.rows == sum(1 for info in history if info.size > 0)
        again = await rekey_runs(both, [run_id])  # every row under NEW now: nothing to write
        assert again.current == [run_id] and again.rows == 0

    async with make_store(codec=Codec(encryption_key=NEW), compaction=SMALL) as new:
        history_after, loads_after = await _all_versions(new, run_id)
        assert history_after == history  # versions, kinds, nodes, times, sizes
        assert loads_after == loads  # every old version loads as it did
        version = await new.rollback(run_id, 7)
        assert version == 25
        rolled = await new.load(run_id)
        assert rolled is not None and rolled.state == loads[7]["state"]
    async with make_store(codec=Codec(encryption_key=OLD), compaction=SMALL) as old:
        with pytest.raises(DecryptionError):  # the old versions are under NEW too
            await old.load(run_id, 1)
        await old.delete(run_id)


async def test_a_rewrite_behind_a_newer_version_changes_nothing(store):
    run_id = new_id("rekey-rows")
    store.codec = Codec(encryption_key=OLD)
    await _fill(store, run_id, 3)
    info, rows = await store.read_rows(run_id)
    assert info is not None and [r.version for r in rows] == [1, 2, 3]
    rotated = Codec(encryption_key=[NEW, OLD])
    payloads = {r.version: rotated.reencrypt(bytes(r.payload)) or b"" for r in rows}
    assert all(len(payloads[r.version]) == len(r.payload) for r in rows)  # only the frame changes
    assert await store.rewrite_rows(run_id, payloads, 2) is False  # the run is at 3
    _, unchanged = await store.read_rows(run_id)
    assert [bytes(r.payload) for r in unchanged] == [bytes(r.payload) for r in rows]
    with pytest.raises(RunNotFound):  # a row that is not there: the others are not written either
        await store.rewrite_rows(run_id, {1: payloads[1], 99: payloads[2]}, 3)
    _, unchanged = await store.read_rows(run_id)
    assert [bytes(r.payload) for r in unchanged] == [bytes(r.payload) for r in rows]
    assert await store.rewrite_rows(run_id, payloads, 3) is True
    _, changed = await store.read_rows(run_id)
    assert [bytes(r.payload) for r in changed] == [payloads[v] for v in (1, 2, 3)]
    assert [r[:6] for r in changed] == [r[:6] for r in rows]  # kind, node, status, time kept
    store.codec = Codec(encryption_key=NEW)
    cp = await store.load(run_id)
    assert cp is not None and cp.state["n"] == 2
    await store.delete(run_id)


async def test_a_writer_keeps_committing_through_a_rekey(make_store):
    run_id = new_id("rekey-rows")
    async with make_store(codec=Codec(encryption_key=OLD), compaction=SMALL) as old:
        await _fill(old, run_id, 12)
        _, before = await _all_versions(old, run_id)
    async with (
        make_store(codec=Codec(encryption_key=[NEW, OLD]), compaction=SMALL) as writer,
        make_store(codec=Codec(encryption_key=[NEW, OLD]), compaction=SMALL) as rekeyer,
    ):
        ctx = await writer.load_context(run_id)
        assert ctx is not None
        stop = asyncio.Event()

        async def write() -> int:
            commits = 0
            while not stop.is_set():
                ctx.merge({"messages": [f"live{commits}"]})
                await writer.commit(ctx, node_id="live", status=RunStatus.PAUSED)
                commits += 1
                await asyncio.sleep(0.002)
            return commits

        task = asyncio.create_task(write())
        await asyncio.sleep(0.05)
        report = await rekey_runs(rekeyer, [run_id])
        await asyncio.sleep(0.05)
        stop.set()
        commits = await task
    assert report.ok and report.rekeyed == [run_id], report
    async with make_store(codec=Codec(encryption_key=NEW), compaction=SMALL) as new:
        history, after = await _all_versions(new, run_id)
        assert len(history) == 12 + commits  # no commit lost, every version readable with NEW
        assert {v: after[v] for v in before} == before
        latest = await new.load(run_id)
        assert latest is not None
        assert latest.state["messages"][-commits:] == [f"live{i}" for i in range(commits)]
        await new.delete(run_id)


def test_reencrypt_changes_only_the_frame_and_refuses_what_it_cannot_vouch_for():
    old_row = Codec(encryption_key=OLD).encode({"v": 1, "n": 1})
    rotated = Codec(encryption_key=[NEW, OLD])
    new_row = rotated.reencrypt(old_row, run_id="r", version=3)
    assert new_row is not None and len(new_row) == len(old_row) and new_row[4:8].hex() == rotated.key_ids[0]
    assert Codec(encryption_key=NEW).decode(new_row) == {"v": 1, "n": 1}
    assert rotated.reencrypt(new_row) is None and rotated.reencrypt(b"") is None  # current; sealed
    with pytest.raises(DecryptionError, match="plaintext row") as plain:
        rotated.reencrypt(Codec().encode({"v": 1}), run_id="r", version=3)
    assert plain.value.run_id == "r" and plain.value.version == 3
    with pytest.raises(DecryptionError, match="another key"):
        Codec(encryption_key=NEW).reencrypt(Codec(encryption_key=generate_key()).encode({"v": 1}))
    tampered = bytearray(old_row)
    tampered[-1] ^= 1
    with pytest.raises(DecryptionError, match="authentication"):
        rotated.reencrypt(bytes(tampered))
