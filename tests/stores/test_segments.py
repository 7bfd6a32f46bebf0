"""Segment rows, on every backend: runs of deltas packed into one row (stores/_segment.py).

The memory store does not seal (its latest load reads a kept copy); these tests still run
on it, as a check that the same histories load the same there."""

from __future__ import annotations

from typing import Any

import pytest

from tether.errors import CheckpointCorrupt
from tether.state import Codec, ExecutionContext, upsert_by
from tether.stores import CompactionPolicy

from .conftest import new_id, raw_write

SEAL = CompactionPolicy(seal_versions=4, seal_whole_bytes=0)
"""Sealing by levels from the first segment on (the layouts below are the levels')."""


def msg(i: int, size: int = 40) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": f"m{i} " + "x" * size}


def step(ctx: ExecutionContext, i: int) -> None:
    """One version's changes: mostly appends, with every other reducer now and then."""
    update: dict[str, Any] = {"messages": [msg(i)]}
    if i % 3 == 0:
        update["messages"].append(msg(1000 + i))
        update["plan_output"] = {"step": i}
    if i % 4 == 1:
        update["todo"] = [{"id": f"t{i % 3}", "s": i}]
        update["steps"] = i
    if i % 5 == 2:
        update["config"] = {f"k{i % 2}": i}
    if i % 7 == 3:
        update["messages_seen"] = [i]
    ctx.merge(update)
    if i % 6 == 5:
        ctx.put("messages_seen", [])  # an overwrite between appends of one key
    ctx.mark_executed(f"node{i}")


def new_ctx(run_id: str | None = None) -> ExecutionContext:
    ctx = ExecutionContext(run_id or new_id())
    ctx.register_reducer("todo", upsert_by("id"))
    ctx.register_reducer("steps", "counter")
    ctx.register_reducer("config", "merge")
    ctx.register_reducer("messages_seen", "append")
    return ctx


async def commits(store: Any, ctx: ExecutionContext, start: int, stop: int, seen: dict[int, Any]) -> None:
    for i in range(start, stop):
        step(ctx, i)
        await store.commit(ctx, node_id=f"node{i}", metadata={"i": i})
        seen[ctx.version] = (ctx.snapshot(), ctx.executed_node_ids)


async def payload_rows(store: Any, run_id: str, version: int | None = None) -> int:
    """How many rows with a payload a load of ``version`` reads."""
    return sum(1 for _, payload in await store._read_chain(run_id, version) if payload)


async def test_every_version_of_a_sealed_chain_loads_exactly(store):
    """Segments hold versions exactly: every one loads with its state, node, metadata and
    executed nodes, and a load of the latest reads one row per segment."""
    store.compaction = SEAL
    ctx = new_ctx()
    ctx.merge({"messages": [msg(0)]})
    await store.commit(ctx, node_id="start")
    seen: dict[int, Any] = {1: (ctx.snapshot(), ctx.executed_node_ids)}
    await commits(store, ctx, 1, 23, seen)
    assert ctx.version == 23
    for v, (state, executed) in seen.items():
        cp = await store.load(ctx.run_id, v)
        assert cp is not None and cp.version == v
        assert cp.state == state, v
        assert cp.executed_node_ids == executed, v
        if v > 1:
            assert cp.node_id == f"node{v - 1}" and cp.metadata == {"i": v - 1}
    latest = await store.load(ctx.run_id)
    assert latest.state == ctx.snapshot() and latest.version == 23
    hist = await store.history(ctx.run_id)
    assert [h.version for h in hist] == list(range(23, 0, -1))
    assert [h.node_id for h in hist[:-1]] == [f"node{i}" for i in range(22, 0, -1)]
    kinds = [h.kind for h in reversed(hist)]
    if store.capabilities.seals:
        # 2-5, 6-9, 10-13 and 14-17 were segments of 4 (level 1), merged into one (level 2)
        # when the fourth was written; 18-21 is a level 1 segment; 22 and 23 are deltas
        sealed = ["sealed"]
        assert kinds == ["full", "segment"] + sealed * 15 + ["segment"] + sealed * 3 + ["delta", "delta"]
        assert await payload_rows(store, ctx.run_id) == 1 + 2 + 2
        assert all(h.size == 0 for h in hist if h.kind == "sealed")
    else:
        assert kinds == ["full"] + ["delta"] * 22
    restored = await store.load_context(ctx.run_id, reducers=ctx.reducers)
    assert restored.snapshot() == ctx.snapshot()
    assert restored.executed_node_ids == ctx.executed_node_ids


