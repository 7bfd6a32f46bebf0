"""Every exit from a run's drive leaves it consistent: bad step values, subscribers that
raise, cancellation, timeouts, requests from other processes, dead lease holders."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.stores.conftest import new_id
from tether.errors import InvalidStateValue, RunExists, RunInProgress, VersionConflict
from tether.runtime import FailureKind, RetryPolicy, Runner, Step, Workflow
from tether.runtime.lease import list_runs_live
from tether.state import ExecutionContext, RunStatus
from tether.state.reserved import runtime_state

ONCE = RetryPolicy(attempts=1)


def plan(*fns, **kw) -> Workflow:
    return Workflow.plan([Step(id=chr(ord("a") + i), fn=fn) for i, fn in enumerate(fns)], **kw)


def ok(sc):
    return {"messages": [sc.step.id]}


async def assert_released(store, run_id, status):
    """The run is stored with ``status`` and no process holds it."""
    assert await store.get_status(run_id) is status
    cp = await store.load(run_id)
    assert runtime_state(cp.state).get("lease") is None
    return cp


@pytest.mark.parametrize(
    ("returned", "expected"),
    [
        (["x"], "step 'b' returned list; return a mapping of state updates or None"),
        ("done", "step 'b' returned str; return a mapping of state updates or None"),
        ({"tags": {"a", "b"}}, "state key 'tags': set cannot be stored"),
        ({"n": 2**64}, "integers must fit in 64 bits"),
        ({"text": "cut \ud83d"}, "lone surrogate"),
        ({"bad\udc00key": 1}, "lone surrogate"),
    ],
)
async def test_a_step_value_the_state_refuses_is_a_data_failure_with_a_report(store, returned, expected):
    """The bad value never escapes ``start``: the run pauses with a DATA report, lease released."""
    r = Runner(plan(ok, lambda sc: returned, ok), store, retry=ONCE)
    result = await r.start(new_id())
    assert result.status is RunStatus.PAUSED
    assert result.report is not None and result.report.kind is FailureKind.DATA
    assert result.report.item_id == "b" and expected in result.report.error
    cp = await assert_released(store, result.run_id, RunStatus.PAUSED)
    assert runtime_state(cp.state)["failure_report"]["error"] == result.report.error
    assert cp.executed_node_ids == ["a"]
    resumed = await Runner(plan(ok, ok, ok), store).resume(result.run_id, decision="retry")
    assert resumed.status is RunStatus.COMPLETED


def test_lone_surrogates_are_refused_at_put_and_merge_and_in_ids():
    """A truncated model stream's half emoji is refused where it enters, with the key named."""
    ctx = ExecutionContext("run-ok")
    with pytest.raises(InvalidStateValue, match=r"state key 'reply'.*lone surrogate"):
        ctx.put("reply", "half \ud83d")
    with pytest.raises(InvalidStateValue, match=r"state key 'messages' at \[0\]\['text'\]"):
        ctx.merge({"messages": [{"text": "\udfff"}]})
    with pytest.raises(InvalidStateValue, match="lone surrogate"):
        ctx.merge({"nested": {"k\ud800": 1}})
    ctx.put("emoji", "whole \U0001f600 é")  # valid non-ASCII passes
    assert ctx.get("emoji") == "whole \U0001f600 é"
    with pytest.raises(InvalidStateValue, match="lone surrogate"):
        ctx.mark_executed("node\ud83d")


async def test_a_subscriber_that_raises_is_logged_and_skipped(store, caplog):
    """A broken progress view (markup in an error message, say) never strands the run."""
    seen: list[str] = []

    def on_event(event):
        seen.append(event.kind)
        if event.kind == "step_done":
            raise ValueError("closing tag '[/red]' at position 3 doesn't match any open tag")

    r = Runner(plan(ok, ok), store, on_event=on_event)
    with caplog.at_level(logging.WARNING, logger="tether.runtime.runner"):
        result = await r.start(new_id())
    assert result.status is RunStatus.COMPLETED
    assert seen.count("step_done") == 2 and seen[-1] == "completed"
    assert "on_event subscriber failed" in caplog.text and "[/red]" in caplog.text
    await assert_released(store, result.run_id, RunStatus.COMPLETED)


