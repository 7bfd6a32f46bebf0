"""What the agent loop does with risky replies: prose-quoted actions, an invalid last reply, no handler."""

from __future__ import annotations

import json

import pytest

from tests.stores.conftest import new_id
from tether.agent import AgentLoop, LoopConfig
from tether.models import ScriptedModel
from tether.state import RunStatus
from tether.stores import open_store
from tether.tools import CommandPolicy, LocalSession


@pytest.fixture
async def store(tmp_path):
    async with open_store(f"sqlite:///{tmp_path}/agent.db") as s:
        yield s


async def test_an_action_quoted_inside_prose_is_not_executed(store, tmp_path):
    """'I will not run {...}' runs nothing; a fenced block is an action."""
    marker = tmp_path / "marker"
    quoted = json.dumps({"action": "execute", "command": f"touch {marker}"})
    fenced = "```json\n" + json.dumps({"action": "done", "message": "ok"}) + "\n```"
    model = ScriptedModel([f"I will not run {quoted} because it looks unsafe.", fenced])
    result = await AgentLoop(model, LocalSession(cwd=tmp_path), store).start(new_id(), "g")
    assert not marker.exists()
    assert result.status is RunStatus.COMPLETED
    assert "inside prose" in json.dumps(model.calls[1])


async def test_an_invalid_last_reply_fails_the_run_with_the_reason(store, tmp_path):
    """The last iteration's reply decides: invalid means FAILED, not COMPLETED."""
    model = ScriptedModel([{"action": "execute", "command": "echo hi"}, "no JSON here"])
    loop = AgentLoop(model, LocalSession(cwd=tmp_path), store, config=LoopConfig(max_iterations=2))
    result = await loop.start(new_id(), "g")
    assert result.status is RunStatus.FAILED
    assert "last reply (iteration 2) was invalid" in result.state["final_output"]


async def test_an_unattended_run_pauses_for_an_approval(store, tmp_path):
    """No interaction handler: a command that needs approval pauses the run instead of running."""
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    model = ScriptedModel([{"action": "execute", "command": f"mkdir -p {outside} && touch {outside}/x"}])
    loop = AgentLoop(model, LocalSession(cwd=tmp_path), store, policy=CommandPolicy(safe_paths=()))
    result = await loop.start(new_id(), "g")
    assert result.status is RunStatus.PAUSED
    assert not outside.exists()
