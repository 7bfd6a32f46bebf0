"""The memory store: loads that must never see a stale, shared or unauthenticated state.

The conformance suite checks that every store loads what was saved; these tests load
the same run again and again, as a read cache would serve it, and change what they got.
"""

from __future__ import annotations

from typing import Any

import pytest

from tether.errors import CheckpointCorrupt, ConfigError, DecryptionError, RunExpired
from tether.state import Checkpoint, Codec, ExecutionContext, RunStatus, generate_key
from tether.stores.memory import InMemoryStore

from .conftest import new_id

CACHE = [False]


@pytest.fixture(autouse=True, params=[False, True], ids=["plain", "cached"])
def _cache(request: pytest.FixtureRequest) -> None:
    """Every test on the reference backend and on the opt-in cached one."""
    CACHE[0] = request.param


def make(**options: Any) -> InMemoryStore:
    return InMemoryStore(cache=CACHE[0], **options)


def msg(i: int) -> dict[str, Any]:
    return {"role": "user", "content": f"message {i}", "id": i}


class _Id(str):
    """A run id that is a str subclass: refused, as every store refuses it."""


async def test_load_takes_its_arguments_and_checks_the_id_as_every_store_does() -> None:
    store = make()
    ctx = await chain(store, 2)
    latest = await store.load(ctx.run_id)
    assert latest is not None and latest.version == 2
    first = await store.load(ctx.run_id, version=1)
    assert first is not None and first.version == 1 and first.state["messages"] == [msg(0)]
    assert await store.load(run_id=ctx.run_id) == latest
    with pytest.raises(ConfigError, match="non-empty str"):
        await store.load(_Id(ctx.run_id))
    with pytest.raises(ConfigError, match="non-empty str"):
        await store.load("")


async def chain(store: InMemoryStore, steps: int, run_id: str | None = None) -> ExecutionContext:
    ctx = ExecutionContext(run_id or new_id(), {"messages": [msg(0)]})
    await store.commit(ctx)
    for i in range(1, steps):
        ctx.merge({"messages": [msg(i)], "step_output": i})
        ctx.mark_executed(f"n{i}")
        await store.commit(ctx, node_id=f"n{i}", metadata={"step": i})
    return ctx


async def test_a_replayed_chain_is_cached_and_loads_the_same() -> None:
    store = make()
    ctx = await chain(store, 20)
    assert [h.kind for h in await store.history(ctx.run_id)].count("delta") == 19
    first = await store.load(ctx.run_id)
    second = await store.load(ctx.run_id)
    third = await store.load(ctx.run_id)  # from the cache
    assert first == second == third
    assert third.state == ctx.snapshot()
    assert third.version == 20 and third.node_id == "n19" and third.metadata == {"step": 19}
    assert third.executed_node_ids == [f"n{i}" for i in range(1, 20)]
    # the cache is a read cache: history still shows what was written
    assert [h.kind for h in await store.history(ctx.run_id)].count("delta") == 19


async def test_a_loaded_state_is_the_callers_to_change() -> None:
    store = make()
    ctx = await chain(store, 5)
    for _ in range(3):  # a replay, a replay that keeps a copy, a cached load
        cp = await store.load(ctx.run_id)
        cp.state["messages"].append("scribble")
        cp.state["messages"][0]["content"] = "scribbled"  # nested: the copy goes all the way down
        cp.state["extra"] = 1
        cp.executed_node_ids.append("x")
        cp.metadata["m"] = 1
    again = await store.load(ctx.run_id)
    assert again.state == ctx.snapshot()
    assert "x" not in again.executed_node_ids and "m" not in again.metadata


async def test_a_kept_chain_state_loads_every_type_exactly() -> None:
    """A replayed chain's state is kept as objects and copied per load: datetimes (their
    zone too) and bytes must come back as they went in, and no two loads may share a
    container."""
    import datetime as dt
    from zoneinfo import ZoneInfo

    store = make()
    when = dt.datetime(2026, 3, 29, 1, 30, tzinfo=ZoneInfo("Europe/Paris"))
    ctx = ExecutionContext(new_id(), {"messages": [msg(0)], "blob": b"\x00\xff"})
    await store.commit(ctx)
    ctx.merge({"messages": [{"at": when, "naive": dt.datetime(2026, 1, 1), "raw": b"\x01", "n": None}]})
    await store.commit(ctx, metadata={"at": when, "tags": ["x"]})
    loads = [await store.load(ctx.run_id) for _ in range(4)]  # replay, replay + keep, two copies
    for cp in loads:
        assert cp.state == ctx.snapshot()
        got = cp.state["messages"][1]
        assert got["at"] == when and got["at"].tzinfo == ZoneInfo("Europe/Paris")
        assert got["naive"].tzinfo is None and got["raw"] == b"\x01" and cp.state["blob"] == b"\x00\xff"
        assert cp.metadata == {"at": when, "tags": ["x"]} and cp.metadata["at"].tzinfo == when.tzinfo
    third, fourth = loads[2], loads[3]
    assert third.metadata["tags"] is not fourth.metadata["tags"]
    assert third.state["messages"] is not fourth.state["messages"]
    assert third.state["messages"][1] is not fourth.state["messages"][1]


