"""The runtime keeps its own state under one reserved key: runs of the previous layout are
upgraded when resumed, and a user key of that name is refused everywhere it can enter."""

from __future__ import annotations

import pytest

from tests.stores.conftest import new_id
from tether.errors import ConfigError
from tether.runtime import FailureKind, RetryPolicy, Runner, Step, Workflow
from tether.state import ExecutionContext, RunStatus
from tether.state.reserved import (
    RESERVED,
    is_legacy,
    runtime_get,
    runtime_state,
    runtime_update,
    without_lease,
)

STEPS = ["a", "b", "c"]


def plan() -> Workflow:
    return Workflow.plan([Step(id=s, fn=lambda sc: {"messages": [sc.step.id]}) for s in STEPS])


def old_layout(**extra: object) -> dict[str, object]:
    """A state as the previous tether stored it: the runtime's keys at the top level."""
    return {
        "messages": ["a"],
        "todo": {
            "a": {"name": "a", "phase": "main", "status": "done", "attempts": 1},
            "b": {"name": "b", "phase": "main", "status": "pending", "attempts": 0},
            "c": {"name": "c", "phase": "main", "status": "pending", "attempts": 0},
        },
        "event_log": [{"kind": "decision", "run_id": "x", "step": "a", "detail": {}, "ts": "t"}],
        "failure_report": None,
        "pending_decision": None,
        "_lease": None,
        "pause_reason": "review after a",
        **extra,
    }


async def store_old(store, run_id: str, state: dict[str, object], status: RunStatus) -> None:
    ctx = ExecutionContext(run_id, state)
    ctx.mark_executed("a")
    await store.commit(ctx, node_id="a", status=status)


async def test_a_run_stored_by_the_previous_version_resumes_and_is_upgraded(store):
    run_id = new_id("old")
    await store_old(store, run_id, old_layout(), RunStatus.PAUSED)
    before = (await store.load(run_id)).state
    assert is_legacy(before) and runtime_get(before, "pause_reason") == "review after a"

    result = await Runner(plan(), store).resume(run_id)

    assert result.status is RunStatus.COMPLETED
    cp = await store.load(run_id)
    assert cp.executed_node_ids == STEPS and cp.state["messages"] == ["a", "b", "c"]
    assert not {"todo", "event_log", "failure_report", "pending_decision", "_lease", "pause_reason"} & set(
        cp.state
    )
    part = cp.state[RESERVED]
    assert [t["status"] for t in part["todo"].values()] == ["done"] * 3
    assert part["event_log"][0]["kind"] == "decision"  # the old log is kept, in front
    assert part["lease"] is None and part["pause_reason"] is None
    # the upgraded run is read back the same from a fresh load of its chain
    assert (await store.load_context(run_id)).get(RESERVED) == part


async def test_an_old_run_waiting_for_a_decision_takes_it_after_the_upgrade(store):
    run_id = new_id("olddec")
    report = {
        "run_id": run_id,
        "item_id": "b",
        "item_name": "b",
        "phase": "main",
        "position": 2,
        "total": 3,
        "kind": "data",
        "error_type": "ValueError",
        "error": "bad input",
        "attempts": 1,
        "options": ["retry", "skip", "abort"],
    }
    state = old_layout(failure_report=report, pending_decision=report)
    state["todo"]["b"]["status"] = "failed"  # type: ignore[index]
    await store_old(store, run_id, state, RunStatus.PAUSED)

    result = await Runner(plan(), store).resume(run_id, decision="skip")

    assert result.status is RunStatus.COMPLETED
    part = runtime_state(result.state)
    assert part["todo"]["b"]["status"] == "skipped" and part["todo"]["c"]["status"] == "done"
    assert part["pending_decision"] is None and "pending_decision" not in result.state


async def test_a_copy_of_an_old_leased_run_carries_no_lease(store):
    run_id, fork = new_id("oldlease"), new_id("fork")
    await store_old(
        store, run_id, old_layout(_lease={"owner": "x", "pid": 1, "expires_at": 9e9}), RunStatus.PAUSED
    )
    await store.copy(run_id, fork)
    assert runtime_get((await store.load(fork)).state, "lease") is None
    assert runtime_get((await store.load(run_id)).state, "lease") is not None


