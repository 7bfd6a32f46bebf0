"""The runner on real stores: checkpoints, retries, each failure class, rollback, pause/update/resume."""

from __future__ import annotations

import asyncio

import pytest

from tests.stores.conftest import new_id
from tether.errors import RunInProgress
from tether.runtime import (
    CallbackDecisions,
    Decision,
    FailureKind,
    LogicError,
    PermissionDenied,
    PolicyDecisions,
    RetryPolicy,
    Runner,
    Step,
    StepTimeout,
    Workflow,
)
from tether.state import RunStatus
from tether.state.reserved import runtime_state

FAST = RetryPolicy(attempts=3, initial=0.001, maximum=0.002, jitter=0)


def out(value):
    return lambda sc: {f"{sc.step.id}_output": value, "messages": [sc.step.id]}


def runner(store, steps, **kw) -> tuple[Runner, list]:
    events: list = []
    kw.setdefault("retry", FAST)
    return Runner(Workflow.plan(steps), store, on_event=events.append, **kw), events


async def test_a_plan_runs_in_order_with_a_checkpoint_after_every_step(store):
    r, events = runner(store, [Step(id=s, fn=out(i)) for i, s in enumerate(["plan", "build", "ship"])])
    result = await r.start(new_id(), {"user_input": "go"})
    assert result.status is RunStatus.COMPLETED, result.report and result.report.render()
    hist = await store.history(result.run_id)
    assert [h.node_id for h in reversed(hist)][1:4] == ["plan", "build", "ship"]
    assert result.state["messages"] == ["plan", "build", "ship"]
    assert [t["status"] for t in runtime_state(result.state)["todo"].values()] == ["done"] * 3
    assert [h["node"] for h in result.state["execution_history"]] == ["plan", "build", "ship"]
    assert await store.get_status(result.run_id) is RunStatus.COMPLETED
    assert [e.kind for e in events].count("step_done") == 3


async def test_transient_fault_succeeds_on_the_third_try(store):
    tries = []

    def flaky(sc):
        tries.append(sc.attempt)
        if len(tries) < 3:
            raise TimeoutError("upstream timed out")
        return {"ok": True}

    r, events = runner(store, [Step(id="call", fn=flaky)])
    result = await r.start(new_id())
    assert result.status is RunStatus.COMPLETED and tries == [1, 2, 3]
    assert [e.kind for e in events].count("step_retry") == 2
    assert runtime_state(result.state)["todo"]["call"]["attempts"] == 3


async def test_transient_fault_that_never_recovers_is_reported_after_three_tries(store):
    tries = []

    def down(sc):
        tries.append(1)
        raise ConnectionRefusedError("service unavailable")

    r, _ = runner(store, [Step(id="a", fn=out(1)), Step(id="call", fn=down)])
    result = await r.start(new_id())
    assert len(tries) == 3
    assert result.status is RunStatus.PAUSED  # waits for a human decision
    assert result.report.kind is FailureKind.TRANSIENT and result.report.attempts == 3
    snap = await store.snapshot(result.run_id)
    assert runtime_state(snap.state)["pending_decision"]["item_id"] == "call"
    assert runtime_state(snap.state)["todo"]["call"]["status"] == "failed"


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (FileNotFoundError("dataset test-data not found"), FailureKind.DATA),
        (PermissionDenied("no access to prod"), FailureKind.PERMISSION),
        (ZeroDivisionError("bug"), FailureKind.SYSTEM),
        (LogicError("image must be built first"), FailureKind.LOGIC),
    ],
)
async def test_each_failure_class_is_rolled_back_and_reported(store, exc, kind):
    """No retries for non-transient classes; SYSTEM alerts; the decision handler is asked."""
    tries, alerts, asked = [], [], []

    def fail(sc):
        tries.append(1)
        raise exc

    def decide(report):
        asked.append(report)
        return Decision.ABORT

    r, _ = runner(
        store,
        [Step(id="a", fn=out(1)), Step(id="b", fn=fail, name="Select dataset")],
        alert=alerts.append,
        decisions=CallbackDecisions(decide),
    )
    result = await r.start(new_id())
    assert len(tries) == 1
    assert result.status is RunStatus.CANCELLED
    (report,) = asked
    assert report.kind is kind and report.position == 2 and report.total == 2
    assert len(alerts) == (1 if kind is FailureKind.SYSTEM else 0)
    text = report.render()
    assert 'TODO item: "Select dataset"' in text and "item 2 of 2" in text and "[abort]" in text
    stored = runtime_state((await store.load(result.run_id)).state)["failure_report"]
    assert stored["kind"] == str(kind) and stored["error_type"] == type(exc).__name__


