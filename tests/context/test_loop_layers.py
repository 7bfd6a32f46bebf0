"""The four layers as the agent loop fills them, and phase compression when a phase ends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.context.replay import install
from tether.agent import AgentLoop, LoopConfig
from tether.agent.interaction import CallbackInteractionHandler
from tether.context import SUMMARY_ID, ContextWindow, Layer
from tether.context.sessions import generate_session
from tether.models import ScriptedModel
from tether.state import RunStatus
from tether.state.reserved import runtime_state
from tether.stores import open_store
from tether.tools import LocalSession


async def _run(tmp_path: Path, *, phase_compression: bool) -> tuple[dict[str, Any], ScriptedModel, Any]:
    session = generate_session("deployment", seed=11, operations=50, long_every=10)
    env = install(session, tmp_path)
    queue: dict[str, list[str]] = {}
    for op in session.ops:
        if op.kind == "ask":
            queue.setdefault(op.question, []).append(op.answer)
    model = ScriptedModel(
        [*(op.action() for op in session.ops), {"action": "done", "message": "ok"}], usage=False
    )
    config = LoopConfig(
        model_name="gpt-4", budget=60_000, max_iterations=80, phase_compression=phase_compression
    )
    async with open_store(f"sqlite:///{tmp_path}/agent.db") as store:
        loop = AgentLoop(model, LocalSession(cwd=tmp_path, env=env), store, config=config,
                         interaction=CallbackInteractionHandler(lambda r: queue[r.question].pop(0)))  # fmt: skip
        result = await loop.start("layers", session.goal)
    assert result.status is RunStatus.COMPLETED
    return dict(result.state), model, session


async def test_layers_hold_the_plan_the_current_item_and_the_checkpoint(tmp_path: Path) -> None:
    state, model, session = await _run(tmp_path, phase_compression=True)
    window = ContextWindow.from_log(state["context_meta"], state["context_log"])
    todos = [i for i in window.items(Layer.SESSION) if i.kind == "todo"]
    assert [t.metadata["text"] for t in todos] == list(session.plan)
    statuses = [t.metadata["status"] for t in todos]
    assert statuses[:4] == ["done"] * 4 and statuses[4] == "pending"  # ticked off by "Done: ..."
    assert todos[0].content.startswith("#1 [x] ")
    current = window.get("todo-current")
    assert current is not None and current.layer is Layer.WORKING
    assert current.content == f"#5 of 5: {session.plan[4]}"
    checkpoint = window.get("instant-checkpoint")
    assert checkpoint is not None and checkpoint.layer is Layer.INSTANT
    assert checkpoint.content.startswith(
        f"version {len(session.ops)} saved after iteration {len(session.ops)}; last step: `"
    )
    # each finished phase was folded once into one line, kept in the summary's completed work
    events = [e["detail"] for e in runtime_state(state)["event_log"] if e["kind"] == "context_compressed"]
    assert [e["reason"] for e in events if e["level"] == "phase"] == [f"phase {k} ended" for k in range(1, 5)]
    sent = "\n".join(str(m.get("content")) for m in model.calls[-1])
    for k in range(1, 5):
        assert f"✅ phase {k} – {session.plan[k - 1]} (" in sent
    assert not any(i.phase == "1" and i.kind == "tool_result" for i in window.items())
    summary = window.get(SUMMARY_ID)
    if summary is not None:  # once a compression ran, the template carries the phases
        assert f"TODO #5: {session.plan[4]}" in summary.content


async def test_phase_compression_can_be_turned_off(tmp_path: Path) -> None:
    state, _, _ = await _run(tmp_path, phase_compression=False)
    events = [e["detail"] for e in runtime_state(state)["event_log"] if e["kind"] == "context_compressed"]
    assert not [e for e in events if e["level"] == "phase"]
    window = ContextWindow.from_log(state["context_meta"], state["context_log"])
    assert any(i.phase == "1" and i.kind == "tool_result" for i in window.items())
