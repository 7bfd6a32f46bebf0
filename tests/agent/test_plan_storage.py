"""What a plan run stores: each step's outputs once (its ``plan_steps`` entry), the summary
when the plan ends; what a reader gets in between (the summary folded from the step log);
runs stored in the previous shape (the summary folded in at every step) load and resume."""

from __future__ import annotations

import dataclasses
import json
import logging
import random

import ormsgpack
import pytest

from tests.stores.conftest import new_id
from tether.agent.plan import PlanOrchestrator, PlanStep, StepContext, StepResult, plan_summary
from tether.context.summaries import StepOutputs
from tether.state import RunStatus
from tether.stores import open_store


@pytest.fixture
async def store(tmp_path):
    async with open_store(f"sqlite:///{tmp_path}/plan.db") as s:
        yield s


def outputs(step_id: int, keys: int = 4) -> StepOutputs:
    rng = random.Random(step_id)
    words = ["nginx", "redis", "celery", "gunicorn", "postgres", "certbot", "node", "yarn"]
    return StepOutputs(
        summary=f"step {step_id}: " + " ".join(rng.choice(words) for _ in range(30)),
        environment_changes={
            f"pkg-{step_id}-{k}": f"{rng.randint(0, 9)}.{rng.randint(0, 40)}" for k in range(keys)
        },
        new_configurations={f"KEY_{step_id % 4}": str(rng.randint(1024, 65535))},
        artifacts=(f"/srv/app/step-{step_id}.yaml",),
        issues_resolved=(
            {
                "issue": " ".join(rng.choice(words) for _ in range(20)),
                "resolution": " ".join(rng.choice(words) for _ in range(25)),
            },
        ),
    )


def plan_of(store, steps: int, *, fail: set[int] | None = None, seen=None, **kw) -> PlanOrchestrator:
    failing = fail if fail is not None else set()

    async def execute(ctx: StepContext) -> StepResult:
        if seen is not None:
            seen.append(ctx)
        if ctx.step_id in failing:
            failing.discard(ctx.step_id)  # fails once: a retry succeeds
            return StepResult.failed("disk full")
        return StepResult.succeeded(structured_outputs=outputs(ctx.step_id))

    return PlanOrchestrator(
        store=store,
        steps=[PlanStep(name=f"Step {i}", goal=f"goal {i}", category="setup") for i in range(1, steps + 1)],
        step_executor=execute,
        project_name="p",
        **{"log_dir": None, **kw},
    )


async def stored_bytes(store, run_id: str) -> int:
    return sum(h.size for h in await store.history(run_id, limit=10_000))


async def test_a_step_stores_its_outputs_once_so_the_run_stays_near_its_final_state(store):
    """20 steps: the default run stores at most 1.3x its final state; with fresh_summary each
    step folds its outputs into the stored summary as well, and the run stores more."""
    default, fresh = new_id(), new_id()
    a = await plan_of(store, 20).start(default)
    b = await plan_of(store, 20, fresh_summary=True).start(fresh)
    assert a.status is b.status is RunStatus.COMPLETED
    # the two runs end a second apart now and then: the summary's clock is the one field that may differ
    summary_a = {k: v for k, v in a.state["execution_summary"].items() if k != "last_updated"}
    summary_b = {k: v for k, v in b.state["execution_summary"].items() if k != "last_updated"}
    assert summary_a == summary_b and summary_a["environment"]
    assert len(a.state["plan_steps"]) == 20 and a.state["execution_summary"]["folded_steps"] == 20
    size_a, size_b = await stored_bytes(store, default), await stored_bytes(store, fresh)
    cp = await store.load(default)
    assert cp is not None and cp.state["execution_summary"] == a.state["execution_summary"]
    final = len(ormsgpack.packb(cp.state))
    assert size_a <= 1.3 * final, (size_a, final)
    assert size_b >= 1.25 * size_a, (size_b, size_a)  # the summary's fold of every step, its turnover


async def test_fresh_summary_keeps_the_stored_summary_current_at_every_step(store, tmp_path):
    commits: list[tuple[int, int | None]] = []
    commit = store.commit

    async def spy(ctx, **kw):
        version = await commit(ctx, **kw)
        state = ctx.snapshot()
        commits.append((len(state.get("plan_steps") or ()), state["execution_summary"].get("folded_steps")))
        return version

    store.commit = spy
    run_id = new_id()
    result = await plan_of(store, 4, fresh_summary=True).start(run_id)
    assert result.status is RunStatus.COMPLETED
    assert all(done == folded for done, folded in commits), commits
    assert len(result.state["execution_summary"]["completed_actions"]) == 1  # the phase folded into one line
    async with open_store(f"sqlite:///{tmp_path}/plan.db") as again:  # replays each step's fold
        cp = await again.load(run_id)
    assert cp is not None and cp.state["execution_summary"] == result.state["execution_summary"]


