"""One suite, every backend: what any CheckpointStore must do."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tether.errors import (
    CheckpointCorrupt,
    ConfigError,
    DecryptionError,
    RunExpired,
    RunNotFound,
    RunNotPaused,
    VersionConflict,
)
from tether.state import Checkpoint, Codec, ExecutionContext, RunStatus, generate_key, upsert_by
from tether.stores import CompactionPolicy, ExpiryPolicy

from .conftest import new_id, raw_write, redis_client

EVERY_TYPE: dict[str, Any] = {
    "text": "héllo 你好 🎉 \x00 end",
    "empty": "",
    "int": 42,
    "int_min": -(2**63),
    "int_max": 2**64 - 1,
    "float": 3.141592653589793,
    "neg_zero": -0.0,
    "inf": float("inf"),
    "true": True,
    "false": False,
    "none": None,
    "bytes": bytes(range(256)),
    "naive": dt.datetime(2026, 1, 2, 3, 4, 5, 678901),
    "utc": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
    "offset": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=-5, minutes=-30))),
    "zone": dt.datetime(2026, 7, 1, 12, 0, tzinfo=ZoneInfo("Europe/Paris")),
    "nested": {"a": [1, {"b": [b"x", None, {"c": dt.datetime(2020, 2, 29)}]}], "": []},
    "empty_list": [],
    "empty_dict": {},
}


def msg(i: int, size: int = 200) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": f"message {i} " + "x" * size}


async def committed(store: Any, *updates: dict[str, Any], run_id: str | None = None) -> ExecutionContext:
    ctx = ExecutionContext(run_id or new_id())
    for i, update in enumerate(updates):
        ctx.merge(update)
        ctx.mark_executed(f"n{i}")
        await store.commit(ctx, node_id=f"n{i}")
    return ctx


# -- round trips ---------------------------------------------------------------------
async def test_every_allowed_type_round_trips(store):
    """A full checkpoint of every allowed type comes back equal and with the same types."""
    ctx = ExecutionContext(new_id(), EVERY_TYPE)
    await store.commit(ctx, node_id="start")
    cp = await store.load(ctx.run_id)
    assert cp is not None
    assert cp.state == EVERY_TYPE
    for key, value in EVERY_TYPE.items():
        assert type(cp.state[key]) is type(value), key
    assert cp.state["zone"].tzinfo == ZoneInfo("Europe/Paris")
    assert cp.state["naive"].tzinfo is None
    assert str(cp.state["neg_zero"]) == "-0.0"


async def test_every_allowed_type_round_trips_through_deltas(store):
    """The same values written as ops (deltas) replay to the same state."""
    ctx = await committed(store, {"seed": 1})
    for key, value in EVERY_TYPE.items():
        ctx.put(key, value)
    ctx.merge({"messages": [EVERY_TYPE["nested"], EVERY_TYPE["zone"]]})
    await store.commit(ctx)
    cp = await store.load(ctx.run_id)
    assert cp.state == ctx.snapshot()
    assert [h.kind for h in await store.history(ctx.run_id)] == ["delta", "full"]


async def test_checkpoint_fields_round_trip(store):
    """node, executed nodes, status, metadata and time survive a save."""
    run_id = new_id()
    before = dt.datetime.now(dt.UTC)
    version = await store.save(
        Checkpoint(
            run_id=run_id,
            node_id="deploy",
            state={"user_input": "go"},
            executed_node_ids=["plan", "deploy"],
            status=RunStatus.PAUSED,
            metadata={"why": "review", "n": 2},
        )
    )
    cp = await store.load(run_id)
    assert version == 1 and cp.version == 1
    assert cp.node_id == "deploy"
    assert cp.executed_node_ids == ["plan", "deploy"]
    assert cp.status is RunStatus.PAUSED
    assert cp.metadata == {"why": "review", "n": 2}
    assert abs((cp.timestamp - before).total_seconds()) < 5
    assert (await store.get_status(run_id)) is RunStatus.PAUSED


async def test_reducers_replay_to_the_in_memory_state(store):
    """append, overwrite, merge, upsert-by-id, counter and a custom callable all replay exactly."""
    ctx = ExecutionContext(new_id())
    ctx.register_reducer("todo", upsert_by("id"))
    ctx.register_reducer("steps", "counter")
    ctx.register_reducer("config", "merge")
    ctx.register_reducer("best", lambda old, new: max(old or 0, new))
    ctx.merge({"messages": [msg(0)], "todo": [{"id": "a", "s": "pending"}], "steps": 1, "best": 3})
    await store.commit(ctx, node_id="one")
    ctx.merge(
        {
            "messages": [msg(1), msg(2)],
            "todo": [{"id": "a", "s": "done"}, {"id": "b", "s": "pending"}],
            "steps": 2,
            "config": {"port": 80},
            "best": 1,
            "plan_output": {"x": 1},
            "execution_history": [{"node": "one"}],
        }
    )
    ctx.merge({"config": {"host": "h"}, "plan_output": {"x": 2}, "steps": 4, "best": 7})
    await store.commit(ctx, node_id="two")
    cp = await store.load(ctx.run_id)
    assert cp.state == ctx.snapshot()
    assert cp.state["todo"] == [{"id": "a", "s": "done"}, {"id": "b", "s": "pending"}]
    assert cp.state["steps"] == 7
    assert cp.state["config"] == {"port": 80, "host": "h"}
    assert cp.state["best"] == 7
    assert cp.state["plan_output"] == {"x": 2}
    assert len(cp.state["messages"]) == 3
    restored = await store.load_context(ctx.run_id)
    assert restored.snapshot() == ctx.snapshot()
    assert restored.version == 2


async def test_load_of_each_version_and_missing_ones(store):
    """Every version loads as it was; absent runs and versions give None."""
    ctx = ExecutionContext(new_id())
    seen = []
    for i in range(5):
        ctx.merge({"messages": [msg(i)], "counter": i})
        await store.commit(ctx)
        seen.append(ctx.snapshot())
    for v, state in enumerate(seen, start=1):
        assert (await store.load(ctx.run_id, v)).state == state
    assert await store.load(ctx.run_id, 6) is None
    assert await store.load(ctx.run_id, 0) is None
    assert await store.load(new_id()) is None
    assert await store.load_context(new_id()) is None
    assert await store.get_run(new_id()) is None


# -- deltas --------------------------------------------------------------------------
async def test_appending_to_a_large_state_writes_only_the_delta(store):
    """One message appended to a ~2 MB history stores about that message, not the history."""
    ctx = ExecutionContext(new_id(), {"messages": [msg(i, 1000) for i in range(2000)]})
    await store.commit(ctx)
    ctx.merge({"messages": [msg(99999, 1000)], "last_output": "ok"})
    await store.commit(ctx)
    hist = await store.history(ctx.run_id)
    assert hist[0].kind == "delta" and hist[1].kind == "full"
    assert hist[1].size > 2_000_000
    assert hist[0].size < 1_500
    loaded = await store.load(ctx.run_id)
    assert loaded.state["messages"][-1] == msg(99999, 1000)
    assert len(loaded.state["messages"]) == 2001


async def test_overwrites_trigger_a_full_checkpoint(store):
    """Repeated overwrites of a big key compact the chain so loads stay bounded."""
    policy = CompactionPolicy(max_chain=1000, max_waste_ratio=0.5, min_waste_bytes=10_000)
    ctx = ExecutionContext(new_id(), {"messages": [msg(i) for i in range(50)]})
    store.compaction = policy
    await store.commit(ctx)
    for i in range(12):
        ctx.put("scratch", "y" * 4000 + str(i))
        await store.commit(ctx)
    kinds = [h.kind for h in await store.history(ctx.run_id, limit=13)]
    assert kinds.count("full") >= 2, kinds
    info = await store.get_run(ctx.run_id)
    assert info.chain.rewrite_bytes < 20_000
    assert (await store.load(ctx.run_id)).state == ctx.snapshot()


async def test_chain_length_is_bounded(store):
    """After max_chain deltas the next save writes the full state."""
    ctx = ExecutionContext(new_id())
    store.compaction = CompactionPolicy(max_chain=5)
    for i in range(12):
        ctx.merge({"messages": [msg(i, 10)]})
        await store.commit(ctx)
    kinds = [h.kind for h in reversed(await store.history(ctx.run_id))]
    # (the versions between are deltas, or in a store that seals, the rows of a segment)
    assert [v for v, kind in enumerate(kinds, start=1) if kind == "full"] == [1, 6, 11]
    for v in (4, 6, 12):
        assert len((await store.load(ctx.run_id, v)).state["messages"]) == v


async def test_ten_megabyte_state(store):
    """A 10 MB state saves and loads; the next append step is a small delta."""
    big = [{"role": "tool", "content": os.urandom(512).hex()} for _ in range(10_000)]
    ctx = ExecutionContext(new_id(), {"messages": big})
    await store.commit(ctx)
    ctx.merge({"messages": [msg(1)]})
    await store.commit(ctx)
    hist = await store.history(ctx.run_id)
    assert hist[1].size > 10_000_000
    assert hist[0].size < 1_000
    loaded = await store.load(ctx.run_id)
    assert len(loaded.state["messages"]) == 10_001
    assert loaded.state["messages"][:10_000] == big


# -- history -------------------------------------------------------------------------
async def test_history_is_newest_first_and_paginates(store):
    """history() lists versions newest first; before/limit page through them."""
    ctx = await committed(store, *[{"messages": [msg(i)]} for i in range(7)])
    hist = await store.history(ctx.run_id)
    assert [h.version for h in hist] == [7, 6, 5, 4, 3, 2, 1]
    assert [h.node_id for h in hist] == [f"n{i}" for i in range(6, -1, -1)]
    assert all(a.timestamp >= b.timestamp for a, b in zip(hist, hist[1:], strict=False))
    page1 = await store.history(ctx.run_id, limit=3)
    page2 = await store.history(ctx.run_id, before=page1[-1].version, limit=3)
    page3 = await store.history(ctx.run_id, before=page2[-1].version, limit=3)
    assert [h.version for h in page1 + page2 + page3] == [7, 6, 5, 4, 3, 2, 1]
    assert await store.history(new_id()) == []
    with pytest.raises(ConfigError):
        await store.history(ctx.run_id, limit=-1)


# -- conflicts -----------------------------------------------------------------------
async def test_second_writer_gets_a_version_conflict(store):
    """Two contexts loaded at one version: the first commit wins, the second conflicts."""
    ctx = await committed(store, {"messages": [msg(0)]})
    a = await store.load_context(ctx.run_id)
    b = await store.load_context(ctx.run_id)
    a.merge({"messages": [msg(1)]})
    b.merge({"messages": [msg(2)]})
    assert await store.commit(a) == 2
    with pytest.raises(VersionConflict) as err:
        await store.commit(b)
    assert err.value.expected == 1 and err.value.actual == 2
    assert "expected latest version 1" in str(err.value) and "version 2" in str(err.value)
    assert b.dirty  # b kept its change for a retry
    fresh = await store.load_context(ctx.run_id)
    fresh.merge({"messages": [msg(2)]})
    assert await store.commit(fresh) == 3
    assert [m["content"][:9] for m in (await store.load(ctx.run_id)).state["messages"]] == [
        "message 0",
        "message 1",
        "message 2",
    ]


async def test_new_run_conflicts_with_an_existing_one(store):
    """A brand-new context whose run id exists, or save(expected_version=…) mismatches, conflict."""
    ctx = await committed(store, {"a": 1})
    with pytest.raises(VersionConflict):
        await store.commit(ExecutionContext(ctx.run_id, {"a": 2}))
    cp = Checkpoint(run_id=ctx.run_id, node_id=None, state={"a": 3})
    with pytest.raises(VersionConflict):
        await store.save(cp, expected_version=0)
    with pytest.raises(VersionConflict):
        await store.save(cp, expected_version=7)
    assert await store.save(cp, expected_version=1) == 2
    assert await store.save(cp) == 3  # no expectation: appended after whatever is there
    assert (await store.load(ctx.run_id)).state == {"a": 3}


async def test_concurrent_writers_in_one_process_lose_nothing(make_store):
    """Writers on separate connections retrying on conflict: every append lands exactly once."""
    run_id = new_id()
    async with make_store() as first:
        await first.commit(ExecutionContext(run_id, {"items": []}))

    async def writer(tag: str) -> int:
        conflicts = 0
        async with make_store() as s:
            for i in range(8):
                while True:
                    ctx = await s.load_context(run_id)
                    ctx.merge({"items": ctx.get("items") + [f"{tag}{i}"]})
                    try:
                        await s.commit(ctx)
                        break
                    except VersionConflict:
                        conflicts += 1
        return conflicts

    await asyncio.gather(writer("a"), writer("b"), writer("c"))
    async with make_store() as s:
        cp = await s.load(run_id)
        assert sorted(cp.state["items"]) == sorted(f"{t}{i}" for t in "abc" for i in range(8))
        assert cp.version == 25


async def test_a_load_sees_what_another_store_wrote_since(make_store):
    """Stores remember where a run's latest chain was (SQLite its size, Redis its versions)
    to read it in one cheap step. Another connection's appends, a full row, a prune, and a
    delete and re-create under the same id must all still load exactly."""
    run_id = new_id()
    async with make_store() as a, make_store() as b:
        await committed(a, {"messages": [msg(0)]}, {"messages": [msg(1)]}, run_id=run_id)
        assert (await a.load(run_id)).version == 2  # a has read (and remembered) the chain

        async def append_in_b(i: int) -> None:
            ctx = await b.load_context(run_id)
            ctx.merge({"messages": [msg(i)]})
            await b.commit(ctx)

        await append_in_b(2)
        assert (await a.load(run_id)).state["messages"] == [msg(0), msg(1), msg(2)]
        await b.rollback(run_id, 1)  # a full row after the chain a knows
        cp = await a.load(run_id)
        assert (cp.version, cp.state["messages"]) == (4, [msg(0)])
        await append_in_b(3)
        assert (await a.load(run_id)).state["messages"] == [msg(0), msg(3)]
        await b.prune(run_id, keep=1)
        cp = await a.load(run_id)
        assert (cp.version, cp.state["messages"]) == (5, [msg(0), msg(3)])
        assert [h.version for h in await a.history(run_id)] == [5]

        await b.delete(run_id)
        again = ExecutionContext(run_id)
        for i in range(5):  # as many versions as before, other content
            again.merge({"messages": [msg(100 + i)]})
            await b.commit(again)
        cp = await a.load(run_id)
        assert (cp.version, cp.state["messages"]) == (5, [msg(100 + i) for i in range(5)])


# -- pause / update ------------------------------------------------------------------
async def test_update_is_refused_unless_paused(store):
    """update_state on a RUNNING run raises RunNotPaused and changes nothing."""
    ctx = await committed(store, {"messages": [msg(0)], "goal": "ship"})
    for status in (RunStatus.RUNNING, RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.PENDING):
        await store.set_status(ctx.run_id, status)
        with pytest.raises(RunNotPaused, match="PAUSED"):
            await store.update_state(ctx.run_id, {"goal": "changed"})
    cp = await store.load(ctx.run_id)
    assert cp.version == 1 and cp.state["goal"] == "ship"
    with pytest.raises(RunNotFound):
        await store.update_state(new_id(), {"goal": "x"})


async def test_update_of_a_paused_run_merges_through_reducers(store):
    """While PAUSED, an update appends to messages (not overwrite), persists, stays PAUSED."""
    ctx = await committed(store, {"messages": [msg(0)], "goal": "ship"})
    await store.set_status(ctx.run_id, RunStatus.PAUSED)
    version = await store.update_state(ctx.run_id, {"messages": [msg(1)], "goal": "ship v2"})
    assert version == 2
    snap = await store.snapshot(ctx.run_id)
    assert snap.status is RunStatus.PAUSED
    assert snap.state["goal"] == "ship v2"
    assert snap.state["messages"] == [msg(0), msg(1)]
    resumed = await store.load_context(ctx.run_id)
    assert resumed.get("goal") == "ship v2" and resumed.version == 2


async def test_update_is_checked_atomically(store):
    """A write requiring PAUSED fails inside the store if the run was resumed meanwhile."""
    ctx = await committed(store, {"a": 1})
    await store.set_status(ctx.run_id, RunStatus.RUNNING)
    ctx.merge({"a": 2})
    with pytest.raises(RunNotPaused):
        await store.commit(ctx, status=RunStatus.PAUSED, _require_status=RunStatus.PAUSED)
    assert (await store.load(ctx.run_id)).state == {"a": 1}


async def test_snapshot_shows_the_run(store):
    """snapshot(): current node and name, status, state, execution history, time."""
    ctx = ExecutionContext(new_id())
    ctx.merge({"execution_history": [{"node": "plan", "ok": True}], "user_input": "deploy"})
    ctx.mark_executed("plan")
    await store.commit(ctx, metadata={"node_name": "Plan the deployment"})
    snap = await store.snapshot(ctx.run_id)
    assert snap.run_id == ctx.run_id
    assert snap.current_node_id == "plan"
    assert snap.current_node_name == "Plan the deployment"
    assert snap.status is RunStatus.RUNNING
    assert snap.execution_history == [{"node": "plan", "ok": True}]
    assert snap.state["user_input"] == "deploy"
    assert snap.version == 1
    assert await store.snapshot(new_id()) is None


# -- run records ---------------------------------------------------------------------
async def test_status_and_list_runs(store):
    """set/get status; list_runs shows runs newest first and filters by status."""
    a = await committed(store, {"x": 1})
    b = await committed(store, {"x": 2})
    await store.set_status(a.run_id, RunStatus.PAUSED)
    assert await store.get_status(a.run_id) is RunStatus.PAUSED
    assert await store.get_status(new_id()) is None
    with pytest.raises(RunNotFound):
        await store.set_status(new_id(), RunStatus.PAUSED)
    runs = {r.run_id: r for r in await store.list_runs(limit=1000)}
    assert runs[a.run_id].status is RunStatus.PAUSED and runs[b.run_id].status is RunStatus.RUNNING
    assert runs[b.run_id].version == 1
    paused = {r.run_id for r in await store.list_runs(status=RunStatus.PAUSED, limit=1000)}
    assert a.run_id in paused and b.run_id not in paused
    newest = await store.list_runs(limit=1)
    assert len(newest) == 1


async def test_list_runs_in_a_window_of_update_times(store):
    """updated_after / updated_before (exclusive) keep the runs last updated in that window,
    with the status filter too, and a naive datetime is read as UTC."""
    a = await committed(store, {"x": 1})
    await asyncio.sleep(0.05)
    mid = dt.datetime.now(dt.UTC)
    await asyncio.sleep(0.05)
    b = await committed(store, {"x": 2})
    c = await committed(store, {"x": 3})
    await store.set_status(c.run_id, RunStatus.PAUSED)
    ours = {a.run_id, b.run_id, c.run_id}

    async def ids(**window: object) -> set[str]:
        return {r.run_id for r in await store.list_runs(limit=10_000, **window)} & ours  # type: ignore[arg-type]

    assert await ids(updated_after=mid) == {b.run_id, c.run_id}
    assert await ids(updated_before=mid) == {a.run_id}
    assert await ids(updated_after=mid, status=RunStatus.PAUSED) == {c.run_id}
    assert await ids(updated_after=mid.replace(tzinfo=None)) == {b.run_id, c.run_id}
    assert await ids(updated_after=mid, updated_before=mid) == set()
    far = mid + dt.timedelta(days=1)
    assert await ids(updated_before=far) == ours


async def test_delete_removes_everything(store):
    """delete(): the run, its versions and its status are gone."""
    ctx = await committed(store, {"x": 1}, {"x": 2})
    assert await store.delete(ctx.run_id) is True
    assert await store.load(ctx.run_id) is None
    assert await store.load(ctx.run_id, 1) is None
    assert await store.history(ctx.run_id) == []
    assert await store.get_run(ctx.run_id) is None
    assert await store.delete(ctx.run_id) is False
    assert await store.commit(ExecutionContext(ctx.run_id, {"again": True})) == 1


# -- expiry --------------------------------------------------------------------------
async def test_writing_to_an_expired_run_says_so_not_another_writer(make_store, backend):
    """A commit onto a run that expired under its writer is RunExpired, never "another
    writer saved first". (On Redis with keys of its own: another test's ``list_runs`` on the
    shared prefix would sweep the expired run away.)"""
    own = {"prefix": f"exp-{new_id()}:"} if backend in ("redis", "tiered") else {}
    async with make_store(expiry=ExpiryPolicy(checkpoint_ttl=dt.timedelta(seconds=0.5)), **own) as s:
        ctx = await committed(s, {"x": 1})
        await asyncio.sleep(0.8)
        ctx.merge({"x": 2})
        with pytest.raises(RunExpired) as caught:
            await s.commit(ctx)
        assert not isinstance(caught.value, VersionConflict)
        with pytest.raises(RunExpired):
            await s.set_status(ctx.run_id, RunStatus.PAUSED)
        with pytest.raises(RunExpired):  # still expired, not forgotten, after being seen
            await s.commit(ctx)


async def test_checkpoints_expire_after_their_ttl(make_store, backend):
    """With a short checkpoint TTL a run disappears; purge_expired cleans up.

    What sweeps expired runs (``purge_expired``; ``list_runs`` on Redis) must not sweep the
    other tests' on a shared server, whose runs lie expired on purpose: on Redis this store
    has keys of its own, and the SQL servers' purge is left to the SQLite run (one statement
    for every SQL store)."""
    own = {"prefix": f"exp-{new_id()}:"} if backend in ("redis", "tiered") else {}
    ttl = ExpiryPolicy(checkpoint_ttl=dt.timedelta(seconds=0.6))
    async with make_store(expiry=ttl, **own) as s:
        ctx = await committed(s, {"x": 1}, {"x": 2})
        keep = ExecutionContext(new_id(), {"y": 1})
        assert (await s.load(ctx.run_id)).state == {"x": 2}
        await asyncio.sleep(1.0)
        s.expiry = ExpiryPolicy()  # keep lives on, however slow the host is from here
        await s.commit(keep)
        # known until purged: said to be expired, not "not found"
        with pytest.raises(RunExpired, match="has expired"):
            await s.load(ctx.run_id)
        with pytest.raises(RunExpired):
            await s.load_context(ctx.run_id)
        with pytest.raises(RunExpired):
            await s.snapshot(ctx.run_id)
        assert await s.get_run(ctx.run_id) is None
        assert ctx.run_id not in {r.run_id for r in await s.list_runs(limit=10_000)}
        assert await s.history(ctx.run_id) == []
        if backend in ("memory", "sqlite", "redis"):
            await s.purge_expired()
        assert await s.load(keep.run_id) is not None
        # the id can be reused from scratch
        assert await s.commit(ExecutionContext(ctx.run_id, {"z": 1})) == 1


async def test_finished_runs_expire_after_the_completed_ttl(make_store, backend, store_url):
    """COMPLETED starts the (shorter) execution-state TTL; RUNNING runs keep the long one.

    On Redis the run index of a prefix of this test's own: any other process listing runs
    in the same index drops the ids of expired runs, after which a load says "not found"
    rather than "expired" (another test doing so in the 0.4 s between the expiry and the load
    failed this test once)."""
    policy = ExpiryPolicy(checkpoint_ttl=dt.timedelta(days=7), completed_ttl=dt.timedelta(seconds=0.6))
    prefix = f"expiry-{new_id()}:"
    options: dict[str, Any] = {"prefix": prefix} if backend == "redis" else {}
    async with contextlib.AsyncExitStack() as stack:
        if backend == "redis":
            await stack.enter_async_context(redis_client(store_url, prefix))  # removes its keys
        s = await stack.enter_async_context(make_store(expiry=policy, **options))
        done = await committed(s, {"x": 1})
        running = await committed(s, {"x": 1})
        await s.set_status(done.run_id, RunStatus.COMPLETED)
        info = await s.get_run(running.run_id)
        assert info.expires_at is not None
        assert info.expires_at - info.updated_at > dt.timedelta(days=6)
        await asyncio.sleep(1.0)
        with pytest.raises(RunExpired):
            await s.load(done.run_id)
        assert await s.load(running.run_id) is not None


# -- copy, prune, rollback -----------------------------------------------------------
async def test_copy_forks_a_run_at_a_version(store):
    """copy() starts a new run from any version; the source is untouched."""
    ctx = await committed(store, *[{"messages": [msg(i)]} for i in range(4)])
    fork = new_id("fork")
    assert await store.copy(ctx.run_id, fork, version=2) == 1
    cp = await store.load(fork)
    assert cp.state == (await store.load(ctx.run_id, 2)).state
    assert cp.executed_node_ids == ["n0", "n1"]
    assert cp.metadata["forked_from"] == {"run_id": ctx.run_id, "version": 2}
    child = await store.load_context(fork)
    child.merge({"messages": [msg(100)]})
    await store.commit(child)
    assert len((await store.load(ctx.run_id)).state["messages"]) == 4
    assert len((await store.load(fork)).state["messages"]) == 3
    with pytest.raises(VersionConflict):
        await store.copy(ctx.run_id, fork)
    with pytest.raises(RunNotFound):
        await store.copy(new_id(), new_id())


async def test_prune_keeps_the_latest_versions_loadable(store):
    """prune(keep=N) over a delta chain: the kept versions load exactly as before."""
    ctx = ExecutionContext(new_id())
    states = {}
    for i in range(10):
        ctx.merge({"messages": [msg(i)], "step_output": i})
        await store.commit(ctx)
        states[ctx.version] = ctx.snapshot()
    removed = await store.prune(ctx.run_id, keep=3)
    assert removed == 7
    assert [h.version for h in await store.history(ctx.run_id)] == [10, 9, 8]
    for v in (8, 9, 10):
        assert (await store.load(ctx.run_id, v)).state == states[v]
    assert await store.load(ctx.run_id, 7) is None
    assert await store.prune(ctx.run_id, keep=5) == 0
    # the run continues normally after pruning
    ctx.merge({"messages": [msg(10)]})
    assert await store.commit(ctx) == 11
    assert (await store.load(ctx.run_id)).state == ctx.snapshot()
    with pytest.raises(ConfigError):
        await store.prune(ctx.run_id, keep=0)


async def test_rollback_appends_the_old_state_as_a_new_version(store):
    """rollback(v) makes v's state the latest; later versions remain in history."""
    ctx = await committed(store, {"x": 1}, {"x": 2}, {"x": 3})
    assert await store.rollback(ctx.run_id, 1) == 4
    assert (await store.load(ctx.run_id)).state == {"x": 1}
    assert (await store.load(ctx.run_id, 3)).state == {"x": 3}
    assert (await store.load(ctx.run_id)).metadata == {"rolled_back_to": 1}


