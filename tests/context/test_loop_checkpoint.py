"""Checkpoint compression in the real agent loop: a checkpoint that closes a TODO item passes,
and what precedes it is compressed before the next model call (a real shell replays the
session's outputs; the scripted model says "Done: ..." where the session finishes an item)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.context.replay import install
from tether.agent import AgentLoop, LoopConfig
from tether.agent.interaction import CallbackInteractionHandler
from tether.context import SUMMARY_ID, ContextWindow
from tether.context.sessions import GeneratedSession, generate_session
from tether.models import ScriptedModel
from tether.state import RunStatus
from tether.state.reserved import runtime_state
from tether.stores import open_store
from tether.tools import LocalSession

BUDGET = 8_000


async def _run(
    tmp_path: Path, *, checkpoint: bool, phase: bool = False
) -> tuple[dict[str, Any], ScriptedModel, GeneratedSession]:
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
        model_name="gpt-4", budget=BUDGET, max_iterations=80, checkpoint_compression=checkpoint,
        phase_compression=phase,
    )  # fmt: skip
    async with open_store(f"sqlite:///{tmp_path}/agent.db") as store:
        loop = AgentLoop(model, LocalSession(cwd=tmp_path, env=env), store, config=config,
                         interaction=CallbackInteractionHandler(lambda r: queue[r.question].pop(0)))  # fmt: skip
        result = await loop.start("checkpoints", session.goal)
    assert result.status is RunStatus.COMPLETED
    return dict(result.state), model, session


def _compressed(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [e["detail"] for e in runtime_state(state)["event_log"] if e["kind"] == "context_compressed"]


async def test_a_checkpoint_that_closes_a_todo_item_compresses_what_precedes_it(tmp_path: Path) -> None:
    state, model, session = await _run(tmp_path, checkpoint=True)
    closing = [k for k, op in enumerate(session.ops, 1) if op.done]  # iterations that finish an item
    events = [e for e in _compressed(state) if e["level"] == "checkpoint"]
    assert len(events) >= 2
    passed = [int(e["reason"].removeprefix("checkpoint iteration-").removesuffix(" passed")) for e in events]
    assert set(passed) <= set(closing)  # only checkpoints that closed an item, each once
    assert passed == sorted(set(passed))
    for e in events:
        assert e["ratio"] > 0.35 and e["folded"] > 0 and e["after_tokens"] < e["before_tokens"]

    # the prompt right after the first one: the outputs that preceded the checkpoint folded
    # into the summary, one line per command; the plan, the decisions and the goal stay
    first = passed[0]
    before, after = model.calls[first - 1], model.calls[first]  # iterations first and first + 1
    outputs = [sum(str(m.get("content")).startswith("exit code") for m in call) for call in (before, after)]
    assert outputs[0] >= 3 and outputs[1] < outputs[0]
    summary_text = next(
        str(m["content"]) for m in after if "Context summary (checkpoint" in str(m["content"])
    )
    assert "full history in artefact history-" in summary_text  # archived before it folded
    prompt = "\n".join(str(m.get("content")) for m in after)
    for op in session.ops[: first - 1]:  # one line each, or given back in detail (the newest)
        if op.kind == "run":
            assert f"$ {op.command[:40]}" in summary_text or json.dumps(op.command)[1:-1] in prompt
    done = len({op.done for op in session.ops[:first] if op.done})  # the items closed so far
    assert f"TODO: #{done} [x] " in prompt and f"TODO: #{done + 1} of 5: " in prompt
    for m in before:  # every decision stays, or is one line of [Superseded] once a later one replaced it
        if m["content"].startswith("Decision: "):
            text = m["content"].removeprefix("Decision: ")
            flat = " / ".join(p.strip() for p in text.splitlines() if p.strip())
            assert text in prompt or f"- {flat[:60]}" in summary_text.split("[Superseded]")[-1]

    # no threshold compression ran: the checkpoints kept the window under 85%
    assert not [e for e in _compressed(state) if e["level"] in ("standard", "deep")]
    window = ContextWindow.from_log(state["context_meta"], state["context_log"])
    summary = window.get(SUMMARY_ID)
    assert summary is not None and summary.metadata["level"] == "checkpoint"
    assert state["context_meta"]["sent"]["peak"]["ratio"] < 0.85


async def test_checkpoint_compression_can_be_turned_off(tmp_path: Path) -> None:
    state, model, _ = await _run(tmp_path, checkpoint=False)
    assert not [e for e in _compressed(state) if e["level"] == "checkpoint"]
    assert not any("checkpoint compression" in str(m.get("content")) for m in model.calls[-1])


async def test_phase_compression_runs_first_and_leaves_little_for_the_checkpoint(tmp_path: Path) -> None:
    """With both on (the bundled agents' default), the finished phase folds into its line
    first; the checkpoint then compresses only when the window still holds enough."""
    state, _, _ = await _run(tmp_path, checkpoint=True, phase=True)
    events = _compressed(state)
    phases = [e for e in events if e["level"] == "phase"]
    assert [e["reason"] for e in phases] == [f"phase {k} ended" for k in range(1, 5)]
    for e in events:
        if e["level"] == "checkpoint":  # only past half the warning threshold after the phase folded
            assert e["ratio"] > 0.35
