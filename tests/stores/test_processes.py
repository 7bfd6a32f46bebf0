"""Several real processes on one run: conflicts, no lost updates, kill -9 mid-save."""

from __future__ import annotations

import asyncio
import random

import pytest

from tether.state import ExecutionContext

from ._worker import blob, item
from .conftest import kill_after, new_id, spawn

pytestmark = pytest.mark.slow


@pytest.fixture
def url(backend: str, store_url: str) -> str:
    if backend == "memory":
        pytest.skip("the memory store lives inside one process")
    return store_url


async def test_two_processes_appending_lose_no_update(url, store):
    """Two writer processes retrying on conflict: all 2 x 15 appends land exactly once."""
    run_id = new_id()
    await store.commit(ExecutionContext(run_id, {"items": []}))
    procs = [spawn(url, run_id, "append", tag, "15") for tag in ("a", "b")]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    cp = await store.load(run_id)
    assert sorted(cp.state["items"]) == sorted(f"{t}{i}" for t in "ab" for i in range(15))
    assert cp.version == 31


async def test_exactly_one_of_two_racing_processes_wins_each_version(url, store, tmp_path):
    """Both load version n and commit at the same instant: one wins, one conflicts."""
    run_id = new_id()
    await store.commit(ExecutionContext(run_id, {"items": []}))
    for round_ in range(3):
        go = tmp_path / f"go{round_}"
        procs = [spawn(url, run_id, "race", str(go)) for _ in range(2)]
        for proc in procs:  # both have loaded and wait at the barrier, however slow the host
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        go.touch()
        results = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
        assert results == ["conflict", "won"], results
    cp = await store.load(run_id)
    assert cp.version == 4 and len(cp.state["items"]) == 3


async def test_kill_9_mid_save_leaves_a_consistent_store(url, store):
    """A writer SIGKILLed at random instants: the latest checkpoint always loads whole."""
    run_id = new_id()
    rng = random.Random(7)
    for _ in range(4):
        last_reported = kill_after(url, run_id, "churn", 3, rng.uniform(0, 0.03))
        cp = await store.load(run_id)
        assert cp is not None
        step = cp.state["step"]
        assert step >= last_reported  # nothing reported as saved was lost
        assert cp.state["blob"] == blob(step)  # and the state is whole, never torn
        assert cp.version == step


async def settled(store, run_id: str) -> None:
    """Wait until the run's latest version stops moving: a database server finishes a
    transaction whose COMMIT a killed client had already sent, after the kill."""
    seen = None
    while (info := await store.get_run(run_id)) is not None and info.version != seen:
        seen = info.version
        await asyncio.sleep(0.3)


async def test_kill_9_mid_seal_leaves_a_consistent_store(url, store):
    """A writer that seals every third commit, SIGKILLed at random instants: the latest
    state always loads whole, every version reported saved is there, and the history
    holds each version once."""
    run_id = new_id()
    rng = random.Random(11)
    for _ in range(5):
        last_reported = kill_after(url, run_id, "seal", 4 + rng.randrange(3), rng.uniform(0, 0.01))
        await settled(store, run_id)  # a COMMIT the killed client had sent may still land
        cp = await store.load(run_id)
        assert cp is not None
        count = len(cp.state["items"])
        assert count >= last_reported
        assert cp.state["items"] == [item(i) for i in range(1, count + 1)]
        assert cp.version == count
        assert [h.version for h in await store.history(run_id)] == list(range(count, 0, -1))
    kinds = {h.kind for h in await store.history(run_id)}
    assert {"segment", "sealed"} <= kinds, kinds