async def test_a_cancelled_run_is_interrupted_released_and_resumable_in_the_same_process(store):
    """task.cancel() (a notebook interrupt, a cancelled web request) inside a step."""
    entered = asyncio.Event()

    async def hangs(sc):
        sc.state.put("half_done", True)  # never checkpointed: the step did not finish
        entered.set()
        await asyncio.sleep(3600)

    run_id = new_id()
    task = asyncio.create_task(Runner(plan(ok, hangs, ok), store).start(run_id))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    cp = await assert_released(store, run_id, RunStatus.INTERRUPTED)
    assert "half_done" not in cp.state and cp.executed_node_ids == ["a"]
    assert runtime_state(cp.state)["event_log"][-1]["kind"] == "interrupted"
    assert runtime_state(cp.state)["event_log"][-1]["step"] == "b"
    assert runtime_state(cp.state)["pause_reason"].startswith("cancelled")
    # a new runner in this same process may take it over at once (no 10-minute lease wait)
    result = await Runner(plan(ok, ok, ok), store).resume(run_id)
    assert result.status is RunStatus.COMPLETED and result.state["messages"] == ["a", "b", "c"]


async def test_asyncio_timeout_around_a_run_interrupts_it(store):
    async def slow(sc):
        await asyncio.sleep(3600)

    run_id = new_id()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await Runner(plan(ok, slow), store).start(run_id)
    await assert_released(store, run_id, RunStatus.INTERRUPTED)


async def test_keyboard_interrupt_inside_a_step_interrupts_the_run(store):
    def ctrl_c(sc):
        raise KeyboardInterrupt

    run_id = new_id()
    with pytest.raises(KeyboardInterrupt):
        await Runner(plan(ok, ctrl_c), store).start(run_id)
    await assert_released(store, run_id, RunStatus.INTERRUPTED)


async def test_a_run_whose_holder_is_gone_lists_as_interrupted(store):
    """Same host, pid gone (a SIGKILL): stored RUNNING, shown INTERRUPTED; a live one stays RUNNING."""
    dead, live = new_id("dead"), new_id("live")
    ctx = ExecutionContext(dead, {"_lease": {"owner": "x", "host": "", "pid": 1, "expires_at": 0.0}})
    await store.commit(ctx, status=RunStatus.RUNNING)
    gate, started = asyncio.Event(), asyncio.Event()

    async def waits(sc):
        started.set()
        await gate.wait()

    task = asyncio.create_task(Runner(plan(waits), store).start(live))
    await started.wait()
    shown = {r.run_id: r.status for r in await list_runs_live(store, limit=1000)}
    assert shown[dead] is RunStatus.INTERRUPTED and shown[live] is RunStatus.RUNNING
    only = await list_runs_live(store, status=RunStatus.INTERRUPTED, limit=1000)
    assert dead in {r.run_id for r in only} and live not in {r.run_id for r in only}
    with pytest.raises(RunInProgress):
        await Runner(plan(waits), store).resume(live)
    gate.set()
    assert (await task).status is RunStatus.COMPLETED


async def test_copy_rollback_and_update_never_carry_a_lease(store):
    gate, started = asyncio.Event(), asyncio.Event()

    async def waits(sc):
        started.set()
        await gate.wait()
        return {"x": 1}

    run_id = new_id()
    task = asyncio.create_task(Runner(plan(ok, waits), store).start(run_id))
    await started.wait()
    assert runtime_state((await store.load(run_id)).state)["lease"] is not None
    fork = new_id("fork")
    await store.copy(run_id, fork)
    assert runtime_state((await store.load(fork)).state).get("lease") is None
    await store.rollback(run_id, 1)
    assert runtime_state((await store.load(run_id)).state).get("lease") is None
    gate.set()
    with pytest.raises(VersionConflict):  # the live runner cannot go on from a state it never saw
        await task
    await assert_released(store, run_id, RunStatus.INTERRUPTED)
    await store.set_status(fork, RunStatus.PAUSED)
    await store.update_state(fork, {"goal": "new"})
    assert runtime_state((await store.load(fork)).state).get("lease") is None


