"""A run's last step's checkpoint is also its final one (COMPLETED, lease released) when no
context hook could add a commit after it; ``Runner.before_step`` stops a drive between steps."""

from __future__ import annotations

from typing import Any

import pytest

from tests.stores.conftest import new_id
from tether.runtime import Event, Runner, Step, Workflow
from tether.state import ExecutionContext, RunStatus
from tether.state.reserved import runtime_get


def plan(*ids: str, **step: Any) -> Workflow:
    return Workflow.plan([Step(id=s, fn=lambda sc, s=s: {s: 1}, **step) for s in ids])


async def test_the_last_steps_checkpoint_completes_the_run(store):
    """Take, a, b: three versions; the third is b's checkpoint, stored COMPLETED with the
    lease released, and the events say so in order."""
    rid = new_id()
    events: list[Event] = []
    result = await Runner(plan("a", "b"), store, on_event=events.append).start(rid)
    assert result.status is RunStatus.COMPLETED and result.version == 3
    info = await store.get_run(rid)
    assert info is not None and info.status is RunStatus.COMPLETED and info.version == 3
    assert info.lease_until is None
    ctx = await store.load_context(rid)
    assert ctx is not None and ctx.node_id == "b" and ctx.executed_node_ids == ["a", "b"]
    assert ctx.state_view()["b"] == 1 and runtime_get(ctx, "lease") is None
    assert all(t["status"] == "done" for t in runtime_get(ctx, "todo").values())
    kinds = [e.kind for e in events]
    assert kinds[-3:] == ["step_done", "phase_done", "completed"]
    assert events[-1].detail["version"] == 3
    before = await store.load(rid, 2)
    assert before is not None and before.state.get("a") == 1 and "b" not in before.state


async def test_a_checkpoint_hook_keeps_the_final_commit_separate(store):
    """A hook's update after the last step is committed with the run, which then ends in a
    commit of its own."""
    rid = new_id()
    seen: list[int] = []

    def hook(version: int, ctx: ExecutionContext) -> dict[str, Any]:
        seen.append(version)
        return {"hooked": version}

    result = await Runner(plan("a", "b"), store, on_checkpoint=hook).start(rid)
    assert result.status is RunStatus.COMPLETED
    assert result.state["hooked"] == seen[-1] and result.version > seen[-1]
    info = await store.get_run(rid)
    assert info is not None and info.status is RunStatus.COMPLETED and info.version == result.version


async def test_a_last_step_that_asks_for_a_review_pauses_the_run(store):
    """``pause_after`` on the last step: PAUSED for the review, not COMPLETED."""
    rid = new_id()
    result = await Runner(plan("a", "b", pause_after=True), store).start(rid)
    assert result.status is RunStatus.PAUSED
    result = await Runner(plan("a", "b", pause_after=True), store).resume(rid)
    assert result.status is RunStatus.PAUSED  # b's review
    result = await Runner(plan("a", "b", pause_after=True), store).resume(rid)
    assert result.status is RunStatus.COMPLETED


class Stopping(Exception):
    pass


async def test_before_step_stops_the_drive_between_steps(store):
    """What ``before_step`` raises before b ends the drive INTERRUPTED after a's checkpoint,
    lease released; a resume runs b only."""
    rid = new_id()
    ran: list[str] = []
    steps = Workflow.plan([Step(id=s, fn=lambda sc, s=s: ran.append(s)) for s in ("a", "b")])
    runner = Runner(steps, store)
    calls = 0

    def before() -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise Stopping("the worker is shutting down")

    runner.before_step = before
    with pytest.raises(Stopping):
        await runner.start(rid)
    info = await store.get_run(rid)
    assert info is not None and info.status is RunStatus.INTERRUPTED and info.lease_until is None
    ctx = await store.load_context(rid)
    assert ctx is not None and ctx.executed_node_ids == ["a"] and runtime_get(ctx, "lease") is None
    result = await Runner(steps, store).resume(rid)
    assert result.status is RunStatus.COMPLETED and ran == ["a", "b"]