async def test_a_resumed_context_goes_on_sealing(make_store):
    """A context loaded mid-tail (another process, say) seals the same tail later."""
    async with make_store(compaction=SEAL) as first:
        ctx = new_ctx()
        ctx.merge({"messages": [msg(0)]})
        await first.commit(ctx)
        seen: dict[int, Any] = {}
        await commits(first, ctx, 1, 7, seen)  # v2-5 a segment, v6-7 the tail
    async with make_store(compaction=SEAL) as second:
        resumed = await second.load_context(ctx.run_id, reducers=ctx.reducers)
        assert resumed is not None and resumed.version == 7
        await commits(second, resumed, 7, 12, seen)  # v9 seals 6-9, v10-12 the tail
        for v, (state, _executed) in seen.items():
            assert (await second.load(ctx.run_id, v)).state == state, v
        kinds = {h.version: h.kind for h in await second.history(ctx.run_id)}
        if second.capabilities.seals:
            assert kinds[6] == "segment" and kinds[9] == "sealed" and kinds[10] == "delta", kinds
            assert await payload_rows(second, ctx.run_id) == 1 + 2 + 3
        # v13 seals 10-13; v17 seals 14-17 and merges it with the three before, the first
        # of which the first store wrote: what the resumed context read back
        await commits(second, resumed, 12, 16 + 1, seen)
        kinds = {h.version: h.kind for h in await second.history(ctx.run_id)}
        if second.capabilities.seals:
            assert kinds[2] == "segment" and kinds[6] == "sealed" and kinds[14] == "sealed", kinds
            assert await payload_rows(second, ctx.run_id) == 2
        for v, (state, executed) in seen.items():
            cp = await second.load(ctx.run_id, v)
            assert cp.state == state and cp.executed_node_ids == executed, v


@pytest.mark.parametrize("keep", [1, 2, 3, 4, 5, 9])
async def test_prune_anywhere_in_a_segment_keeps_what_it_keeps(store, keep):
    """prune's cut may fall on a segment's first row, inside it or on its last: the kept
    versions load exactly, and the run goes on sealing afterwards."""
    store.compaction = SEAL
    ctx = new_ctx()
    ctx.merge({"messages": [msg(0)]})
    await store.commit(ctx)
    seen: dict[int, Any] = {}
    await commits(store, ctx, 1, 13, seen)  # segments 2-5, 6-9, 10-13
    assert await store.prune(ctx.run_id, keep=keep) == 13 - keep
    assert [h.version for h in await store.history(ctx.run_id)] == list(range(13, 13 - keep, -1))
    for v in range(14 - keep, 14):
        assert (await store.load(ctx.run_id, v)).state == seen[v][0], v
    assert await store.load(ctx.run_id, 13 - keep) is None
    await commits(store, ctx, 13, 19, seen)
    for v in range(14 - keep, 20):
        assert (await store.load(ctx.run_id, v)).state == seen[v][0], v
    restored = await store.load_context(ctx.run_id, reducers=ctx.reducers)
    assert restored.snapshot() == ctx.snapshot()


async def test_copy_at_a_sealed_version(store):
    """A fork at a version held in a segment starts from exactly that state."""
    store.compaction = SEAL
    ctx = new_ctx()
    ctx.merge({"messages": [msg(0)]})
    await store.commit(ctx)
    seen: dict[int, Any] = {}
    await commits(store, ctx, 1, 10, seen)
    fork = new_id()
    assert await store.copy(ctx.run_id, fork, version=4) == 1
    cp = await store.load(fork)
    assert cp.state == seen[4][0] and cp.executed_node_ids == seen[4][1]
    assert cp.metadata == {"forked_from": {"run_id": ctx.run_id, "version": 4}}


