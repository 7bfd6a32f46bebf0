"""A routed step writes what it changed in the route (``[left, *chosen]``), not the route:
every version still loads to the route it ran with, and runs that stored whole routes
resume on their path with their visits counted."""

from __future__ import annotations

import copy

import pytest

from tests.runtime.test_routing import counter_loop
from tests.stores.conftest import new_id
from tether.runtime import RetryPolicy, Runner, Step, StepContext, Workflow
from tether.state import ExecutionContext, RunStatus
from tether.state.reserved import OP, REDUCER, RESERVED, route_step, runtime_state, runtime_update


def test_a_routing_step_leaves_its_entry_and_puts_the_chosen_in_front():
    route = {"pending": ["b", "a", "c"], "visits": {"a": 2, "b": 1}}
    assert route_step(route, [1, "x", "a"]) == {
        "pending": ["x", "a", "b", "c"],
        "visits": {"a": 3, "b": 1, "x": 1},
    }
    assert route == {"pending": ["b", "a", "c"], "visits": {"a": 2, "b": 1}}  # not changed
    assert route_step(None, [-1, "a"]) == {"pending": ["a"], "visits": {"a": 1}}
    assert route_step(route, [0]) == {"pending": ["a", "c"], "visits": {"a": 2, "b": 1}}
    assert route_step(route, [7])["pending"] == ["b", "a", "c"]  # out of range: nothing left
    old = {"pending": ["c"], "visits": {"c": 1}, "total": 1}  # a route that kept its total
    assert route_step(old, [0, "d", "e"]) == {
        "pending": ["d", "e"],
        "visits": {"c": 1, "d": 1, "e": 1},
        "total": 3,
    }


def test_a_routed_step_writes_one_small_op_for_its_leaving_and_its_goto():
    ctx = ExecutionContext(
        "r", {RESERVED: {"route": {"pending": ["work"], "visits": {"work": 4, "check": 4}}}}
    )
    ctx.take_changes()
    wf = counter_loop(10)
    sc = StepContext(run_id="r", step=wf["work"], state=ctx, workflow=wf)
    sc.goto("check")
    sc.leave_route()
    routes = [arg["route"] for key, op, arg in ctx.pending().ops if key == RESERVED and "route" in arg]
    assert routes == [[0, "check"]]  # (and the goto's event in the event log)
    assert runtime_state(ctx)["route"] == {"pending": ["check"], "visits": {"work": 4, "check": 5}}


def test_replaying_routing_steps_in_place_gives_what_the_reducer_gave():
    from tether.stores._segment import apply_ops

    updates = [
        {"route": {"pending": ["a"], "visits": {"a": 1}, "total": 1}},  # a whole route (old runs)
        {"route": [0, "b", "c"]},
        {"route": [1]},
        {"route": [-1, "a"], "event_log": [{"k": 1}]},
    ]
    part: dict[str, object] = {}
    for update in updates:
        part = REDUCER(part, update)
    replayed: dict[str, object] = {}
    apply_ops(replayed, [[RESERVED, OP, update] for update in updates])
    assert replayed == {RESERVED: part}
    assert part["route"] == {"pending": ["a", "b"], "visits": {"a": 2, "b": 1, "c": 1}, "total": 4}


def long_loop(rounds: int, seen: dict[int, object]) -> Workflow:
    """A loop between a step with a short id and one whose id makes a routing op long
    enough for the store's patches to look at (they must leave it whole), recording the route each step starts from
    under the version it was loaded at."""
    far = "a_step_whose_id_makes_a_long_routing_op"

    def look(sc: StepContext) -> None:
        seen[sc.state.version] = copy.deepcopy(runtime_state(sc.state).get("route"))

    def near(sc: StepContext) -> dict:
        look(sc)
        n = int(sc.get("n", 0))
        if n < rounds:
            if n % 3 == 1:
                sc.goto(far, "near", reason="two at once")
            else:
                sc.goto(far)
        return {"n": n + 1}

    def away(sc: StepContext) -> dict:
        look(sc)
        trail = [*sc.get("trail", []), "f"]
        if len(trail) % 2:  # again, with the same routing op as the last step's
            sc.goto(far)
        elif runtime_state(sc.state)["route"]["pending"][1:2] != ["near"]:
            sc.goto("near")
        return {"trail": trail}

    return Workflow([Step(id="near", fn=near), Step(id=far, fn=away)])


async def test_every_version_of_a_routed_run_loads_with_the_route_it_ran_with(store):
    seen: dict[int, object] = {}
    run_id = new_id("routes")
    result = await Runner(long_loop(12, seen), store).start(run_id)
    assert result.status is RunStatus.COMPLETED
    assert len(seen) > 20
    for version, route in seen.items():
        cp = await store.load(run_id, version)
        assert cp is not None and runtime_state(cp.state).get("route") == route, version
    final = runtime_state((await store.load(run_id)).state)["route"]
    visits = {"near": 12, "a_step_whose_id_makes_a_long_routing_op": 24}
    assert final == {"pending": [], "visits": visits}


