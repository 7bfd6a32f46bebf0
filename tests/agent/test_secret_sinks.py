"""Planted secrets (environment, files, command output, exception texts) reach no sink's raw bytes."""

from __future__ import annotations

import logging
from pathlib import Path

from tests.stores.conftest import new_id
from tether.agent import CallbackInteractionHandler
from tether.agent.deploy import AsyncDeploymentAgent
from tether.models import ScriptedModel
from tether.stores import open_store
from tether.tools import LocalSession
from tether.tools.redact import Redactor

ENV_KEY = "sk-proj-PLANTEDenv0123456789abcdef0123456789"
FILE_PASSWORD = "PLANTED-file-hunter2-password"
URL_PASSWORD = "PLANTEDurlPassw0rd"
ANSWER = "PLANTED-answer-correct-horse"


def execute(command: str) -> dict:
    return {"action": "execute", "command": command, "reasoning": "next"}


async def test_planted_secrets_reach_no_sink(tmp_path: Path, monkeypatch, caplog) -> None:
    """Env, file, output, exception and answer secrets: absent from the DB file, run log and logs."""
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    app = tmp_path / "repo"
    app.mkdir()
    (app / "config.ini").write_text(f"[db]\npassword = {FILE_PASSWORD}\n")
    (app / "migrate.sh").write_text(
        f"echo 'connect failed: postgresql://app:{URL_PASSWORD}@db:5432/x' >&2\nexit 3\n"
    )
    model = ScriptedModel(
        [
            execute("env"),  # the agent's own environment: scrubbed
            execute("cat config.ini"),  # a file with a password
            execute("sh migrate.sh"),  # an error message with a database URL and its password
            {"action": "ask_user", "question": "Database password?", "input_type": "secret"},
            execute('echo "got ${#TETHER_SECRET_1} chars"'),
            {"action": "done", "message": "ok"},
        ]
    )
    db = tmp_path / "agent.db"
    redactor = Redactor()
    async with open_store(f"sqlite:///{db}") as store:
        agent = AsyncDeploymentAgent(
            model,
            store,
            log_dir=tmp_path / "logs",
            interaction_handler=CallbackInteractionHandler(lambda req: ANSWER),
            redact=redactor,
        )
        async with LocalSession(cwd=app, redact=redactor) as session:
            result = await agent.deploy_local(str(app), session=session, deploy_dir=str(app), run_id=new_id())
    assert result.success
    sinks = {
        "run log": result.log_file.read_bytes(),
        "logs": caplog.text.encode(),
        "prompts": repr(model.calls).encode(),
    }
    for path in tmp_path.glob("agent.db*"):
        if path.is_dir():  # the run's artefacts (trimmed outputs, archives) are a sink too
            for file in path.rglob("*"):
                if file.is_file():
                    sinks[str(file.relative_to(tmp_path))] = file.read_bytes()
        else:
            sinks[path.name] = path.read_bytes()
    for name, raw in sinks.items():
        for secret in (ENV_KEY, FILE_PASSWORD, URL_PASSWORD, ANSWER):
            assert secret.encode() not in raw, f"{secret} leaked into {name}"
    assert b"got 28 chars" in sinks["run log"]  # the command could still use the answer