async def test_a_seal_over_rows_pruned_meanwhile_falls_back_to_a_delta(make_store):
    """Another process prunes the tail a context was about to seal: its commit still
    lands (as a plain delta) and every kept version loads exactly."""
    async with make_store(compaction=SEAL) as writer, make_store(compaction=SEAL) as other:
        ctx = new_ctx()
        ctx.merge({"messages": [msg(0)]})
        await writer.commit(ctx)
        seen: dict[int, Any] = {}
        await commits(writer, ctx, 1, 4, seen)  # v2-4: a tail of 3; the next commit seals
        await other.prune(ctx.run_id, keep=2)  # v3 becomes full, v2 goes
        await commits(writer, ctx, 4, 10, seen)
        assert ctx.version == 10
        for v in range(3, 11):
            assert (await other.load(ctx.run_id, v)).state == seen[v][0], v
        assert (await writer.load(ctx.run_id)).state == ctx.snapshot()
        kinds = {h.version: h.kind for h in await other.history(ctx.run_id)}
        assert kinds[3] == "full" and kinds[5] == "delta", kinds


async def test_a_damaged_segment_names_the_run_and_its_version(store):
    """A segment that does not decode, or a sealed row with no segment before it, is a
    CheckpointCorrupt naming the run and the version, not a wrong state."""
    if not store.capabilities.seals:
        pytest.skip("the memory store writes no segments")
    store.compaction = SEAL
    ctx = new_ctx()
    ctx.merge({"messages": [msg(0)]})
    await store.commit(ctx)
    await commits(store, ctx, 1, 4, {})
    # v2-4 are deltas; a segment write of v2-5 whose payload is cut off
    good = Codec().encode({"v": 2, "kind": "segment", "first": 2, "n": 4, "ops": []})
    await raw_write(store, ctx.run_id, good[:5], kind="segment", expected=4, seal_from=2)
    with pytest.raises(CheckpointCorrupt) as err:
        await store.load(ctx.run_id)
    assert ctx.run_id in str(err.value) and err.value.version == 2
    # a segment that decodes but says it starts elsewhere
    other = new_ctx()
    other.merge({"messages": [msg(0)]})
    await store.commit(other)
    await commits(store, other, 1, 3, {})
    wrong = Codec().encode(
        {"v": 2, "kind": "segment", "first": 7, "n": 3, "ts": bytes(24), "executed": [], "ops": []}
    )
    await raw_write(store, other.run_id, wrong, kind="segment", expected=3, seal_from=2)
    with pytest.raises(CheckpointCorrupt) as err:
        await store.load(other.run_id)
    assert err.value.version == 2 and "segment" in str(err.value)
    # an empty payload where a delta should be: its version is reported missing
    third = new_ctx()
    third.merge({"messages": [msg(0)]})
    await store.commit(third)
    await raw_write(store, third.run_id, b"", kind="delta", expected=1)
    with pytest.raises(CheckpointCorrupt) as err:
        await store.load(third.run_id)
    assert third.run_id in str(err.value) and err.value.version == 2


async def test_big_deltas_seal_by_bytes(store):
    """A tail past ``seal_bytes`` is sealed before it has ``seal_versions`` versions."""
    store.compaction = CompactionPolicy(seal_versions=32, seal_tail_bytes=20_000, seal_whole_bytes=0)
    ctx = ExecutionContext(new_id())
    ctx.merge({"messages": [msg(0)]})
    await store.commit(ctx)
    for i in range(1, 9):
        ctx.merge({"messages": [msg(i, 6_000)]})
        await store.commit(ctx)
    kinds = [h.kind for h in reversed(await store.history(ctx.run_id))]
    if store.capabilities.seals:
        # 6 KB a delta: the fourth one takes the tail past 20 KB
        assert kinds == [
            "full",
            "segment",
            "sealed",
            "sealed",
            "sealed",
            "segment",
            "sealed",
            "sealed",
            "sealed",
        ]
    assert (await store.load(ctx.run_id)).state == ctx.snapshot()


