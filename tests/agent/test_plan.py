"""The plan orchestrator: steps run by the loop, the exact step prompt, predecessor outputs,
the rolling summary as a reducer, and the plan log."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.stores.conftest import new_id
from tether.agent import AgentLoop, PlanOrchestrator, PlanStep, StepContext, StepResult
from tether.context.summaries import StepOutputs
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


# the example plan of the design: install Node.js, then build, then start
NODE_STEPS = [
    PlanStep(name="Install Node.js", goal="Install Node.js 18 with nvm", category="prerequisite"),
    PlanStep(
        name="Build Application",
        goal="Run npm build to create production bundle",
        category="build",
        success_criteria="dist/ folder exists with index.js",
    ),
    PlanStep(name="Start Service", goal="Start the app with pm2", category="deploy"),
]

STEP_2_PROMPT = """You are a deployment agent executing a specific deployment step.

# Current Deployment State
- Project: my-app
- Deploy Directory: /home/user/my-app
- Strategy: traditional

## Environment
- node_version: 18.17.0
- pm2_installed: True

## Completed Actions
- [PREREQUISITE] Install Node.js: Installed Node.js 18.17.0

## Outputs of Step 1
{"summary": "Installed Node.js 18.17.0", "environment_changes": {"node_version": "18.17.0", "pm2_installed": true}}

---

# Current Step
- **Step 2**: Build Application
- **Goal**: Run npm build to create production bundle
- **Success Criteria**: dist/ folder exists with index.js

---

