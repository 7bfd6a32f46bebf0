"""Fencing tokens, checked inside the atomic write on every backend: a lease holder whose
token is no longer the run's current one writes nothing, and tokens only ever increase."""

from __future__ import annotations

import time

import pytest

from tests.stores.conftest import new_id
from tether.errors import LeaseLost, VersionConflict
from tether.state import ExecutionContext, RunStatus, default_registry
from tether.stores import CheckpointStore
from tether.stores.fencing import Fence

REDUCERS = default_registry().register("items", "append")


async def _taken(
    store: CheckpointStore, run_id: str, *, until: float | None = None
) -> tuple[ExecutionContext, Fence]:
    """A holder that took the run's lease (a resume), from the latest checkpoint."""
    ctx = await store.load_context(run_id, reducers=REDUCERS)
    assert ctx is not None
    fence = Fence(until=until)
    ctx.merge({"items": ["take"]})
    await store.commit(ctx, fence=fence)
    assert fence.token > 0
    return ctx, fence


async def test_a_write_with_a_token_taken_over_is_refused_and_writes_nothing(store):
    """Two take-overs: the first holder's commit fails with LeaseLost, its state stays out."""
    run_id = new_id()
    first = ExecutionContext(run_id, {"items": []}, reducers=REDUCERS)
    old = Fence()
    await store.commit(first, fence=old)  # a start takes the first lease
    assert old.token > 0
    info = await store.get_run(run_id)
    assert info.fence == old.token

    _ctx2, new = await _taken(store, run_id)
    assert new.token > old.token
    before = await store.get_run(run_id)

    first.merge({"items": ["stale"]})
    first.version = before.version  # even at the right version the old token is refused
    with pytest.raises(LeaseLost) as caught:
        await store.commit(first, status=RunStatus.FAILED, fence=old)
    assert caught.value.held == old.token and caught.value.current == new.token
    assert str(run_id) in str(caught.value)
    after = await store.get_run(run_id)
    assert (after.version, after.status, after.fence) == (before.version, before.status, new.token)
    cp = await store.load(run_id)
    assert "stale" not in cp.state["items"]


async def test_the_current_holder_writes_and_unfenced_writers_keep_working(store):
    """The holder's own writes land; a plain commit (no token) and set_status still do too."""
    run_id = new_id()
    ctx = ExecutionContext(run_id, {"items": []}, reducers=REDUCERS)
    fence = Fence()
    await store.commit(ctx, fence=fence)
    token = fence.token
    for i in range(3):
        ctx.merge({"items": [i]})
        await store.commit(ctx, fence=fence)
    assert fence.token == token  # only a take changes the token
    plain = await store.load_context(run_id, reducers=REDUCERS)
    plain.merge({"items": ["plain"]})
    await store.commit(plain, status=RunStatus.PAUSED)
    await store.set_status(run_id, RunStatus.PAUSED)
    info = await store.get_run(run_id)
    assert info.fence == token and info.status is RunStatus.PAUSED
    cp = await store.load(run_id)
    assert cp.state["items"] == [0, 1, 2, "plain"]


async def test_a_stale_holder_gets_lease_lost_before_a_version_conflict(store):
    """A stale holder behind on versions learns it lost the lease, not that it raced."""
    run_id = new_id()
    ctx = ExecutionContext(run_id, {"items": []}, reducers=REDUCERS)
    old = Fence()
    await store.commit(ctx, fence=old)
    other, _new = await _taken(store, run_id)
    other.merge({"items": ["more"]})
    await store.commit(other, fence=_new)
    ctx.merge({"items": ["stale"]})
    with pytest.raises(LeaseLost):
        await store.commit(ctx, fence=old)
    with pytest.raises(VersionConflict):  # without a token it is the plain race it always was
        await store.commit(ctx)


async def test_renewal_is_fenced_and_moves_the_deadline(store):
    """A renewal lands for the current token only, and changes no version."""
    run_id = new_id()
    ctx = ExecutionContext(run_id, {"items": []}, reducers=REDUCERS)
    old = Fence(until=time.time() + 5)
    await store.commit(ctx, fence=old)
    info = await store.get_run(run_id)
    assert info.lease_until == pytest.approx(time.time() + 5, abs=2)
    until = time.time() + 60
    await store.renew_lease(run_id, old.token, until)
    info = await store.get_run(run_id)
    assert info.lease_until == pytest.approx(until, abs=0.01)
    assert info.version == 1
    _ctx, new = await _taken(store, run_id, until=time.time() + 30)
    with pytest.raises(LeaseLost) as caught:
        await store.renew_lease(run_id, old.token, time.time() + 600)
    assert caught.value.current == new.token
    info = await store.get_run(run_id)
    assert info.lease_until == pytest.approx(time.time() + 30, abs=2)
    with pytest.raises(LeaseLost):
        await store.renew_lease(new_id("absent"), new.token, time.time() + 5)


async def test_release_clears_the_deadline_and_keeps_the_token(store):
    """A holder's last write releases the lease: no deadline, the token stays current."""
    run_id = new_id()
    ctx = ExecutionContext(run_id, {"items": []}, reducers=REDUCERS)
    fence = Fence(until=time.time() + 30)
    await store.commit(ctx, fence=fence)
    fence.until = 0
    ctx.merge({"items": ["last"]})
    await store.commit(ctx, status=RunStatus.COMPLETED, fence=fence)
    info = await store.get_run(run_id)
    assert info.lease_until is None and info.fence == fence.token
    with pytest.raises(LeaseLost):  # a late heartbeat does not revive a released lease
        await store.renew_lease(run_id, fence.token, time.time() + 30)
    assert (await store.get_run(run_id)).lease_until is None


async def test_tokens_increase_across_take_overs_and_a_reopened_store(make_store, backend):
    """Every take-over gets a greater token, also from a store opened again."""
    if backend == "memory":
        pytest.skip("a memory store lives in one process: there is nothing to reopen")
    run_id = new_id()
    tokens = []
    async with make_store() as store:
        ctx = ExecutionContext(run_id, {"items": []}, reducers=REDUCERS)
        fence = Fence()
        await store.commit(ctx, fence=fence)
        tokens.append(fence.token)
        for _ in range(3):
            _ctx, fence = await _taken(store, run_id)
            tokens.append(fence.token)
    async with make_store() as again:
        assert (await again.get_run(run_id)).fence == tokens[-1]
        for _ in range(2):
            _ctx, fence = await _taken(again, run_id)
            tokens.append(fence.token)
    assert tokens == sorted(set(tokens)), tokens