async def test_a_saved_full_row_is_served_from_the_cache_exactly() -> None:
    """A full save fills the cache (the state kept packed apart from the head); a load
    from it must equal the general path's, every allowed type and the metadata included,
    and hand out copies."""
    import datetime as dt
    from zoneinfo import ZoneInfo

    store = make()
    when = dt.datetime(2026, 3, 29, 1, 30, tzinfo=ZoneInfo("Europe/Paris"))
    state = {
        "t": when,
        "naive": dt.datetime(2026, 1, 1),
        "b": b"\x00\xff",
        "f": 1.5,
        "n": None,
        "l": [1, "a"],
    }
    cp = Checkpoint(
        run_id=new_id(),
        node_id="n3",
        state=state,
        executed_node_ids=["n1", "n3"],
        status=RunStatus.PAUSED,
        metadata={"at": when, "tags": ["x"]},
    )
    await store.save(cp)
    cached = await store.load(cp.run_id)
    general = await store.load(cp.run_id, 1)  # the decode every store runs
    assert cached == general
    assert cached.state == state and cached.state["t"].tzinfo == ZoneInfo("Europe/Paris")
    assert cached.metadata == {"at": when, "tags": ["x"]} and cached.status is RunStatus.PAUSED
    cached.metadata["tags"].append("scribble")
    cached.executed_node_ids.append("x")
    cached.state["l"].append(2)
    assert await store.load(cp.run_id) == general


async def test_a_run_read_once_per_save_is_never_packed() -> None:
    store = make()
    ctx = await chain(store, 3)
    for i in range(5):
        assert (await store.load(ctx.run_id)).state == ctx.snapshot()
        ctx.merge({"messages": [msg(50 + i)]})
        await store.commit(ctx)


async def test_every_save_kind_moves_the_cache_on() -> None:
    store = make()
    ctx = await chain(store, 6)
    for _ in range(2):
        assert (await store.load(ctx.run_id)).version == 6
    ctx.merge({"messages": [msg(99)]})
    await store.commit(ctx, status=RunStatus.PAUSED)  # delta: the cache must not answer
    cp = await store.load(ctx.run_id)
    assert cp.version == 7 and cp.state == ctx.snapshot() and cp.status is RunStatus.PAUSED
    await store.update_state(ctx.run_id, {"note": "from a human"})
    assert (await store.load(ctx.run_id)).state["note"] == "from a human"
    await store.rollback(ctx.run_id, 2)  # a full row
    cp = await store.load(ctx.run_id)
    assert cp.version == 9 and cp.state == (await store.load(ctx.run_id, 2)).state
    assert await store.prune(ctx.run_id, keep=1) == 8
    assert (await store.load(ctx.run_id)).state == cp.state
    ctx = await store.load_context(ctx.run_id)
    ctx.merge({"messages": [msg(100)]})
    await store.commit(ctx)  # a delta after the pruned full row
    assert await store.prune(ctx.run_id, keep=1) == 1  # now the lone full row, cache empty
    assert (await store.load(ctx.run_id)).state == ctx.snapshot()
    assert (await store.load(ctx.run_id)).state == ctx.snapshot()
    assert (await store.load(ctx.run_id)).state == ctx.snapshot()
    assert await store.delete(ctx.run_id)
    assert await store.load(ctx.run_id) is None
    fresh = await chain(store, 3, run_id=ctx.run_id)
    assert (await store.load(ctx.run_id)).state == fresh.snapshot()


async def test_a_recreated_run_never_sees_the_old_cache() -> None:
    store = make()
    old = await chain(store, 4)
    for _ in range(2):
        assert (await store.load(old.run_id)).state == old.snapshot()
    await store.delete(old.run_id)
    new = ExecutionContext(old.run_id, {"messages": [msg(100)]})
    for i in range(3):
        await store.commit(new)
        new.merge({"messages": [msg(101 + i)]})
    await store.commit(new)
    assert (await store.load(old.run_id)).state == new.snapshot()


async def test_encrypted_chains_are_not_cached_in_the_clear() -> None:
    """Stores sharing a name share data: a store with another key (or none) must keep
    failing, however often the right key has loaded the run."""
    name = new_id("shared")
    right = InMemoryStore(name, codec=Codec(encryption_key=generate_key()))
    ctx = await chain(right, 5)
    for _ in range(2):
        assert (await right.load(ctx.run_id)).state == ctx.snapshot()
    with pytest.raises(DecryptionError, match="no key"):
        await InMemoryStore(name).load(ctx.run_id)
    with pytest.raises(DecryptionError, match="another key"):
        await InMemoryStore(name, codec=Codec(encryption_key=generate_key())).load(ctx.run_id)


