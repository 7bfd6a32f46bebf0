"""The plan orchestrator's replanner: a failed step's report offers replan, the model revises
the remaining steps, the revision is stored with the run (a new process follows it), and a
step's result may revise what comes next."""

from __future__ import annotations

import json

import pytest

from tests.stores.conftest import new_id
from tether.agent import AgentLoop, PlanOrchestrator, PlanStep
from tether.agent.plan import nested_run_ids
from tether.agent.replan import ModelReplanner, ReplanRequest
from tether.models import ScriptedModel
from tether.state import RunStatus
from tether.stores import open_store
from tether.tools import LocalSession


@pytest.fixture
async def store(tmp_path):
    async with open_store(f"sqlite:///{tmp_path}/plan.db") as s:
        yield s


def done(summary, **outputs):
    return {"action": "step_done", "message": summary, "outputs": {"summary": summary, **outputs}}


STEPS = [
    PlanStep(name="prepare", goal="create the data dir", category="setup"),
    PlanStep(name="install postgres", goal="apt-get install postgresql", category="database"),
    PlanStep(name="migrate", goal="run the migrations", category="database"),
]

REVISION = {
    "reason": "no root: use sqlite instead of postgres",
    "steps": [
        {
            "name": "use sqlite",
            "goal": "configure DATABASE_URL=sqlite:///data/app.db",
            "category": "database",
        },
        {"name": "migrate", "goal": "run the migrations on sqlite", "category": "database"},
    ],
}


def plan_of(store, model, tmp_path, **kw):
    return PlanOrchestrator(
        store=store,
        loop_factory=lambda cfg: AgentLoop(model, LocalSession(cwd=tmp_path), store, config=cfg),
        steps=list(STEPS),
        log_dir=tmp_path / "logs",
        replanner=ModelReplanner(model, **kw.pop("replanner", {})),
        **kw,
    )


async def test_replan_after_a_failure_revises_the_rest_and_a_new_process_follows_it(store, tmp_path):
    """retry/skip/replan/abort offered; replan asks the model; the revision survives a restart."""
    model = ScriptedModel(
        [
            done("Created data/"),
            {"action": "failed", "message": "permission denied: no root for apt-get"},
            REVISION,
            done("DATABASE_URL set to sqlite", new_configurations={"DATABASE_URL": "sqlite:///data/app.db"}),
            done("Migrated on sqlite"),
        ]
    )
    run_id = new_id()
    first = await plan_of(store, model, tmp_path).start(run_id)
    assert first.status is RunStatus.PAUSED
    assert [str(o) for o in first.report.options][:3] == ["retry", "skip", "replan"]

    # a new process: a fresh orchestrator; the model's next reply is the revision
    second = plan_of(store, model, tmp_path)
    end = await second.resume(run_id, decision="replan")
    assert end.status is RunStatus.COMPLETED, end.report
    plan = end.state["plan"]
    assert plan["revision"] == 1
    assert [s["name"] for s in plan["steps"]] == ["prepare", "use sqlite", "migrate"]
    assert [s["id"] for s in plan["steps"]] == ["step-1", "step-2-r1", "step-3-r1"]
    request = model.calls[2][-1]["content"]
    assert "Step 2 failed: install postgres" in request and "permission denied" in request
    assert "- prepare: Created data/" in request
    names = [s["step_name"] for s in end.state["plan_steps"]]
    assert names == ["prepare", "use sqlite", "migrate"]
    assert end.state["execution_summary"]["configurations"] == {"DATABASE_URL": "sqlite:///data/app.db"}
    assert nested_run_ids(end.state, run_id) == [f"{run_id}.1", f"{run_id}.2r1", f"{run_id}.3r1"]
    assert all([await store.get_run(r) for r in nested_run_ids(end.state, run_id)])
    third = plan_of(store, model, tmp_path)  # another process builds its workflow from the stored plan
    assert [s.id for s in third.runner(third.entries(end.state)).workflow.steps] == [
        "step-1",
        "step-2-r1",
        "step-3-r1",
    ]
    log = json.loads(second.current_log_file.read_text())
    assert log["status"] == "success" and [s["step_name"] for s in log["steps"]] == names


