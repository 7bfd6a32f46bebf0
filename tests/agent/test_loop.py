"""The agent loop end to end: scripted model, real commands, real store."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.stores.conftest import new_id
from tether.agent import AgentLoop, CallbackInteractionHandler, LoopConfig, NonInteractiveHandler
from tether.agent.deploy import AsyncDeploymentAgent
from tether.agent.prompt import new_window
from tether.models import ScriptedModel
from tether.state import RunStatus
from tether.stores import open_store
from tether.tools import LocalSession
from tether.tools.redact import Redactor

SAMPLE = Path(__file__).parent / "sample_app"
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def execute(command: str, why: str = "next step") -> dict:
    return {"action": "execute", "command": command, "reasoning": why}


@pytest.fixture
async def store(tmp_path):
    async with open_store(f"sqlite:///{tmp_path}/agent.db") as s:
        yield s


@pytest.fixture
def app_dir(tmp_path) -> Path:
    target = tmp_path / "app"
    shutil.copytree(SAMPLE, target)
    return target


async def test_local_deployment_of_the_sample_app(store, app_dir, tmp_path):
    """Start the app, health-check it over HTTP, stop it: real commands from a scripted model."""
    port = free_port()
    health = f"{sys.executable} -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{port}/health').read().decode())\""
    model = ScriptedModel(
        [
            execute("ls"),
            execute(f"nohup {sys.executable} app.py {port} > app.log 2>&1 & echo $! > app.pid"),
            execute(f"sleep 0.7; {health}"),
            execute("kill $(cat app.pid) && echo stopped"),
            {"action": "done", "message": f"deployed and verified on http://127.0.0.1:{port}/health"},
        ]
    )
    agent = AsyncDeploymentAgent(model, store, log_dir=tmp_path / "logs", max_iterations=10)
    async with LocalSession(cwd=app_dir) as session:
        result = await agent.deploy_local(str(app_dir), session=session, deploy_dir=str(app_dir))
    assert result.success, result.message
    log = json.loads(result.log_file.read_text())
    assert log["status"] == "success" and log["context"]["project_type"] == "python"
    commands = [s["command"] for s in log["steps"] if s["action"] == "execute"]
    assert commands[0] == "ls" and len(commands) == 4
    assert log["steps"][-1]["action"] == "done" and log["steps"][-1]["iteration"] == 5
    assert '{"status": "ok"}' in log["steps"][2]["result"]["stdout"]
    assert "stopped" in log["steps"][3]["result"]["stdout"]
    assert "app.py" in log["steps"][0]["result"]["stdout"]
    # the first prompt carried the repository analysis and host facts
    first = json.dumps(model.calls[0])
    assert "Pre-Analyzed Repository Context" in first and "app.py" in first
    # the goal is labelled once (the context item adds its own "Goal:" label)
    assert "Goal: Goal:" not in first and "Goal: " in first
    # later prompts carried the previous command's output
    assert any('{"status": "ok"}' in str(m["content"]) for m in model.calls[3])


async def test_a_model_that_never_finishes_stops_at_max_iterations(store, tmp_path):
    model = ScriptedModel(lambda messages: execute("echo still working"))
    loop = AgentLoop(model, LocalSession(cwd=tmp_path), store, config=LoopConfig(max_iterations=4))
    result = await loop.start(new_id(), "never ends")
    assert result.status is RunStatus.FAILED
    assert "after 4 iterations" in result.state["final_output"]
    assert len(model.calls) == 4 and len(result.state["command_history"]) == 4


async def test_invalid_replies_go_back_to_the_model_then_fail(store, tmp_path):
    model = ScriptedModel(["not json at all", {"action": "execute"}, {"action": "done", "message": "ok"}])
    loop = AgentLoop(model, LocalSession(cwd=tmp_path), store, config=LoopConfig(max_iterations=5))
    result = await loop.start(new_id(), "g")
    assert result.status is RunStatus.COMPLETED
    second_prompt = json.dumps(model.calls[1])
    assert "invalid" in second_prompt and "JSON" in second_prompt
    assert any('needs a non-empty "command"' in str(m["content"]) for m in model.calls[2])

    bad = ScriptedModel(["x", "y", "z"])
    failed = await AgentLoop(bad, LocalSession(cwd=tmp_path), store).start(new_id(), "g")
    assert failed.status is RunStatus.FAILED and "3 invalid replies" in failed.state["final_output"]


async def test_destructive_command_is_refused_and_the_run_continues(store, tmp_path):
    from tether.tools.policy import CommandPolicy

    marker = tmp_path / "marker"
    model = ScriptedModel(
        [
            execute(f"touch {marker} && rm -rf /"),
            {"action": "done", "message": "gave up on that"},
        ]
    )
    loop = AgentLoop(model, LocalSession(cwd=tmp_path), store, policy=CommandPolicy())
    result = await loop.start(new_id(), "g")
    assert result.status is RunStatus.COMPLETED
    assert not marker.exists()  # nothing of the command ran
    assert "refused" in json.dumps(model.calls[1]).lower()
    assert result.state["command_history"][0]["success"] is False


async def test_ask_user_with_each_handler(store, tmp_path):
    question = {
        "action": "ask_user",
        "question": "Which port?",
        "options": ["3000", "8080"],
        "default_option": "8080",
    }
    done = {"action": "done", "message": "ok"}

    asked = []
    model = ScriptedModel([question, done])
    handler = CallbackInteractionHandler(lambda req: asked.append(req.question) or "3000")
    result = await AgentLoop(model, LocalSession(cwd=tmp_path), store, interaction=handler).start(
        new_id(), "g"
    )
    assert asked == ["Which port?"] and result.state["user_interactions"][0]["answer"] == "3000"
    assert "A: 3000" in json.dumps(model.calls[1])

    model = ScriptedModel([question, done])
    auto = await AgentLoop(
        model, LocalSession(cwd=tmp_path), store, interaction=NonInteractiveHandler(policy="default")
    ).start(new_id(), "g")
    assert auto.state["user_interactions"][0]["answer"] == "8080"

    model = ScriptedModel([question, done])
    cancelled = await AgentLoop(
        model, LocalSession(cwd=tmp_path), store, interaction=NonInteractiveHandler(policy="cancel")
    ).start(new_id(), "g")
    assert cancelled.status is RunStatus.FAILED and "cancelled" in cancelled.state["final_output"]


async def test_a_question_waits_durably_and_is_answered_from_another_loop(store, tmp_path):
    model = ScriptedModel([{"action": "ask_user", "question": "Domain?", "input_type": "text"}])
    run_id = new_id()
    paused = await AgentLoop(model, LocalSession(cwd=tmp_path), store).start(run_id, "g")
    assert paused.status is RunStatus.PAUSED
    assert (await store.load(run_id)).state["pending_question"]["question"] == "Domain?"
    later = ScriptedModel([{"action": "done", "message": "configured"}])  # a new process, say
    result = await AgentLoop(later, LocalSession(cwd=tmp_path), store).answer(run_id, "example.org")
    assert result.status is RunStatus.COMPLETED
    assert "A: example.org" in json.dumps(later.calls[0])
    assert result.state["pending_question"] is None


async def test_secrets_never_reach_the_log_or_the_next_prompt(store, tmp_path):
    planted = "sk-proj-ABCDEF0123456789abcdef0123456789XYZ"
    password = "correct-horse-battery-staple"
    model = ScriptedModel(
        [
            execute(f"echo OPENAI_API_KEY={planted}"),
            {"action": "ask_user", "question": "Database password?", "input_type": "secret"},
            execute('test -n "$TETHER_SECRET_1" && echo "password length ${#TETHER_SECRET_1}"'),
            {"action": "done", "message": "ok"},
        ]
    )
    handler = CallbackInteractionHandler(lambda req: password)
    redactor = Redactor()
    agent = AsyncDeploymentAgent(
        model, store, log_dir=tmp_path / "logs", interaction_handler=handler, redact=redactor
    )
    app = tmp_path / "repo"
    app.mkdir()
    (app / "index.html").write_text("<h1>hi</h1>")
    async with LocalSession(cwd=app) as session:
        result = await agent.deploy_local(str(app), session=session, deploy_dir=str(app))
    assert result.success
    log_text = result.log_file.read_text()
    prompts = json.dumps(model.calls)
    for secret in (planted, password):
        assert secret not in log_text and secret not in prompts
    assert f"password length {len(password)}" in log_text  # the command could use it
    state_text = json.dumps((await store.load(result.run_id)).state, default=str)
    assert password not in state_text and planted not in state_text


async def test_kill_9_mid_run_then_resume(tmp_path):
    """The agent process is SIGKILLed by a command; a new process resumes with its history."""
    db = tmp_path / "agent.db"
    script = tmp_path / "run.py"
    script.write_text(
        "import asyncio, sys\n"
        "from tether.agent import AgentLoop, LoopConfig\n"
        "from tether.models import ScriptedModel\n"
        "from tether.stores import open_store\n"
        "from tether.tools import LocalSession\n"
        "async def main():\n"
        f"    async with open_store('sqlite:///{db}') as store:\n"
        "        model = ScriptedModel([\n"
        "            {'action': 'execute', 'command': 'echo one >> steps.txt'},\n"
        "            {'action': 'execute', 'command': 'echo two >> steps.txt'},\n"
        "            {'action': 'execute', 'command': 'kill -9 $PPID'},\n"
        "        ])\n"
        f"        loop = AgentLoop(model, LocalSession(cwd={str(tmp_path)!r}), store)\n"
        "        await loop.start('crashy', 'count to three')\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == -9, out.stderr
    async with open_store(f"sqlite:///{db}") as store:
        before = await store.load("crashy")
        assert [h["command"] for h in before.state["command_history"]] == [
            "echo one >> steps.txt",
            "echo two >> steps.txt",
        ]
        model = ScriptedModel([execute("echo three >> steps.txt"), {"action": "done", "message": "counted"}])
        loop = AgentLoop(model, LocalSession(cwd=tmp_path), store)
        paused = await loop.resume("crashy")  # it died inside a command that changes the host
        assert paused.status is RunStatus.PAUSED and paused.report is not None
        assert "kill -9 $PPID" in paused.report.error and paused.report.error_type == "SideEffectCut"
        assert model.calls == []  # nobody asked the model: the run waits for a person
        result = await loop.resume("crashy", decision="takeover", note="that command killed the agent")
    assert result.status is RunStatus.COMPLETED
    assert (tmp_path / "steps.txt").read_text().split() == ["one", "two", "three"]
    assert any("echo two" in str(m["content"]) for m in model.calls[0])  # the resumed model saw the history


async def test_the_same_deployment_over_ssh(store, app_dir, tmp_path):
    """deploy() through an SSH server started on loopback: host facts and commands over SSH."""
    from tests.tools.sshserver import PASSWORD, USERNAME, loopback_ssh
    from tether.tools import SSHCredentials, SSHSession

    port = free_port()
    health = f"{sys.executable} -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{port}/health').read().decode())\""
    model = ScriptedModel(
        [
            execute(
                f"cd {app_dir} && nohup {sys.executable} app.py {port} > app.log 2>&1 & echo $! > {app_dir}/app.pid"
            ),
            execute(f"sleep 0.7; {health}"),
            execute(f"kill $(cat {app_dir}/app.pid) && echo stopped"),
            {"action": "done", "message": "deployed over ssh"},
        ]
    )
    agent = AsyncDeploymentAgent(model, store, log_dir=tmp_path / "logs")
    async with loopback_ssh(tmp_path) as server:
        creds = SSHCredentials(
            host="127.0.0.1",
            port=server.port,
            username=USERNAME,
            password=PASSWORD,
            known_hosts=server.known_hosts_path,
            connect_timeout=5.0,
        )
        async with SSHSession(creds) as session:
            result = await agent.deploy(
                str(app_dir),
                session=session,
                deploy_dir=str(app_dir),
                target=f"{USERNAME}@127.0.0.1:{server.port}",
            )
    assert result.success, result.message
    log = json.loads(result.log_file.read_text())
    assert log["target"].startswith("deployer@127.0.0.1") and log["status"] == "success"
    assert '{"status": "ok"}' in log["steps"][1]["result"]["stdout"]
    assert "stopped" in log["steps"][2]["result"]["stdout"]
    import platform

    assert platform.machine() in json.dumps(model.calls[0])  # host facts gathered over SSH


async def test_an_iteration_that_fails_half_way_is_retried_cleanly(store, tmp_path):
    """A transient failure after the window was half-updated: the retry starts from the checkpoint."""
    from tether.runtime import RetryPolicy, TransientError

    question = {"action": "ask_user", "question": "Port?", "options": ["3000", "8080"]}
    model = ScriptedModel([execute("echo one"), question, question, {"action": "done", "message": "ok"}])
    calls = []

    def flaky(req):
        calls.append(req.question)
        if len(calls) == 1:
            raise TransientError("the UI went away")
        return "3000"

    loop = AgentLoop(model, LocalSession(cwd=tmp_path), store, interaction=CallbackInteractionHandler(flaky))
    runner = loop.runner()
    runner.retry = RetryPolicy(attempts=3, initial=0.001, maximum=0.002, jitter=0)
    window = new_window(loop.config, "g", loop.redact)
    result = await runner.start(
        new_id(), {"goal": "g", "context_window": window.to_state(), "invalid_replies": 0}
    )
    assert result.status is RunStatus.COMPLETED, result.report and result.report.render()
    assert calls == ["Port?", "Port?"]
    assert result.state["user_interactions"][0]["answer"] == "3000"