async def test_a_user_key_named_like_the_reserved_one_is_refused(store):
    with pytest.raises(ConfigError, match="reserves"):
        await Runner(plan(), store).start(new_id(), {RESERVED: {"todo": {}}})
    with pytest.raises(ConfigError, match="reserves"):
        ExecutionContext("r").register_reducer(RESERVED, "append")

    def sneaky(sc):
        return {RESERVED: {"todo": {}}}

    wf = Workflow.plan([Step(id="a", fn=sneaky)])
    result = await Runner(wf, store, retry=RetryPolicy(attempts=1)).start(new_id())
    assert result.status is RunStatus.PAUSED and result.report is not None
    assert result.report.kind is FailureKind.DATA and "reserves" in result.report.error
    assert runtime_state(result.state)["todo"]["a"]["status"] == "failed"

    paused = Workflow.plan([Step(id="a", fn=lambda sc: {"n": 1}, pause_after=True)])
    run_id = (await Runner(paused, store).start(new_id())).run_id
    with pytest.raises(ConfigError, match="reserves"):
        await store.update_state(run_id, {RESERVED: {"lease": None}})


def test_the_runtime_part_is_written_as_deltas_of_its_update():
    """Appending one event to a long log records that event, not the log."""
    ctx = ExecutionContext("r", {RESERVED: {"event_log": [{"i": i} for i in range(1000)], "todo": {}}})
    ctx.take_changes()
    ctx.merge(runtime_update(event_log=[{"i": "new"}], todo={"a": {"status": "done"}}))
    [(key, op, arg)] = ctx.pending().ops
    assert key == RESERVED and arg == {"event_log": [{"i": "new"}], "todo": {"a": {"status": "done"}}}
    part = runtime_state(ctx)
    assert len(part["event_log"]) == 1001 and part["todo"] == {"a": {"status": "done"}}


def test_without_lease_reads_both_layouts():
    new = {"x": 1, RESERVED: {"lease": {"owner": "o"}, "todo": {}}}
    assert without_lease(new) == {"x": 1, RESERVED: {"lease": None, "todo": {}}}
    assert new[RESERVED]["lease"] == {"owner": "o"}  # a copy, never in place
    assert without_lease({"_lease": {"owner": "o"}})["_lease"] is None
    user = {"todo": [1], "x": 2}  # a user's own "todo" is not the runtime's
    assert without_lease(user) is user and runtime_state(user) == {} and not is_legacy(user)


def test_replaying_stored_ops_in_place_gives_what_the_reducer_gave():
    """Loading replays the part's ops in place (no copy per op); the result is the same."""
    from tether.state.reserved import OP
    from tether.stores._segment import apply_ops

    updates = [
        {"todo": {"a": {"status": "running"}}, "lease": {"owner": "o"}},
        {"todo": {"a": {"status": "done"}, "b": {"status": "pending"}}, "event_log": [{"k": 1}]},
        {"event_log": [{"k": 2}, {"k": 3}], "pause_reason": "why", "lease": None},
        {"failure_report": {"error": "x"}, "todo": {"b": {"status": "failed"}}},
    ]
    ctx = ExecutionContext("r")
    for update in updates:
        ctx.merge(runtime_update(**update))
    replayed: dict[str, object] = {}
    apply_ops(replayed, [[RESERVED, OP, update] for update in updates])
    assert replayed == {RESERVED: runtime_state(ctx)}


async def test_a_run_with_its_route_still_at_the_top_level_resumes_on_its_path(store):
    """Runs stored before the route moved under the reserved key kept it as ``_route``: the
    queued step still runs next, and the route moves under the reserved key."""
    run_id = new_id("oldroute")
    todo = {s: {"name": s, "phase": "main", "status": "pending", "attempts": 0} for s in STEPS}
    todo["a"] = {**todo["a"], "status": "done", "attempts": 1}
    part = {"todo": todo, "event_log": [], "lease": None, "pause_reason": None}
    route = {"pending": ["c"], "visits": {"c": 1}, "total": 1}  # "a" chose "c" before "b"
    await store_old(store, run_id, {"messages": ["a"], RESERVED: part, "_route": route}, RunStatus.PAUSED)

    result = await Runner(plan(), store).resume(run_id)

    assert result.status is RunStatus.COMPLETED
    cp = await store.load(run_id)
    assert cp.state["messages"] == ["a", "c", "b"]
    assert "_route" not in cp.state
    assert runtime_state(cp.state)["route"] == {"pending": [], "visits": {"c": 1}, "total": 1}