async def test_replan_failures_revises_at_once_without_pausing(store, tmp_path):
    """With replan_failures the failed step is a LOGIC failure: re-planned, no pause."""
    model = ScriptedModel(
        [
            done("Created data/"),
            {"action": "failed", "message": "permission denied: no root for apt-get"},
            REVISION,
            done("sqlite configured"),
            done("migrated"),
        ]
    )
    result = await plan_of(store, model, tmp_path, replan_failures=True).start(new_id())
    assert result.status is RunStatus.COMPLETED
    assert [s["step_name"] for s in result.state["plan_steps"]] == ["prepare", "use sqlite", "migrate"]
    kinds = [e["kind"] for e in result.state["_tether"]["event_log"]]
    assert "replanned" in kinds


async def test_a_step_result_may_revise_the_steps_after_it(store, tmp_path):
    """after_steps: the model reads step 1's outputs and replaces steps 2-3 (or keeps them)."""
    model = ScriptedModel(
        [
            done("Found a docker-compose.yml", artifacts=["docker-compose.yml"]),
            {"steps": [{"name": "compose up", "goal": "docker compose up -d", "category": "deploy"}]},
            done("Started with compose", services_started=[{"name": "app", "port": 8080}]),
        ]
    )
    result = await plan_of(store, model, tmp_path, replanner={"after_steps": True}).start(new_id())
    assert result.status is RunStatus.COMPLETED, result
    assert [s["step_name"] for s in result.state["plan_steps"]] == ["prepare", "compose up"]
    assert (
        "Outputs:" in model.calls[1][-1]["content"] and "docker-compose.yml" in model.calls[1][-1]["content"]
    )
    assert result.state["plan"]["revision"] == 1


async def test_keep_leaves_the_plan_and_a_function_can_be_the_replanner(store, tmp_path):
    """{"keep": true} changes nothing; a plain function replanner sees a ReplanRequest."""
    seen: list[ReplanRequest] = []

    def keep(request: ReplanRequest):
        seen.append(request)
        return None

    model = ScriptedModel([done("a"), done("b"), done("c")])
    plan = PlanOrchestrator(
        store=store,
        loop_factory=lambda cfg: AgentLoop(model, LocalSession(cwd=tmp_path), store, config=cfg),
        steps=list(STEPS),
        log_dir=None,
        replanner=keep,
    )
    result = await plan.start(new_id())
    assert result.status is RunStatus.COMPLETED and result.state["plan"]["revision"] == 0
    assert [(r.trigger, r.position, [s.name for s in r.remaining]) for r in seen] == [
        ("step_done", 1, ["install postgres", "migrate"]),
        ("step_done", 2, ["migrate"]),
    ]


async def test_retry_after_the_agent_said_failed_runs_the_step_again(store, tmp_path):
    """The failed nested run stays as it ended; the retry is a fresh attempt (``<run>.1-2``)."""
    model = ScriptedModel([{"action": "failed", "message": "db down"}, done("migrated once the db was up")])
    plan = PlanOrchestrator(
        store=store,
        steps=[PlanStep(name="migrate", goal="run the migrations")],
        loop_factory=lambda cfg: AgentLoop(model, LocalSession(cwd=tmp_path), store, config=cfg),
        log_dir=None,
    )
    run_id = new_id()
    paused = await plan.start(run_id)
    assert paused.status is RunStatus.PAUSED and "db down" in paused.report.error
    done_ = await plan.resume(run_id, decision="retry")
    assert done_.status is RunStatus.COMPLETED and len(model.calls) == 2
    assert (await store.get_run(f"{run_id}.1")).status is RunStatus.FAILED
    assert done_.state["plan_steps"][0]["run_id"] == f"{run_id}.1-2"