async def test_an_expired_run_is_not_served_from_the_cache() -> None:
    import datetime as dt

    from tether.stores import ExpiryPolicy

    store = InMemoryStore(expiry=ExpiryPolicy(checkpoint_ttl=dt.timedelta(seconds=-1)))
    ctx = ExecutionContext(new_id(), {"a": 1})
    await store.commit(ctx)  # a full plain row: cached at once, already past its expiry
    with pytest.raises(RunExpired):
        await store.load(ctx.run_id)


async def test_a_full_row_from_a_newer_tether_fails_on_the_cached_path_too() -> None:
    import time

    from tether.state.serde import state_offset
    from tether.stores.base import Write

    store = make()
    run_id = new_id()
    head = {"v": 99, "kind": "full", "executed": []}
    future = Codec().encode({**head, "state": {}})
    write = Write(
        run_id=run_id,
        kind="full",
        payload=future,
        node_id=None,
        status=RunStatus.RUNNING,
        created_at=time.time(),
        expires_at=None,
        expected_version=0,
        state_at=state_offset(future, head),  # as if this tether had written it
        head=head,
    )
    assert write.state_at > 0
    await store._write(write)
    with pytest.raises(CheckpointCorrupt, match="upgrade tether") as err:
        await store.load(run_id)
    assert run_id in str(err.value)


async def test_full_writes_use_the_fast_encoder_only_when_no_datetime_is_held(monkeypatch) -> None:
    import datetime as dt

    from tether.state import serde

    calls: list[int] = []
    real = serde._fast_pack

    def counting(payload: Any) -> bytes:
        calls.append(1)
        return real(payload)

    monkeypatch.setattr(serde, "_fast_pack", counting)
    store = make()
    per = 2 if CACHE[0] else 1  # the cached backend also encodes the head alone (its offset)
    ctx = ExecutionContext(new_id(), {"messages": [msg(0)]})
    await store.commit(ctx)  # full, no datetime: msgspec
    assert len(calls) == per
    ctx.put("when", dt.datetime(2026, 1, 1))
    await store.commit(ctx)  # a delta: ormsgpack
    ctx.restore(ctx.snapshot())
    await store.commit(ctx)  # full, with a datetime: ormsgpack
    assert len(calls) == per
    assert (await store.load(ctx.run_id)).state["when"] == dt.datetime(2026, 1, 1)
    ctx.delete("when")
    await store.commit(ctx, metadata={"at": dt.datetime(2026, 1, 1)})  # full; the datetime in metadata
    assert len(calls) == per
    ctx.merge({"messages": [msg(1)]})
    ctx.restore(ctx.snapshot())
    await store.commit(ctx)
    assert len(calls) == 2 * per
    loaded = await store.load_context(ctx.run_id)  # read back: walked once when asked
    assert loaded._dated is None
    loaded.put("scratch", 1)
    loaded.delete("scratch")  # makes the next write a full one
    await store.commit(loaded)
    assert loaded._dated == set()
    assert len(calls) == 3 * per and (await store.load(ctx.run_id)).state == ctx.snapshot()


async def test_the_run_record_built_on_demand_follows_every_change() -> None:
    """``get_run`` builds the ``RunInfo`` once and keeps it: every save, status change and
    prune must drop it, or a reader would see a stale version, status or chain."""
    store = make()
    ctx = await chain(store, 3)
    first = await store.get_run(ctx.run_id)
    assert first is not None and first.version == 3 and await store.get_run(ctx.run_id) is first
    ctx.merge({"messages": ["m"]})
    await store.commit(ctx, node_id="n4")
    after = await store.get_run(ctx.run_id)
    assert after is not None and (after.version, after.node_id) == (4, "n4")
    assert after.created_at == first.created_at and after.updated_at >= first.updated_at
    assert after.chain.length == first.chain.length + 1
    await store.set_status(ctx.run_id, RunStatus.PAUSED)
    paused = await store.get_run(ctx.run_id)
    assert paused is not None and paused.status is RunStatus.PAUSED and paused.version == 4
    assert [r.status for r in await store.list_runs() if r.run_id == ctx.run_id] == [RunStatus.PAUSED]
    await store.prune(ctx.run_id, keep=1)
    pruned = await store.get_run(ctx.run_id)
    assert pruned is not None and pruned.chain.base_version == 4 and pruned.chain.length == 0
    assert (await store.load(ctx.run_id)).state == ctx.snapshot()


async def test_a_named_store_shares_its_runs_with_its_own_kind_only() -> None:
    """Two stores of one name see one another's runs; the cached kind keeps its own (its
    runs hold the cache), so a plain store of that name does not see them."""
    name = f"perf21b-{new_id()}"
    first, second = InMemoryStore(name, cache=CACHE[0]), InMemoryStore(name, cache=CACHE[0])
    other = InMemoryStore(name, cache=not CACHE[0])
    ctx = ExecutionContext(new_id(), {"x": 1})
    await first.commit(ctx)
    ctx.merge({"x": 2})
    await first.commit(ctx)
    got = await second.load(ctx.run_id)
    assert got is not None and got.state == {"x": 2} and got.version == 2
    assert await other.load(ctx.run_id) is None