async def test_logic_failure_replans_the_remaining_steps(store):
    def needs_build(sc):
        raise LogicError("image not built yet")

    def replan(report, ctx):
        assert report.kind is FailureKind.LOGIC
        return [Step(id="build", fn=out("img")), Step(id="deploy2", fn=out("ok"))]

    r, events = runner(store, [Step(id="plan", fn=out(0)), Step(id="deploy", fn=needs_build)], replan=replan)
    result = await r.start(new_id())
    assert result.status is RunStatus.COMPLETED
    assert result.state["messages"] == ["plan", "build", "deploy2"]
    assert "replanned" in [e.kind for e in events]
    assert runtime_state(result.state)["todo"]["deploy"]["status"] == "failed"


async def test_rollback_restores_the_pre_item_state_and_compensates_in_reverse(store):
    undone = []

    def messy(sc):
        sc.compensate("remove container", lambda: undone.append("container"))
        sc.compensate("restore nginx.conf", lambda: undone.append("conf"), kind="restore_modified")
        sc.state.merge({"messages": ["half-written"], "a_output": "clobbered"})  # partial writes
        raise FileNotFoundError("no such image")

    r, events = runner(store, [Step(id="a", fn=out("kept")), Step(id="b", fn=messy)])
    result = await r.start(new_id())
    assert undone == ["conf", "container"]
    state = (await store.load(result.run_id)).state
    assert state["a_output"] == "kept" and state["messages"] == ["a"]
    assert result.report.rolled_back[:2] == [
        "restore_modified: restore nginx.conf",
        "undo_create: remove container",
    ]
    assert "state restored to version" in result.report.rolled_back[2]
    logged = [e["kind"] for e in runtime_state(state)["event_log"]]
    assert logged.count("rollback_action") == 2 and "state_restored" in logged


async def test_a_failing_compensation_is_reported_and_the_run_fails_consistently(store):
    def boom():
        raise OSError("docker daemon gone")

    def fail(sc):
        sc.compensate("stop service", boom)
        sc.compensate("delete tmp", lambda: None)
        raise ValueError("invalid manifest")

    r, _ = runner(store, [Step(id="a", fn=fail)], decisions=PolicyDecisions(default=Decision.RETRY))
    result = await r.start(new_id())
    assert result.status is RunStatus.FAILED
    assert result.report.rollback_failures == [
        "undo_create: stop service FAILED: OSError('docker daemon gone')"
    ]
    assert result.report.options == []
    assert "Rollback problems" in result.report.render()
    cp = await store.load(result.run_id)
    assert cp.status is RunStatus.FAILED and await store.get_status(result.run_id) is RunStatus.FAILED
    assert [e["kind"] for e in runtime_state(cp.state)["event_log"]].count("rollback_failed") == 1


async def test_retry_and_skip_decisions(store):
    calls = []

    def once_bad(sc):
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("missing key")
        return {"fixed": True}

    r, _ = runner(store, [Step(id="a", fn=once_bad)], decisions=PolicyDecisions(default=Decision.RETRY))
    result = await r.start(new_id())
    assert result.status is RunStatus.COMPLETED and result.state["fixed"] is True

    def always_bad(sc):
        raise KeyError("missing")

    r2, _ = runner(
        store,
        [Step(id="x", fn=always_bad), Step(id="y", fn=out(2))],
        decisions=PolicyDecisions(default=Decision.SKIP),
    )
    result = await r2.start(new_id())
    assert result.status is RunStatus.COMPLETED
    assert [(k, t["status"]) for k, t in runtime_state(result.state)["todo"].items()] == [
        ("x", "skipped"),
        ("y", "done"),
    ]


async def test_paused_failure_is_decided_later_from_another_runner(store):
    def bad(sc):
        raise FileNotFoundError("missing")

    r, _ = runner(store, [Step(id="a", fn=bad), Step(id="b", fn=out(1))])
    result = await r.start(new_id())
    assert result.status is RunStatus.PAUSED
    r2, _ = runner(store, [Step(id="a", fn=bad), Step(id="b", fn=out(1))])
    resumed = await r2.resume(result.run_id, decision="skip")
    assert resumed.status is RunStatus.COMPLETED and resumed.state["b_output"] == 1


