"""The synchronous DeploymentAgent facade used as the design's examples use it, and the
run log compared field by field with the design's log format."""

from __future__ import annotations

import asyncio
import json

import pytest

from tether.agent import (
    CallbackInteractionHandler,
    DeploymentAgent,
    LocalDeploymentRequest,
)
from tether.errors import ConfigError
from tether.models import LLMConfig, ScriptedModel
from tether.tools import LocalSession


def script():
    return ScriptedModel(
        [
            {"action": "execute", "command": "echo cloned > cloned.txt", "reasoning": "first clone the repo"},
            "this is not JSON",
            {
                "action": "ask_user",
                "question": "Which port?",
                "options": ["3000", "8080"],
                "input_type": "choice",
            },
            {"action": "execute", "command": "sh -c 'exit 3'", "reasoning": "try the build"},
            {"action": "done", "message": "deployed on http://127.0.0.1:8080"},
        ],
        model="scripted-gemini",
    )


@pytest.fixture
def project(tmp_path):
    repo = tmp_path / "project"
    repo.mkdir()
    (repo / "package.json").write_text('{"name": "project", "scripts": {"start": "node index.js"}}')
    return repo


def test_deploy_local_as_the_design_example_uses_it(project, tmp_path):
    """config, max_iterations, log_dir; deploy_local(request, host_facts, local_session) -> bool."""
    llm_config = LLMConfig(
        provider="gemini", model="gemini-2.5-flash", api_key="your-api-key", temperature=0.0
    )
    agent = DeploymentAgent(
        config=llm_config,
        max_iterations=30,
        log_dir=str(tmp_path / "my_logs"),
        interaction_handler=CallbackInteractionHandler(lambda request: "8080"),
        model=script(),
        store_url=f"sqlite:///{tmp_path}/agent.db",
    )
    session = LocalSession(cwd=project)
    request = LocalDeploymentRequest(repo_url=str(project), deploy_dir=str(project))
    success = agent.deploy_local(request=request, host_facts=None, local_session=session, repo_context=None)

    assert success is True
    assert agent.current_log_file == tmp_path / "my_logs" / f"{agent.last_result.run_id}.json"
    assert [h["command"] for h in agent.history] == ["echo cloned > cloned.txt", "sh -c 'exit 3'"]
    assert agent.history[1]["exit_code"] == 3 and agent.history[1]["success"] is False
    assert agent.user_interactions == [{"iteration": 3, "question": "Which port?", "answer": "8080"}]
    assert (project / "cloned.txt").read_text() == "cloned\n"

    log = json.loads(agent.current_log_file.read_text())
    for key in (
        "repo_url",
        "target",
        "deploy_dir",
        "start_time",
        "end_time",
        "status",
        "config",
        "context",
        "steps",
    ):
        assert key in log, key
    assert (
        log["repo_url"] == str(project) and log["target"] == "localhost" and log["deploy_dir"] == str(project)
    )
    assert log["status"] == "success" and log["end_time"] >= log["start_time"]
    assert log["config"] == {
        "provider": "scripted",
        "model": "scripted-gemini",  # the model that really answered
        "temperature": 0.0,
        "max_iterations": 30,
        "endpoint": None,  # a scripted model calls no endpoint
    }
    assert log["context"] == {"project_type": "nodejs", "framework": None}
    assert [(s["iteration"], s["action"]) for s in log["steps"]] == [
        (1, "execute"),
        (2, "invalid"),
        (3, "ask_user"),
        (4, "execute"),
        (5, "done"),
    ]
    first = log["steps"][0]
    assert set(first) == {"iteration", "timestamp", "action", "command", "reasoning", "result"}
    assert first["reasoning"] == "first clone the repo"
    assert first["result"] == {"success": True, "exit_code": 0, "stdout": "", "stderr": ""}
    assert log["steps"][1]["reply"] == "this is not JSON" and log["steps"][1]["error"]
    assert log["steps"][2]["question"] == "Which port?" and log["steps"][2]["answer"] == "8080"
    assert log["steps"][3]["result"]["exit_code"] == 3
    assert log["steps"][4]["message"] == "deployed on http://127.0.0.1:8080"


def test_the_run_log_records_the_configured_endpoint_and_temperature(project, tmp_path):
    """A model built from an LLMConfig: its model, temperature and endpoint go to the log."""
    from tether.agent.deploy import model_info
    from tether.models import create_model

    cfg = LLMConfig(
        provider="ollama", model="qwen2.5:7b", endpoint="http://127.0.0.1:11434/v1", temperature=0.2
    )
    info = model_info(create_model(cfg), cfg)
    assert info == {
        "provider": "ollama",
        "model": "qwen2.5:7b",
        "temperature": 0.2,
        "endpoint": "http://127.0.0.1:11434/v1",
    }


async def test_the_facade_works_inside_a_running_event_loop(project, tmp_path):
    """Called from async code (a notebook, an app), it runs on a private loop and returns."""
    agent = DeploymentAgent(
        LLMConfig(provider="scripted", model="demo"),
        log_dir=str(tmp_path / "logs"),
        model=ScriptedModel([{"action": "done", "message": "nothing to do"}]),
        store_url=f"sqlite:///{tmp_path}/agent.db",
    )
    request = LocalDeploymentRequest(repo_url=str(project), deploy_dir=str(project))
    assert asyncio.get_running_loop().is_running()
    assert agent.deploy_local(request, None, LocalSession(cwd=project)) is True
    assert agent.last_result.message == "nothing to do"


