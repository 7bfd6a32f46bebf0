"""In one process: a runner whose run was taken over gets LeaseLost at its next write and
records nothing; a store no other process can open is renewed from the event loop."""

from __future__ import annotations

import asyncio

import pytest

from tests.stores.conftest import new_id
from tether.errors import LeaseLost
from tether.runtime import Runner, Step, StepContext, Workflow
from tether.runtime.lease import lease_is_dead
from tether.state import RunStatus
from tether.state.reserved import runtime_get


async def test_a_runner_taken_over_mid_step_gets_lease_lost_and_writes_nothing(store):
    """Runner A is inside a step when runner B takes the run over (force) and completes it:
    A's next commit is refused, A.start raises LeaseLost, and the run is as B left it."""
    run_id = new_id("taken")
    inside, release = asyncio.Event(), asyncio.Event()
    events: list[str] = []

    async def slow(sc: StepContext) -> dict:
        inside.set()
        await release.wait()
        return {"by": "A"}

    async def fast(sc: StepContext) -> dict:
        return {"by": "B"}

    a = Runner(
        Workflow.plan([Step(id="one", fn=slow), Step(id="two", fn=slow)]),
        store,
        on_event=lambda e: events.append(e.kind),
    )
    b = Runner(Workflow.plan([Step(id="one", fn=fast), Step(id="two", fn=fast)]), store, heartbeat=False)
    task = asyncio.create_task(a.start(run_id))
    await inside.wait()
    held = (await store.get_run(run_id)).fence
    done = await b.resume(run_id, force=True)  # (A looks alive: only force takes it)
    assert done.status is RunStatus.COMPLETED
    after = await store.get_run(run_id)
    assert after.fence > held
    history = [h.version for h in await store.history(run_id)]

    release.set()
    with pytest.raises(LeaseLost) as caught:
        await task
    assert (caught.value.held, caught.value.current) == (held, after.fence)
    again = await store.get_run(run_id)
    assert (again.version, again.status) == (after.version, RunStatus.COMPLETED)
    assert [h.version for h in await store.history(run_id)] == history
    cp = await store.load(run_id)
    assert cp.state["by"] == "B"
    assert events[-1] == "step_started"  # no "interrupted", no "failed": A recorded nothing
    log = runtime_get(cp.state, "event_log")
    unconfirmed = [(e["step"], e["detail"]["token"]) for e in log if e["kind"] == "side_effects_unconfirmed"]
    assert unconfirmed == [("one", held)]  # B said what A may have done in its step


async def test_a_memory_store_lease_is_renewed_from_the_event_loop():
    """No other process can open a memory store: its runner's lease is renewed by a task, so
    an awaiting step longer than the lease keeps the run alive."""
    from tether.stores import open_store

    async with open_store("memory://") as store:
        run_id = new_id("mem")
        seen_alive: list[bool] = []

        async def long(sc: StepContext) -> dict:
            for _ in range(6):
                await asyncio.sleep(0.25)
                info = await store.get_run(run_id)
                cp = await store.load(run_id)
                seen_alive.append(not lease_is_dead(runtime_get(cp.state, "lease"), until=info.lease_until))
            return {"done": True}

        # the lease is 0.6 s; the step takes 1.5 s; it stays alive only if renewed
        result = await Runner(Workflow.plan([Step(id="long", fn=long)]), store, lease_ttl=0.6).start(run_id)
    assert result.status is RunStatus.COMPLETED
    assert seen_alive == [True] * 6