When step is COMPLETE, you MUST provide:
{
  "action": "step_done",
  "outputs": {
    "summary": "REQUIRED: One sentence describing what was accomplished",
    "environment_changes": {"<name>": "<value>"},
    "new_configurations": {"<KEY>": "<value>"},
    "artifacts": ["<path of a key file you created>"],
    "services_started": [{"name": "<service>", "port": 0}],
    "custom_data": {},
    "issues_resolved": [{"issue": "<problem>", "resolution": "<how it was fixed>"}]
  }
}"""


def node_plan(store, model, tmp_path, **kw):
    return PlanOrchestrator(
        store=store,
        loop_factory=lambda cfg: AgentLoop(model, LocalSession(cwd=tmp_path), store, config=cfg),
        steps=NODE_STEPS,
        project_name="my-app",
        deploy_dir="/home/user/my-app",
        strategy="traditional",
        log_dir=tmp_path / "logs",
        **kw,
    )


def node_model():
    return ScriptedModel(
        [
            {"action": "execute", "command": "echo v18.17.0"},
            step_done(
                "Installed Node.js 18.17.0",
                environment_changes={"node_version": "18.17.0", "pm2_installed": True},
            ),
            step_done("Built the production bundle", artifacts=["dist/index.js"]),
            step_done("Started my-app with pm2", services_started=[{"name": "my-app", "port": 3000}]),
        ]
    )


async def test_step_2_prompt_is_the_template_with_the_summary_and_step_1_outputs(store, tmp_path):
    """Step 2's system prompt: role, summary, step 1's outputs, ---, the step, ---, step_done."""
    model = node_model()
    result = await node_plan(store, model, tmp_path).start(new_id())
    assert result.status is RunStatus.COMPLETED
    step1_prompt, step2_prompt, step3_prompt = (model.calls[i][0]["content"] for i in (0, 2, 3))
    assert step2_prompt.startswith(STEP_2_PROMPT + "\n\n")  # then the action rules
    assert '"action": "execute"' in step2_prompt.removeprefix(STEP_2_PROMPT)
    # step 1 sees the initial summary and no predecessor; step 3 sees step 2's outputs only
    assert "## Completed Actions" not in step1_prompt and "Outputs of Step" not in step1_prompt
    assert "- **Step 1**: Install Node.js" in step1_prompt
    assert "## Outputs of Step 2\n" in step3_prompt and "dist/index.js" in step3_prompt
    assert "## Outputs of Step 1" not in step3_prompt
    assert "- [BUILD] Build Application: Built the production bundle" in step3_prompt


async def test_custom_executor_gets_step_contexts_and_returns_step_results(store, tmp_path):
    """StepContext carries the summary and predecessor_outputs; StepResult.succeeded feeds both."""
    seen: list[StepContext] = []

    async def execute(ctx: StepContext) -> StepResult:
        seen.append(ctx)
        outputs = StepOutputs(summary=f"did {ctx.step_name}", new_configurations={f"K{ctx.step_id}": "v"})
        return StepResult.succeeded(outputs={"n": ctx.step_id}, structured_outputs=outputs)

    plan = PlanOrchestrator(
        store=store, steps=NODE_STEPS, step_executor=execute, project_name="p", log_dir=None
    )
    result = await plan.start(new_id())
    assert result.status is RunStatus.COMPLETED
    assert [c.step_id for c in seen] == [1, 2, 3]
    assert seen[0].predecessor_outputs == {} and seen[0].execution_summary.completed_actions == ()
    assert seen[1].predecessor_outputs == {
        1: StepOutputs(summary="did Install Node.js", new_configurations={"K1": "v"})
    }
    assert list(seen[2].predecessor_outputs) == [2]
    assert seen[2].execution_summary.configurations == {"K1": "v", "K2": "v"}
    assert [s["outputs"] for s in result.state["plan_steps"]] == [{"n": 1}, {"n": 2}, {"n": 3}]
    failed = StepResult.failed("disk full")
    assert not failed.success and failed.structured_outputs is None


async def test_each_step_stores_its_outputs_once_and_the_summary_when_the_plan_ends(store, tmp_path):
    """A step's delta holds its outputs once (its plan_steps entry); the summary is written
    whole by the last step, and a fresh process (the CLI's `show`) reads the same summary."""
    ops: list[list[tuple]] = []
    commit = store.commit

    async def spy(ctx, **kw):
        plan_ops = [op for op in ctx.pending().ops if op[0] in ("plan_steps", "execution_summary")]
        if plan_ops:
            ops.append(plan_ops)
        return await commit(ctx, **kw)

    store.commit = spy
    run_id = new_id()
    result = await node_plan(store, node_model(), tmp_path).start(run_id)
    assert result.status is RunStatus.COMPLETED
    assert [[key for key, _, _ in step] for step in ops] == [
        ["plan_steps"],
        ["plan_steps"],
        ["plan_steps", "execution_summary"],
    ]
    assert ops[1][0][2][0]["structured_outputs"]["artifacts"] == ["dist/index.js"]
    summary = result.state["execution_summary"]
    assert ops[2][1][2] == summary and summary["folded_steps"] == 3
    assert (
        summary["services"] == [{"name": "my-app", "port": 3000}] and len(summary["completed_actions"]) == 3
    )
    shown = subprocess.run(
        [sys.executable, "-m", "tether.cli.app", "show", run_id, "--store", f"sqlite:///{tmp_path}/plan.db"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(shown.stdout)["state"]["execution_summary"] == summary


async def test_the_plan_log_has_the_documented_fields(store, tmp_path):
    """<log_dir>/<run_id>.json, field by field as the design's example."""
    plan = node_plan(store, node_model(), tmp_path)
    result = await plan.start(new_id())
    log = json.loads((tmp_path / "logs" / f"{result.run_id}.json").read_text())
    assert plan.current_log_file == tmp_path / "logs" / f"{result.run_id}.json"
    assert log["version"] == "2.0" and log["status"] == "success"
    first = log["steps"][0]
    assert set(first) == {"step_id", "step_name", "outputs", "structured_outputs"}
    assert first["step_id"] == 1 and first["step_name"] == "Install Node.js"
    assert first["outputs"]["message"] == "Installed Node.js 18.17.0"
    assert first["structured_outputs"] == {
        "summary": "Installed Node.js 18.17.0",
        "environment_changes": {"node_version": "18.17.0", "pm2_installed": True},
        "new_configurations": {},
        "artifacts": [],
        "services_started": [],
        "custom_data": {},
        "issues_resolved": [],
    }
    summary = log["execution_summary"]
    assert summary["project_name"] == "my-app"
    assert summary["environment"] == {"node_version": "18.17.0", "pm2_installed": True}
    assert summary["completed_actions"] == [
        "[PREREQUISITE] Install Node.js: Installed Node.js 18.17.0",
        "[BUILD] Build Application: Built the production bundle",
        "[DEPLOY] Start Service: Started my-app with pm2",
    ]
    assert [s["step_id"] for s in log["steps"]] == [1, 2, 3]


async def test_a_failed_plan_step_goes_through_the_runtime_failure_handling(store, tmp_path):
    model = ScriptedModel([step_done("ok"), {"action": "failed", "message": "no database available"}])
    plan = PlanOrchestrator(
        store=store,
        loop_factory=lambda cfg: AgentLoop(model, LocalSession(cwd=tmp_path), store, config=cfg),
        steps=[PlanStep(name="prepare", goal="p"), PlanStep(name="migrate", goal="run migrations")],
        log_dir=tmp_path / "logs",
    )
    result = await plan.start(new_id())
    assert result.status is RunStatus.PAUSED  # waits for retry / skip / abort
    assert result.report.item_name == "migrate" and "no database available" in result.report.error
    assert result.report.kind.value == "data"
    log = json.loads(plan.current_log_file.read_text())
    assert log["status"] == "paused" and [s["step_name"] for s in log["steps"]] == ["prepare"]
    skipped = await plan.resume(result.run_id, decision="skip")
    assert skipped.status is RunStatus.COMPLETED


async def test_done_without_outputs_still_finishes_a_step_with_a_fallback_summary(store, tmp_path):
    model = ScriptedModel([{"action": "done", "message": "all good"}])
    plan = PlanOrchestrator(
        store=store,
        loop_factory=lambda cfg: AgentLoop(model, LocalSession(cwd=tmp_path), store, config=cfg),
        steps=[PlanStep(name="verify", goal="verify", success_criteria="GET /health is 200")],
        log_dir=None,
    )
    result = await plan.start(new_id())
    assert result.state["execution_summary"]["completed_actions"] == ["[GENERAL] verify: all good"]
    assert "- **Success Criteria**: GET /health is 200" in model.calls[0][0]["content"]


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
        log_dir=None,
    )
    result = await plan.start(new_id())
    assert result.status is RunStatus.COMPLETED
    summary = result.state["execution_summary"]
    assert summary["configurations"] == {"API_PORT": "8443"}
    assert summary["artifacts"] == ["reg.io/shop:2.1"]
