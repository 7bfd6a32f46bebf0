"""The agent loop is one step that loops: iterations are routed, counted and bounded."""

from __future__ import annotations

from tether.agent import AgentLoop, LoopConfig
from tether.models import ScriptedModel
from tether.state import RunStatus
from tether.state.reserved import runtime_state
from tether.stores import open_store
from tether.tools import LocalSession


async def test_iterations_are_one_routed_step_with_a_counter(tmp_path):
    model = ScriptedModel(
        [
            {"action": "execute", "command": "echo one", "reasoning": "a"},
            {"action": "execute", "command": "echo two", "reasoning": "b"},
            {"action": "done", "message": "finished"},
        ]
    )
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store, LocalSession(tmp_path) as session:
        loop = AgentLoop(model, session, store, config=LoopConfig(max_iterations=5))
        # commands that change the host run in "effect"; these are read-only
        assert [s.id for s in loop.workflow().steps] == ["iteration", "effect"]
        result = await loop.start("looping", "say two things")
        assert result.status is RunStatus.COMPLETED
        assert result.state["iteration"] == 3
        assert [h["node"] for h in result.state["execution_history"]] == ["iteration"] * 3
        routes = [
            e["detail"]["reason"] for e in runtime_state(result.state)["event_log"] if e["kind"] == "route"
        ]
        assert routes == ["iteration 2", "iteration 3"]
        assert [c["command"] for c in result.state["command_history"]] == ["echo one", "echo two"]


async def test_the_loop_stops_at_max_iterations(tmp_path):
    model = ScriptedModel(lambda messages: {"action": "execute", "command": "true", "reasoning": "again"})
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store, LocalSession(tmp_path) as session:
        loop = AgentLoop(model, session, store, config=LoopConfig(max_iterations=3))
        result = await loop.start("bounded", "never done")
        assert result.status is RunStatus.FAILED
        assert result.state["iteration"] == 3 and len(model.calls) == 3
