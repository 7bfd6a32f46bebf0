"""The bundled agents as named workflows of the worker registry: submitted by name with a
scripted model in their input, executed by a RunExecutor (what a worker does with the
message) and, once, by real ``tether submit`` and ``tether worker`` processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.workers.conftest import broker_url, opened, store_url, wait_status
from tether.errors import ConfigError
from tether.state import RunStatus
from tether.state.reserved import runtime_get
from tether.stores import CheckpointStore, open_store
from tether.workers import Registry, RunExecutor, store_pending


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    async with open_store(f"sqlite:///{tmp_path}/t.db") as s:
        yield s


def scripted(*replies: Any) -> dict[str, Any]:
    return {"provider": "scripted", "replies": list(replies)}


def step_done(summary: str) -> dict[str, Any]:
    return {"action": "step_done", "message": summary, "outputs": {"summary": summary}}


def project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "requirements.txt").write_text("flask\n")
    (root / "app.py").write_text("print('hi')\n")
    return root


async def run(store: CheckpointStore, workflow: str, inputs: dict[str, Any]) -> Any:
    registry = Registry()
    rid = await store_pending(store, workflow, inputs, registry=registry)
    out = await RunExecutor(store, registry).execute(rid)
    assert (out.action, out.status) == ("executed", "COMPLETED"), out
    cp = await store.load(rid)
    assert cp is not None
    return cp.state


def test_the_registry_knows_the_bundled_agents() -> None:
    assert {"deploy", "plan", "orchestrate", "orchestrate-demo"} <= set(Registry().names())
    assert Registry(bundled=False).names() == []


async def test_plan_runs_each_step_with_the_agent_loop(store: CheckpointStore, tmp_path: Path) -> None:
    plan = {
        "project_name": "svc",
        "steps": [{"name": "Install", "goal": "install it"}, {"name": "Start", "goal": "start it"}],
    }
    inputs = {"plan": plan, "deploy_dir": str(project(tmp_path / "svc"))}
    state = await run(
        store, "plan", {**inputs, "model": scripted(step_done("installed"), step_done("started"))}
    )
    assert [s["step_name"] for s in state["plan_steps"]] == ["Install", "Start"]
    assert [s["outputs"]["summary"] for s in state["plan_steps"]] == ["installed", "started"]


@pytest.mark.slow
async def test_orchestrate_with_a_scripted_main_and_the_demo_roles(
    store: CheckpointStore, tmp_path: Path
) -> None:
    from tether.orchestrator.demo import make_sample_repo

    work = tmp_path / "proj"
    make_sample_repo(work)
    main = {
        "script": [
            {"next_agent": "TEST", "reason": "run the suite first"},
            {"next_agent": "REVIEW", "reason": "the sub-loop fixed it; review the change"},
            {"next_agent": "FINISH", "reason": "reviewed"},
            {"next_agent": "FINISH", "reason": "accepted: the suite passes"},
        ]
    }
    inputs = {"workdir": str(work), "task": "fix the median", "main": main, "roles": {"*": "demo"}}
    state = await run(store, "orchestrate", inputs)
    assert state["main_replies"] >= 3 and state["metrics"]


def test_a_submission_the_agents_cannot_run_is_refused_before_it_is_stored() -> None:
    registry = Registry()
    with pytest.raises(ConfigError, match="repo"):
        registry.get("deploy").initial_state({})
    with pytest.raises(ConfigError, match="not offered"):  # no external commands from a submission
        registry.get("orchestrate").initial_state({"workdir": "/w", "task": "t", "roles": {"DEV": "cmd:sh"}})
    with pytest.raises(ConfigError, match="steps"):
        registry.get("plan").initial_state({"plan": {"steps": []}})


async def test_without_a_model_factory_a_real_model_is_a_clear_failure(
    store: CheckpointStore, tmp_path: Path
) -> None:
    registry = Registry()
    rid = await store_pending(store, "deploy", {"repo": str(project(tmp_path / "svc"))}, registry=registry)
    with pytest.raises(ConfigError, match="no model configured"):
        await RunExecutor(store, registry).execute(rid)


@pytest.mark.slow
async def test_tether_submit_runs_the_deploy_agent_on_a_worker(
    fleet_factory: Any, tmp_path: Path, queue: str
) -> None:
    """`tether submit deploy --input …` with a scripted model, executed by `tether worker`:
    the repository and the host are analysed on the worker (the run's first step), then the
    agent loop runs a command and says done."""
    store_at, broker_at = store_url("postgresql"), broker_url("amqp")
    fleet = fleet_factory(store_at, broker_at)
    fleet.start(1, "--sweep-interval", "0")
    repo = project(tmp_path / "svc")
    model = scripted({"action": "execute", "command": "ls"}, {"action": "done", "message": "it runs"})
    inputs = {"repo": str(repo), "model": model}
    cmd = [sys.executable, "-c", "from tether.cli.app import main; main()", "submit", "deploy"]
    cmd += ["--store", store_at, "--broker", broker_at, "--queue", queue, "--input", json.dumps(inputs)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=fleet.env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip().splitlines()[-1]
    async with opened(store_at) as store:
        assert (
            await wait_status(store, run_id, {RunStatus.COMPLETED, RunStatus.FAILED}) is RunStatus.COMPLETED
        )
        cp = await store.load(run_id)
        assert cp is not None
        state = cp.state
    assert state["final_output"] == "it runs" and str(repo) in state["goal"]
    assert [c["command"] for c in state["command_history"]] == ["ls"]
    assert state["log_header"]["context"]["project_type"] == "python"
    assert len(state["prompt_log"]) == 2  # one model call per iteration
    assert runtime_get(state, "lease") is None