async def test_a_paused_plan_reads_the_summary_of_every_finished_step(store, tmp_path):
    """Step 3 fails: the stored summary is the one the plan started with, yet the result, the
    plan log and the retried step's prompt see steps 1 and 2; the retry completes the plan."""
    seen: list[StepContext] = []
    plan = plan_of(store, 3, fail={3}, seen=seen, log_dir=tmp_path / "logs")
    run_id = new_id()
    paused = await plan.start(run_id)
    assert paused.status is RunStatus.PAUSED
    cp = await store.load(run_id)
    assert cp is not None and cp.state["execution_summary"]["folded_steps"] == 0
    assert cp.state["execution_summary"]["completed_actions"] == []
    live = paused.state["execution_summary"]
    assert live == plan_summary(cp.state) and live["folded_steps"] == 2
    assert [a.split(":")[0] for a in live["completed_actions"]] == ["[SETUP] Step 1", "[SETUP] Step 2"]
    assert json.loads(plan.current_log_file.read_text())["execution_summary"] == live
    assert seen[2].execution_summary is not None
    assert {**seen[2].execution_summary.to_dict(), "folded_steps": 2} == live
    done = await plan.resume(run_id, decision="retry")
    assert done.status is RunStatus.COMPLETED
    assert seen[3].execution_summary == seen[2].execution_summary  # the retry saw the same summary
    stored = (await store.load(run_id)).state["execution_summary"]
    assert stored == done.state["execution_summary"] and stored["folded_steps"] == 3
    assert len(stored["resolved_issues"]) == 3 and len(stored["environment"]) == 12


async def test_a_run_stored_in_the_previous_shape_resumes(store):
    """A run paused by the previous code: its summary folded in at every step, no
    folded_steps, entries without done_at. The next step takes the summary as holding the
    entries there are, folds itself in and stores the summary with folded_steps."""
    run_id = new_id()
    paused = await plan_of(store, 3, fail={3}, fresh_summary=True).start(run_id)
    assert paused.status is RunStatus.PAUSED
    cp = await store.load(run_id)
    assert cp is not None
    old = dict(cp.state)
    old["execution_summary"] = {k: v for k, v in old["execution_summary"].items() if k != "folded_steps"}
    old["plan_steps"] = [{k: v for k, v in e.items() if k != "done_at"} for e in old["plan_steps"]]
    await store.save(dataclasses.replace(cp, state=old), expected_version=cp.version)
    done = await plan_of(store, 3).resume(run_id, decision="retry")
    assert done.status is RunStatus.COMPLETED
    summary = (await store.load(run_id)).state["execution_summary"]
    assert summary["folded_steps"] == 3 and len(summary["resolved_issues"]) == 3
    assert summary == plan_summary(done.state) == done.state["execution_summary"]


async def test_a_summary_growing_past_its_caps_warns_once(store, caplog):
    """The steps' folds are redone for each step's prompt: the warning is logged once."""
    with caplog.at_level(logging.WARNING, logger="tether.context.summaries"):
        result = await plan_of(store, 12).start(new_id())
    assert result.status is RunStatus.COMPLETED
    warned = [r for r in caplog.records if "environment has more than 30 keys" in r.getMessage()]
    assert len(warned) == 1
    assert result.state["execution_summary"]["warnings"] == [
        "environment has more than 30 keys; the summary is growing"
    ]


async def test_a_summary_edited_at_a_pause_is_what_the_next_steps_build_on(store):
    """A human replaces the summary of a paused plan (no folded_steps: it stands for every
    step there is); the same orchestrator's next steps see the edit, not its earlier fold."""
    seen: list[StepContext] = []
    plan = plan_of(store, 4, fail={3}, seen=seen)
    run_id = new_id()
    paused = await plan.start(run_id)
    assert paused.status is RunStatus.PAUSED
    cp = await store.load(run_id)
    assert cp is not None
    edited = {"project_name": "p", "configurations": {"REGION": "eu-west-1"}}
    state = {**cp.state, "execution_summary": edited}
    await store.save(dataclasses.replace(cp, state=state), expected_version=cp.version)
    done = await plan.resume(run_id, decision="retry")
    assert done.status is RunStatus.COMPLETED
    retried = seen[3].execution_summary
    assert retried is not None and retried.configurations == {"REGION": "eu-west-1"}
    assert retried.completed_actions == ()
    summary = (await store.load(run_id)).state["execution_summary"]
    assert summary["folded_steps"] == 4 and summary["configurations"]["REGION"] == "eu-west-1"
    (line,) = summary["completed_actions"]  # steps 3 and 4 only, folded as their phase ends
    assert line.startswith("✅ phase setup (2 items)") and "last: Step 4: step 4" in line