async def test_rollback_of_a_finished_run_to_before_its_end_pauses_it(store):
    """A COMPLETED run rolled back to a version from before its end is PAUSED (resume
    continues it from there); rolled back to its completed version, it stays COMPLETED."""
    ctx = await committed(store, {"x": 1}, {"x": 2})
    ctx.merge({"x": 3})
    done = await store.commit(ctx, status=RunStatus.COMPLETED)
    assert await store.rollback(ctx.run_id, 1) == done + 1
    assert (await store.get_run(ctx.run_id)).status is RunStatus.PAUSED
    await store.set_status(ctx.run_id, RunStatus.COMPLETED)
    await store.rollback(ctx.run_id, done)
    assert (await store.get_run(ctx.run_id)).status is RunStatus.COMPLETED


# -- damage ----------------------------------------------------------------------------
async def test_corrupt_and_truncated_rows_name_the_run_and_version(store):
    """Garbage or a cut-off payload raises CheckpointCorrupt naming run and version."""
    ctx = await committed(store, {"messages": [msg(0)]})
    good = Codec().encode({"v": 1, "kind": "delta", "ops": [["messages", "append", [msg(1)]]]})
    await raw_write(store, ctx.run_id, good[: len(good) // 2], expected=1)
    with pytest.raises(CheckpointCorrupt) as err:
        await store.load(ctx.run_id)
    assert ctx.run_id in str(err.value) and "version 2" in str(err.value)
    assert err.value.version == 2
    assert (await store.load(ctx.run_id, 1)).state == {"messages": [msg(0)]}

    other = await committed(store, {"a": 1})
    await raw_write(store, other.run_id, b"\x00garbage\xff" * 10, expected=1)
    with pytest.raises(CheckpointCorrupt, match="version 2"):
        await store.load(other.run_id)

    future = await committed(store, {"a": 1})
    await raw_write(store, future.run_id, Codec().encode({"v": 99, "kind": "delta", "ops": []}), expected=1)
    with pytest.raises(CheckpointCorrupt, match="upgrade tether"):
        await store.load(future.run_id)


async def test_encrypted_state_needs_the_right_key(make_store):
    """Encrypted payloads round-trip with the key; another key or none is a clear error."""
    key = generate_key()
    async with make_store(codec=Codec(encryption_key=key)) as s:
        ctx = await committed(s, {"secret": "hunter2", "messages": [msg(0)]}, {"messages": [msg(1)]})
        assert (await s.load(ctx.run_id)).state["secret"] == "hunter2"
    async with make_store(codec=Codec(encryption_key=generate_key())) as wrong:
        with pytest.raises(DecryptionError, match="another key"):
            await wrong.load(ctx.run_id)
    async with make_store() as plain:
        with pytest.raises(DecryptionError, match="no key"):
            await plain.load(ctx.run_id)
    with pytest.raises(ConfigError):
        Codec(encryption_key="too-short")


async def test_compressed_payloads_round_trip(make_store):
    """zstd compression (optional) is transparent to readers."""
    async with make_store(codec=Codec(compress_min_bytes=1024)) as s:
        ctx = await committed(s, {"messages": [msg(i, 500) for i in range(200)]})
        hist = await s.history(ctx.run_id)
        assert hist[0].size < 20_000  # ~100 KB of repetitive text
    async with make_store() as plain:
        assert (await plain.load(ctx.run_id)).state == ctx.snapshot()