@pytest.mark.parametrize(("cap", "rows"), [(1 << 20, 2), (1, 5)])
async def test_segments_merge_by_level_under_the_size_cap(store, cap, rows):
    """Two segments of one level merge into one of the next (fanout 2), unless the merged
    one would pass ``seal_bytes``."""
    store.compaction = CompactionPolicy(seal_versions=2, seal_fanout=2, seal_bytes=cap, seal_whole_bytes=0)
    ctx = new_ctx()
    ctx.merge({"messages": [msg(0)]})
    await store.commit(ctx)
    seen: dict[int, Any] = {}
    await commits(store, ctx, 1, 9, seen)
    if store.capabilities.seals:
        assert await payload_rows(store, ctx.run_id) == rows
    for v, (state, executed) in seen.items():
        cp = await store.load(ctx.run_id, v)
        assert cp.state == state and cp.executed_node_ids == executed, v


async def test_a_load_after_another_store_pruned_or_wrote_is_exact(make_store):
    """A store remembers the chain it wrote (to read just its rows next time); a prune or
    a seal by another store must not make its next load read a stale chain."""
    async with make_store(compaction=SEAL) as writer, make_store(compaction=SEAL) as other:
        ctx = new_ctx()
        ctx.merge({"messages": [msg(0)]})
        await writer.commit(ctx)
        seen: dict[int, Any] = {}
        await commits(writer, ctx, 1, 11, seen)
        assert (await writer.load(ctx.run_id)).state == ctx.snapshot()
        await other.prune(ctx.run_id, keep=3)  # the base moves to version 9, inside 6-9
        cp = await writer.load(ctx.run_id)
        assert cp.state == ctx.snapshot() and cp.version == 11
        again = await other.load_context(ctx.run_id, reducers=ctx.reducers)
        await commits(other, again, 11, 16, seen)  # the other store seals 10-13 and goes on
        cp = await writer.load(ctx.run_id)
        assert cp.state == again.snapshot() and cp.version == 16
        for v in range(9, 17):
            assert (await writer.load(ctx.run_id, v)).state == seen[v][0], v


async def test_a_small_chain_is_sealed_into_one_segment(make_store):
    """While the rows after the full one are small (``seal_whole_bytes``), a load reads three
    rows: the full one, one segment of every version up to the last few, and those few,
    sealed into one open segment (rewritten by each commit until it holds ``seal_versions``,
    then sealed into the big one). Every version loads exactly, and a store that resumed the
    run seals alike."""
    policy = CompactionPolicy(seal_versions=4, seal_whole_bytes=256 * 1024)
    async with make_store(compaction=policy) as store:
        ctx = new_ctx()
        ctx.merge({"messages": [msg(0)]})
        await store.commit(ctx, node_id="start")
        seen: dict[int, Any] = {1: (ctx.snapshot(), ctx.executed_node_ids)}
        await commits(store, ctx, 1, 15, seen)
    async with make_store(compaction=policy) as other:
        resumed = await other.load_context(ctx.run_id, reducers=ctx.reducers)
        await commits(other, resumed, 15, 23, seen)
        kinds = [h.kind for h in reversed(await other.history(ctx.run_id))]
        if other.capabilities.seals:
            # 2-21 sealed into one segment at 21, 22 a delta, then 22-23 the open segment
            assert kinds == ["full", "segment"] + ["sealed"] * 19 + ["segment", "sealed"]
            assert await payload_rows(other, ctx.run_id) == 1 + 1 + 1
        for v, (state, executed) in seen.items():
            cp = await other.load(ctx.run_id, v)
            assert cp.state == state and cp.executed_node_ids == executed, v
        assert (await other.load(ctx.run_id)).state == resumed.snapshot()
        # past seal_whole_bytes the levels take over from the last segment on
        other.compaction = CompactionPolicy(seal_versions=4, seal_whole_bytes=1)
        await commits(other, resumed, 23, 31, seen)
        if other.capabilities.seals:  # and two segments of level 1: 24-27, 28-31
            assert await payload_rows(other, ctx.run_id) == 1 + 1 + 1 + 2
        for v, (state, executed) in seen.items():
            cp = await other.load(ctx.run_id, v)
            assert cp.state == state and cp.executed_node_ids == executed, v
