"""Seed 000's plan orchestrator: steps run by the loop, rolling summary, step_done outputs."""

from __future__ import annotations

import json

import pytest

from tests.stores.conftest import new_id
from tether.agent import AgentLoop, PlanOrchestrator, PlanStep
from tether.models import ScriptedModel
from tether.state import RunStatus
from tether.stores import open_store
from tether.tools import LocalSession


@pytest.fixture
async def store(tmp_path):
    async with open_store(f"sqlite:///{tmp_path}/plan.db") as s:
        yield s


def step_done(summary, **outputs):
    return {"action": "step_done", "message": summary, "outputs": {"summary": summary, **outputs}}


async def test_each_step_sees_the_rolling_summary_of_the_ones_before(store, tmp_path):
    model = ScriptedModel(
        [
            {"action": "execute", "command": "python3 --version"},
            step_done("Checked Python", environment_changes={"python": "3.11"}),
            step_done("Wrote config", new_configurations={"PORT": "8000"}, artifacts=["/srv/app/.env"]),
            {"action": "done", "message": "all good"},  # 'done' also finishes a step (fallback summary)
        ]
    )
    plan = PlanOrchestrator(
        store=store,
        loop_factory=lambda cfg: AgentLoop(model, LocalSession(cwd=tmp_path), store, config=cfg),
        steps=[
            PlanStep(name="check", goal="check the runtime"),
            PlanStep(name="configure", goal="write .env"),
            PlanStep(name="verify", goal="verify", success_criteria="GET /health is 200"),
        ],
        project_name="demo",
        deploy_dir="/srv/app",
        strategy="traditional",
    )
    result = await plan.start(new_id())
    assert result.status is RunStatus.COMPLETED
    summary = result.state["execution_summary"]
    assert summary["environment"] == {"python": "3.11"} and summary["configurations"] == {"PORT": "8000"}
    assert [a for a in summary["completed_actions"] if "Wrote config" in a]
    third_prompt = json.dumps(model.calls[3])
    assert "PORT" in third_prompt and "python" in third_prompt and "GET /health is 200" in third_prompt
    assert set(result.state["structured_outputs"]) == {"check", "configure", "verify"}


async def test_a_failed_plan_step_goes_through_the_runtime_failure_handling(store, tmp_path):
    model = ScriptedModel([step_done("ok"), {"action": "failed", "message": "no database available"}])
    plan = PlanOrchestrator(
        store=store,
        loop_factory=lambda cfg: AgentLoop(model, LocalSession(cwd=tmp_path), store, config=cfg),
        steps=[PlanStep(name="prepare", goal="p"), PlanStep(name="migrate", goal="run migrations")],
    )
    result = await plan.start(new_id())
    assert result.status is RunStatus.PAUSED  # waits for retry / skip / abort
    assert result.report.item_name == "migrate" and "no database available" in result.report.error
    assert result.report.kind.value == "data"
    skipped = await plan.resume(result.run_id, decision="skip")
    assert skipped.status is RunStatus.COMPLETED


async def test_a_step_without_outputs_feeds_the_summary_from_its_commands(store, tmp_path):
    """No step_done outputs: configurations and artefacts come from the commands' output."""
    model = ScriptedModel(
        [
            {"action": "execute", "command": "echo API_PORT=8443"},
            {"action": "execute", "command": "echo 'Successfully tagged reg.io/shop:2.1'"},
            {"action": "done", "message": "configured"},
        ]
    )
    plan = PlanOrchestrator(
        store=store,
        loop_factory=lambda cfg: AgentLoop(model, LocalSession(cwd=tmp_path), store, config=cfg),
        steps=[PlanStep(name="configure", goal="set the port")],
    )
    result = await plan.start(new_id())
    assert result.status is RunStatus.COMPLETED
    summary = result.state["execution_summary"]
    assert summary["configurations"] == {"API_PORT": "8443"}
    assert summary["artifacts"] == ["reg.io/shop:2.1"]