async def test_pause_update_resume(store):
    seen = []

    def review(sc):
        sc.pause("check the plan")
        return {"plan": "v1"}

    def use(sc):
        seen.append(sc.get("plan"))
        return {"done": True}

    r, _ = runner(store, [Step(id="plan", fn=review), Step(id="apply", fn=use)])
    result = await r.start(new_id())
    assert result.status is RunStatus.PAUSED and seen == []
    await store.update_state(result.run_id, {"plan": "v2 (edited)", "messages": ["human: looks good"]})
    resumed = await r.resume(result.run_id)
    assert resumed.status is RunStatus.COMPLETED and seen == ["v2 (edited)"]
    assert resumed.state["messages"] == ["human: looks good"]


async def test_two_runners_on_one_run_never_both_execute(store):
    gate, started = asyncio.Event(), []

    async def slow(sc):
        started.append(1)
        await gate.wait()
        return {"x": 1}

    steps = [Step(id="slow", fn=slow)]
    a, _ = runner(store, steps)
    b, _ = runner(store, steps)
    run_id = new_id()
    task = asyncio.create_task(a.start(run_id))
    while not started:
        await asyncio.sleep(0.01)
    with pytest.raises(RunInProgress, match="refusing to run it twice"):
        await b.resume(run_id)
    gate.set()
    result = await task
    assert result.status is RunStatus.COMPLETED and started == [1]


async def test_timeouts_and_heartbeats(store):
    async def hangs(sc):
        await asyncio.sleep(5)

    async def busy(sc):
        for _ in range(6):
            await asyncio.sleep(0.05)
            sc.heartbeat()
        return {"alive": True}

    r, _ = runner(store, [Step(id="busy", fn=busy, idle_timeout=0.2), Step(id="hang", fn=hangs, timeout=0.2)])
    result = await r.start(new_id())
    assert result.state["alive"] is True
    assert result.report.item_id == "hang" and result.report.error_type == StepTimeout.__name__
    assert result.report.attempts == 3


async def test_error_handler_turns_a_failure_into_an_update(store):
    def fail(sc):
        raise FileNotFoundError("no cache")

    step = Step(id="cache", fn=fail, on_error=lambda exc, sc: {"cache": None, "note": str(exc)})
    r, _ = runner(store, [step])
    result = await r.start(new_id())
    assert result.status is RunStatus.COMPLETED and result.state["note"] == "no cache"


async def test_phase_and_checkpoint_hooks(store):
    phases, versions = [], []

    def on_phase(phase, ctx):
        phases.append(phase.id)
        return {f"{phase.id}_summary": f"{len(ctx.get('messages'))} messages"}

    r, _ = runner(
        store,
        [
            Step(id="a", fn=out(1), phase="p1"),
            Step(id="b", fn=out(2), phase="p1"),
            Step(id="c", fn=out(3), phase="p2"),
        ],
        on_phase_complete=on_phase,
        on_checkpoint=lambda v, ctx: versions.append(v),
    )
    result = await r.start(new_id())
    assert phases == ["p1", "p2"] and len(versions) == 3
    assert result.state["p1_summary"] == "2 messages"


async def test_a_step_can_finish_the_run_early(store):
    def decide(sc):
        sc.finish("COMPLETED", "deployed at http://127.0.0.1:8000")
        return {"answer": 42}

    r, _ = runner(store, [Step(id="a", fn=out(1)), Step(id="b", fn=decide), Step(id="c", fn=out(3))])
    result = await r.start(new_id())
    assert result.status is RunStatus.COMPLETED
    assert result.state["final_output"] == "deployed at http://127.0.0.1:8000"
    assert runtime_state(result.state)["todo"]["c"]["status"] == "skipped" and "c_output" not in result.state

    def give_up(sc):
        sc.finish("FAILED", "no database configured")

    r2, _ = runner(store, [Step(id="x", fn=give_up), Step(id="y", fn=out(3))])
    failed = await r2.start(new_id())
    assert failed.status is RunStatus.FAILED and await store.get_status(failed.run_id) is RunStatus.FAILED