async def test_a_pause_stored_by_another_process_stops_the_runner_at_the_next_step_boundary(store):
    """``tether pause`` writes PAUSED; the live runner checkpoints the step it is in and stops."""
    gate, started = asyncio.Event(), asyncio.Event()

    async def waits(sc):
        started.set()
        await gate.wait()
        return {"b_output": "done"}

    run_id = new_id()
    task = asyncio.create_task(Runner(plan(ok, waits, ok), store).start(run_id))
    await started.wait()
    await store.set_status(run_id, RunStatus.PAUSED)  # what another process does
    gate.set()
    result = await task
    assert result.status is RunStatus.PAUSED
    cp = await assert_released(store, run_id, RunStatus.PAUSED)
    assert cp.executed_node_ids == ["a", "b"] and cp.state["b_output"] == "done"
    assert "paused from outside" in runtime_state(cp.state)["pause_reason"]
    await store.update_state(run_id, {"goal": "changed while paused"})
    done = await Runner(plan(ok, waits, ok), store).resume(run_id)
    assert done.status is RunStatus.COMPLETED and done.state["goal"] == "changed while paused"


async def test_a_cancel_stored_on_a_live_run_is_not_overwritten(store):
    gate, started = asyncio.Event(), asyncio.Event()

    async def waits(sc):
        started.set()
        await gate.wait()

    run_id = new_id()
    task = asyncio.create_task(Runner(plan(waits, ok), store).start(run_id))
    await started.wait()
    await store.set_status(run_id, RunStatus.CANCELLED)
    gate.set()
    assert (await task).status is RunStatus.CANCELLED
    cp = await assert_released(store, run_id, RunStatus.CANCELLED)
    assert "b" not in cp.executed_node_ids


async def test_paused_then_updated_while_the_step_runs_keeps_the_update(store):
    """PAUSED then ``update`` before the runner's next commit: the runner stops, the update stays."""
    gate, started = asyncio.Event(), asyncio.Event()

    async def waits(sc):
        started.set()
        await gate.wait()
        return {"b_output": "stale"}

    run_id = new_id()
    task = asyncio.create_task(Runner(plan(ok, waits, ok), store).start(run_id))
    await started.wait()
    await store.set_status(run_id, RunStatus.PAUSED)
    await store.update_state(run_id, {"goal": "human edit"})
    gate.set()
    result = await task
    assert result.status is RunStatus.PAUSED
    cp = await assert_released(store, run_id, RunStatus.PAUSED)
    assert cp.state["goal"] == "human edit" and cp.executed_node_ids == ["a"]
    assert runtime_state(cp.state)["event_log"][-1]["kind"] == "step_discarded"
    done = await Runner(plan(ok, ok, ok), store).resume(run_id)
    assert done.status is RunStatus.COMPLETED and done.state["goal"] == "human edit"


async def test_an_existing_run_id_is_run_exists_and_run_starts_or_resumes(store):
    run_id = new_id()
    paused = await Runner(plan(ok, lambda sc: sc.pause("look first"), ok), store).run(run_id, {"goal": "g"})
    assert paused.status is RunStatus.PAUSED
    with pytest.raises(RunExists, match=r"already exists \(PAUSED\).*resume") as info:
        await Runner(plan(ok), store).start(run_id)
    assert info.value.status is RunStatus.PAUSED
    done = await Runner(plan(ok, ok, ok), store).run(run_id, {"goal": "ignored on resume"})
    assert done.status is RunStatus.COMPLETED and done.state["goal"] == "g"
