"""Long generated sessions (deployments, migrations, incident fixes) with planted facts.

Through the compressor at standard and deep, every category is checked; through the
real agent loop (a scripted model, a real shell whose programs replay the planted
outputs, a SQLite store), the prompt the model gets at the end still holds what an
operator needs, and the decisions and settings that were replaced do not read as current.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import pytest

from tests.context.replay import install
from tether.agent import AgentLoop, LoopConfig
from tether.agent.interaction import CallbackInteractionHandler
from tether.context import SUMMARY_ID, ContextItem, ContextWindow
from tether.context.sessions import SESSION_KINDS, GeneratedSession, generate_session
from tether.models import ScriptedModel
from tether.state import RunStatus
from tether.state.reserved import runtime_state
from tether.stores import open_store
from tether.tools import LocalSession

MUST = ("goal", "constraint", "todo", "decision")
FACTS = ("config", "artifact", "fix", "failure", "port", "path", "version")


@functools.cache
def _session(kind: str, operations: int) -> tuple[GeneratedSession, tuple[ContextItem, ...]]:
    session = generate_session(kind, seed=3, operations=operations)  # type: ignore[arg-type]
    return session, tuple(session.items(output_tokens=600))


def _fed(items: tuple[ContextItem, ...]) -> ContextWindow:
    window = ContextWindow("gpt-4", budget=10**7)
    for item in items:
        window.add(item)
    return window


@pytest.mark.parametrize(
    ("kind", "operations"),
    [("deployment", 400), *(pytest.param(k, 3000, marks=pytest.mark.slow) for k in SESSION_KINDS)],
)
@pytest.mark.parametrize(("level", "floor"), [("standard", 0.9), ("deep", 0.8)])
def test_every_category_survives_compression(kind: str, operations: int, level: str, floor: float) -> None:
    session, items = _session(kind, operations)
    assert len(session.ops) >= operations
    window = _fed(items)
    result = window.compress(level)  # type: ignore[arg-type]
    assert result.kept_ratio < (0.65 if level == "standard" else 0.35)
    kept = session.retention(window.render())
    for category in MUST:
        assert kept[category][0] == kept[category][1], (category, kept[category])
    for category in FACTS:
        found, total = kept[category]
        assert total and found / total >= floor, (category, kept[category])
    assert session.superseded_as_current(window.items()) == []
    summary = window.get(SUMMARY_ID)
    assert summary is not None and "[Superseded]" in summary.content
    assert "valkey 8.0" in summary.content.split("[Key decisions]")[1].split("\n[")[0]


def test_a_changed_setting_shows_its_newest_value_with_one_line_of_history() -> None:
    session, items = _session("migration", 400)
    window = _fed(items)
    window.compress("deep")
    summary = window.get(SUMMARY_ID)
    assert summary is not None
    configs = summary.content.split("[Configurations]")[1].split("\n[")[0]
    new = next(
        f for f in session.facts if f.category == "config" and f.key.endswith("_WORKERS") and f.current
    )
    old = next(f for f in session.facts if f.key == new.key and not f.current)
    line = next(x for x in configs.splitlines() if x.startswith(f"- {new.key}="))
    assert line.startswith(f"- {new.markers[0]}") and old.markers[0].split("=")[1] in line  # "(earlier: ...)"
    assert session.superseded_as_current(window.items()) == []


def _model_for(session: GeneratedSession) -> ScriptedModel:
    replies: list[Any] = [op.action() for op in session.ops]
    return ScriptedModel([*replies, {"action": "done", "message": "finished"}], usage=False)


@pytest.mark.slow
@pytest.mark.parametrize("kind", SESSION_KINDS)
async def test_a_long_session_through_the_agent_loop(kind: str, tmp_path: Path) -> None:
    """The real loop, its thresholds and its trimming; what the model is sent at the end."""
    logging.getLogger("tether").setLevel(logging.WARNING)
    session = generate_session(kind, seed=7, operations=240, long_every=10)  # type: ignore[arg-type]
    env = install(session, tmp_path)
    # a repeated question gets its answers in order
    queue: dict[str, list[str]] = {}
    for op in session.ops:
        if op.kind == "ask":
            queue.setdefault(op.question, []).append(op.answer)

    def answer_in_order(request: Any) -> str:
        return queue[request.question].pop(0)

    model = _model_for(session)
    config = LoopConfig(model_name="gpt-4", budget=14_000, max_iterations=len(session.ops) + 5)
    async with open_store(f"sqlite:///{tmp_path}/agent.db") as store:
        loop = AgentLoop(
            model, LocalSession(cwd=tmp_path, env=env), store, config=config,
            interaction=CallbackInteractionHandler(answer_in_order),
        )  # fmt: skip
        result = await loop.start(f"session-{kind}", session.goal)
    assert result.status is RunStatus.COMPLETED, result.state.get("final_output")
    events = runtime_state(result.state)["event_log"]
    compressed = [e["detail"] for e in events if e["kind"] == "context_compressed"]
    by_threshold = [c for c in compressed if c["level"] in ("standard", "deep")]
    assert by_threshold and all(c["ratio"] > 0.85 for c in by_threshold)  # the thresholds compressed
    at_checkpoints = [c for c in compressed if c["level"] == "checkpoint"]
    assert all(c["reason"].startswith("checkpoint iteration-") for c in at_checkpoints)
    assert {c["level"] for c in compressed} <= {"standard", "deep", "phase", "checkpoint"}
    phases = [c["reason"] for c in compressed if c["level"] == "phase"]
    assert phases == [f"phase {k} ended" for k in range(1, 5)]  # and each finished phase, once
    assert max(loop.prompt_sizes) <= config.budget * 0.90
    window = ContextWindow.from_log(result.state["context_meta"], result.state["context_log"])
    sent = "\n".join(str(m.get("content")) for m in model.calls[-1])
    kept = session.retention(sent)
    for category in MUST:
        assert kept[category][0] == kept[category][1], (category, kept[category])
    assert session.superseded_as_current(window.items()) == []
    # the newest value of each setting and the last failures with their fixes are there
    late = [
        f
        for f in session.facts
        if f.category in ("fix", "config") and f.current and f.op > len(session.ops) - 60
    ]
    assert late and all(f.kept_in(sent) for f in late), [f for f in late if not f.kept_in(sent)]