def old_run(total: bool) -> tuple[dict[str, object], list[dict[str, object]]]:
    """check -> work -> check stored by the previous runtime: each step wrote the whole
    route (the visits of every step) under the reserved key; paused with ``work`` queued."""
    todo = {
        s: {"name": s, "phase": "main", "status": "pending", "attempts": 0} for s in ["check", "work", "done"]
    }
    part = {"todo": todo, "event_log": [], "lease": None, "pause_reason": None}
    routes = [
        {"pending": ["work"], "visits": {"work": 1}, "total": 1},
        {"pending": ["check"], "visits": {"work": 1, "check": 1}, "total": 2},
        {"pending": ["work"], "visits": {"work": 2, "check": 1}, "total": 3},
    ]
    if not total:
        for r in routes:
            del r["total"]
    return {RESERVED: part, "trail": [], "n": 0}, routes


async def store_old_run(store, run_id: str, *, total: bool) -> None:
    state, routes = old_run(total)
    ctx = ExecutionContext(run_id, state)
    for i, (step, route) in enumerate(zip(["check", "work", "check"], routes, strict=True)):
        done = {step: {"name": step, "phase": "main", "status": "done", "attempts": 1}}
        ctx.merge({"trail": [*ctx.get("trail"), step], "n": int(ctx.get("n")) + (step == "work")})
        ctx.merge(runtime_update(todo=done, route=route))
        ctx.mark_executed(step)
        status = RunStatus.PAUSED if i == 2 else RunStatus.RUNNING
        await store.commit(ctx, node_id=step, status=status)


@pytest.mark.parametrize("total", [True, False])
async def test_a_run_that_stored_whole_routes_resumes_on_its_path(store, total):
    run_id = new_id("oldroutes")
    await store_old_run(store, run_id, total=total)
    result = await Runner(counter_loop(3), store).resume(run_id)
    assert result.status is RunStatus.COMPLETED
    assert result.state["trail"] == ["check", "work", "check"] + ["work", "check"] * 2 + ["done"]
    route = runtime_state((await store.load(run_id)).state)["route"]
    expected = {"pending": [], "visits": {"work": 3, "check": 3, "done": 1}}
    assert route == ({**expected, "total": 7} if total else expected)


async def test_a_resumed_old_run_counts_the_visits_it_stored(store):
    """The visits the previous runtime stored count against a step's bound."""
    run_id = new_id("oldbound")
    await store_old_run(store, run_id, total=False)
    result = await Runner(counter_loop(3, max_visits=2), store).resume(run_id)
    assert result.status is RunStatus.PAUSED  # work would run a third time: a LOGIC failure
    assert result.report is not None and result.report.error_type == "LoopLimitExceeded"
    assert result.state["n"] == 2  # one more work than the stored run, not two


async def test_a_retried_step_routes_as_its_last_attempt_chose(store):
    """A goto of an attempt that then failed is void: the retry's choice alone is queued,
    counted and logged (and a retry that chooses nothing queues nothing)."""
    attempts: list[int] = []

    def pick(sc: StepContext) -> dict:
        attempts.append(sc.attempt)
        if sc.attempt == 1:
            sc.goto("b", reason="first try")
            raise ConnectionError("flaky")
        if sc.get("quiet"):
            return {"picked": None}
        sc.goto("c", reason="second try")
        return {"picked": "c"}

    def mark(sc: StepContext) -> dict:
        return {"trail": [*sc.get("trail", []), sc.step.id]}

    for quiet in (False, True):
        wf = Workflow(
            [
                Step(id="a", fn=pick, retry=RetryPolicy(attempts=2, initial=0.0, jitter=0.0)),
                Step(id="b", fn=mark, deps=("a",)),
                Step(id="c", fn=mark, deps=("a",)),
            ]
        )
        run_id = new_id("retried")
        result = await Runner(wf, store).start(run_id, {"quiet": quiet})
        assert result.status is RunStatus.COMPLETED
        part = runtime_state(result.state)
        routes = [e["detail"]["to"] for e in part.get("event_log", []) if e["kind"] == "route"]
        if quiet:
            assert result.state["trail"] == ["b", "c"] and routes == [] and "route" not in part
        else:
            assert result.state["trail"] == ["c", "b"]  # c chosen, then b in declaration order
            assert routes == [["c"]] and part["route"] == {"pending": [], "visits": {"c": 1}}
    assert attempts == [1, 2, 1, 2]