def test_a_question_without_a_handler_pauses_and_resume_answers_it(project, tmp_path):
    """No interaction handler: deploy_local returns False with the question; resume answers."""
    model = ScriptedModel(
        [
            {"action": "ask_user", "question": "Port?", "options": ["3000", "8080"]},
            {"action": "done", "message": "listening on 3000"},
        ]
    )
    agent = DeploymentAgent(
        LLMConfig(provider="scripted", model="demo"),
        log_dir=str(tmp_path / "logs"),
        model=model,
        store_url=f"sqlite:///{tmp_path}/agent.db",
    )
    request = LocalDeploymentRequest(repo_url=str(project), deploy_dir=str(project))
    assert agent.deploy_local(request, None, LocalSession(cwd=project)) is False
    paused = agent.last_result
    assert str(paused.status) == "PAUSED" and paused.pending_question["question"] == "Port?"
    assert agent.resume(paused.run_id, LocalSession(cwd=project), answer="3000") is True
    assert agent.user_interactions == [{"iteration": 1, "question": "Port?", "answer": "3000"}]
    assert "Port?\nA: 3000" in json.dumps(model.calls[-1]).replace("\\n", "\n")


def test_a_provider_that_needs_a_key_fails_at_construction(tmp_path):
    with pytest.raises(ConfigError, match="No API key"):
        DeploymentAgent(LLMConfig(provider="openai", model="gpt-4o-mini"), log_dir=str(tmp_path))


def test_the_facade_keeps_secrets_out_of_the_log_and_refuses_destructive_commands(project, tmp_path):
    """By default the facade redacts secrets and checks commands against the policy."""
    planted = "sk-proj-ABCDEF0123456789abcdef0123456789XYZ"
    model = ScriptedModel(
        [
            {"action": "execute", "command": f"echo OPENAI_API_KEY={planted}"},
            {"action": "execute", "command": "rm -rf /"},
            {"action": "done", "message": "done"},
        ]
    )
    agent = DeploymentAgent(
        LLMConfig(provider="scripted", model="demo"),
        log_dir=str(tmp_path / "logs"),
        model=model,
        store_url=f"sqlite:///{tmp_path}/agent.db",
    )
    request = LocalDeploymentRequest(repo_url=str(project), deploy_dir=str(project))
    assert agent.deploy_local(request, None, LocalSession(cwd=project)) is True
    assert planted not in agent.current_log_file.read_text() and planted not in json.dumps(model.calls)
    assert "CommandRefused" in agent.history[1]["stderr"] and agent.history[1]["success"] is False


@pytest.mark.slow
async def test_deploy_over_ssh_through_the_facade(project, tmp_path):
    """deploy(request, host_facts, ssh_session) against an SSH server on loopback; the
    call runs in a thread so this loop keeps serving SSH."""
    from tests.tools.sshserver import PASSWORD, USERNAME, loopback_ssh
    from tether.agent import DeploymentRequest
    from tether.tools import SSHCredentials, SSHSession

    model = ScriptedModel(
        [
            {"action": "execute", "command": f"cd {project} && echo over-ssh > ssh.txt"},
            {"action": "done", "message": "deployed over ssh"},
        ]
    )
    agent = DeploymentAgent(
        LLMConfig(provider="scripted", model="demo"),
        log_dir=str(tmp_path / "logs"),
        model=model,
        store_url=f"sqlite:///{tmp_path}/agent.db",
    )
    async with loopback_ssh(tmp_path) as server:
        creds = SSHCredentials(
            host="127.0.0.1",
            port=server.port,
            username=USERNAME,
            password=PASSWORD,
            known_hosts=server.known_hosts_path,
            connect_timeout=5.0,
        )
        target = f"{USERNAME}@127.0.0.1:{server.port}"
        request = DeploymentRequest(repo_url=str(project), deploy_dir=str(project), host=target)
        ok = await asyncio.to_thread(agent.deploy, request, None, SSHSession(creds))
    assert ok is True
    assert (project / "ssh.txt").read_text() == "over-ssh\n"
    log = json.loads(agent.current_log_file.read_text())
    assert log["target"] == target and log["status"] == "success"


@pytest.mark.parametrize(
    ("last", "status"),
    [
        ({"action": "failed", "message": "no docker here"}, "failed"),
        ({"action": "step_done", "outputs": {"summary": "built"}}, "success"),
    ],
)
async def test_the_run_log_lists_failed_and_step_done_turns(tmp_path, last, status):
    from tether.agent import AgentLoop
    from tether.stores import open_store

    model = ScriptedModel([{"action": "execute", "command": "true"}, last])
    async with open_store(f"sqlite:///{tmp_path}/loop.db") as store:
        loop = AgentLoop(model, LocalSession(cwd=tmp_path), store)
        await loop.start("r", "build it")
        log = await loop.run_log("r")
    assert log["status"] == status
    assert [s["action"] for s in log["steps"]] == ["execute", last["action"]]
    assert {k: log["steps"][1][k] for k in last} == last
