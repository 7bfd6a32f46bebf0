"""One Runner drives many runs at once: nothing of one run's drive leaks into another's."""

from __future__ import annotations

import asyncio

from tests.stores.conftest import new_id
from tether.runtime import LogicError, RetryPolicy, Runner, Step, Workflow
from tether.state import RunStatus
from tether.state.reserved import runtime_state

FAST = RetryPolicy(attempts=1)


async def test_two_runs_on_one_runner_interleave_and_each_completes_its_own_plan(store):
    """Run A re-plans while run B is mid-way: B keeps the original plan, A gets its new one."""
    b_may_finish, a_replanned = asyncio.Event(), asyncio.Event()
    order: list[str] = []

    async def step(sc):
        order.append(f"{sc.run_id[:1]}:{sc.step.id}")
        if sc.run_id.startswith("b") and sc.step.id == "two":
            await b_may_finish.wait()  # B is parked inside its second step while A re-plans
        if sc.run_id.startswith("a") and sc.step.id == "two" and not a_replanned.is_set():
            raise LogicError("precondition not met: the plan must change")
        await asyncio.sleep(0)
        return {"messages": [sc.step.id]}

    async def fixed(sc):
        order.append(f"{sc.run_id[:1]}:{sc.step.id}")
        return {"messages": [sc.step.id]}

    def replan(report, ctx):
        a_replanned.set()
        return [Step(id="fix", fn=fixed), Step(id="two-again", fn=fixed, deps=("fix",))]

    wf = Workflow.plan([Step(id=s, fn=step) for s in ("one", "two", "three")])
    runner = Runner(wf, store, retry=FAST, replan=replan)
    a_id, b_id = new_id("a"), new_id("b")
    task_b = asyncio.create_task(runner.start(b_id))
    while "b:two" not in order:
        await asyncio.sleep(0.005)
    result_a = await runner.start(a_id)
    b_may_finish.set()
    result_b = await task_b

    assert result_a.status is RunStatus.COMPLETED, result_a.report and result_a.report.render()
    assert result_b.status is RunStatus.COMPLETED, result_b.report and result_b.report.render()
    assert result_a.state["messages"] == ["one", "fix", "two-again"]
    assert result_b.state["messages"] == ["one", "two", "three"]
    assert list(runtime_state(result_b.state)["todo"]) == ["one", "two", "three"]
    assert runner.workflow is wf  # a re-plan changes that run's plan, not the runner's
    assert (await store.load(b_id)).executed_node_ids == ["one", "two", "three"]


async def test_many_concurrent_runs_on_one_runner_all_complete(store):
    """Twenty runs started together on one Runner each run every step once, in order."""

    async def step(sc):
        await asyncio.sleep(0.001)
        return {"messages": [sc.step.id]}

    runner = Runner(Workflow.plan([Step(id=f"s{i}", fn=step) for i in range(4)]), store, retry=FAST)
    ids = [new_id("many") for _ in range(20)]
    results = await asyncio.gather(*(runner.start(i) for i in ids))
    assert {r.status for r in results} == {RunStatus.COMPLETED}
    assert all(r.state["messages"] == ["s0", "s1", "s2", "s3"] for r in results)
    assert [r.run_id for r in results] == ids
