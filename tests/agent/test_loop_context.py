"""The agent loop and its context: stored as a log of changes, monitored, artefacts durable."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tether.agent import AgentLoop, LoopConfig
from tether.context import ContextWindow
from tether.context.monitor import Thresholds
from tether.models import ScriptedModel
from tether.state import RunStatus
from tether.state.reserved import runtime_state
from tether.state.serde import pack_plain
from tether.stores import open_store
from tether.tools import LocalSession

ROOT = Path(__file__).resolve().parents[2]


def execute(command: str) -> dict:
    return {"action": "execute", "command": command, "reasoning": "next"}


@pytest.mark.slow
async def test_stored_bytes_stay_near_the_final_state_over_200_iterations(tmp_path):
    """Each step stores the items it changed, not the window, and the store's segment seals
    replace the rows they pack: what the run keeps stored is <= 1.3x the final state."""
    n = 200
    replies = [execute(f"seq {k * 1000} {k * 1000 + 120}") for k in range(n - 1)]
    model = ScriptedModel([*replies, {"action": "done", "message": "counted"}])
    db = tmp_path / "agent.db"
    async with open_store(f"sqlite:///{db}") as store:
        config = LoopConfig(max_iterations=n, budget=8_000)
        result = await AgentLoop(model, LocalSession(cwd=tmp_path), store, config=config).start(
            "bytes", "count"
        )
        assert result.status is RunStatus.COMPLETED
        final = await store.load("bytes")
        history = await store.history("bytes")
    final_bytes = len(pack_plain({"state": final.state}))
    stored = sum(h.size for h in history)
    assert {"segment", "sealed"} <= {h.kind for h in history}  # the seals did run
    # what history() reports is what the file holds for the run
    with sqlite3.connect(db) as con:
        (retained,) = con.execute(
            "SELECT SUM(LENGTH(payload)) FROM tether_checkpoints WHERE run_id = ?", ("bytes",)
        ).fetchone()
    assert retained == stored
    assert stored <= 1.3 * final_bytes, (stored, final_bytes)
    # and the window the log rebuilds is the one the loop last used, compressed as it went
    window = ContextWindow.from_log(final.state["context_meta"], final.state["context_log"])
    assert window.usage().tokens <= 8_000
    kinds = [e["kind"] for e in runtime_state(final.state)["event_log"]]
    # the working layer's own budget keeps this run under 70%; the warning is tested below
    assert "context_compressed" in kinds
    compressed = next(e for e in runtime_state(final.state)["event_log"] if e["kind"] == "context_compressed")
    assert compressed["detail"]["before_tokens"] > compressed["detail"]["after_tokens"] > 0
    assert compressed["detail"]["level"] in ("standard", "deep")


async def test_thresholds_come_from_the_config_and_events_reach_the_listener(tmp_path):
    """A low warn threshold fires the 70%-style warning early; the listener gets it too."""
    events = []
    model = ScriptedModel([execute("seq 1 400"), execute("seq 1 400"), {"action": "done", "message": "ok"}])
    config = LoopConfig(budget=6_000, thresholds=Thresholds(warn=0.2, standard=0.85, deep=0.9))
    async with open_store(f"sqlite:///{tmp_path}/agent.db") as store:
        loop = AgentLoop(model, LocalSession(cwd=tmp_path), store, config=config, on_event=events.append)
        result = await loop.start("warn", "count")
    assert result.status is RunStatus.COMPLETED
    warnings = [e for e in events if e.kind == "context_warning"]
    assert len(warnings) == 1 and warnings[0].detail["ratio"] > 0.2
    assert [e["kind"] for e in runtime_state(result.state)["event_log"]].count("context_warning") == 1


async def test_read_artifact_after_kill_9_and_resume(tmp_path):
    """A trimmed output survives a SIGKILL beside the store; the resumed agent reads lines of it."""
    db = tmp_path / "agent.db"
    script = tmp_path / "run.py"
    script.write_text(
        "import asyncio\n"
        "from tether.agent import AgentLoop, LoopConfig\n"
        "from tether.models import ScriptedModel\n"
        "from tether.stores import open_store\n"
        "from tether.tools import LocalSession\n"
        "async def main():\n"
        f"    async with open_store('sqlite:///{db}') as store:\n"
        "        model = ScriptedModel([\n"
        "            {'action': 'execute', 'command': 'seq 1 5000'},\n"
        "            {'action': 'execute', 'command': 'kill -9 $PPID'},\n"
        "        ])\n"
        f"        loop = AgentLoop(model, LocalSession(cwd={str(tmp_path)!r}), store, config=LoopConfig(output_tokens=200))\n"
        "        await loop.start('crashy', 'list numbers')\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == -9, out.stderr
    assert (tmp_path / "agent.db.artifacts" / "crashy").is_dir()
    async with open_store(f"sqlite:///{db}") as store:
        before = await store.load("crashy")
        artifact_id = before.state["command_history"][0]["artifact_id"]
        assert artifact_id
        model = ScriptedModel(
            [
                {"action": "read_artifact", "artifact_id": artifact_id, "start": 2500, "end": 2502},
                {
                    "action": "read_artifact",
                    "artifact_id": artifact_id,
                    "start": 1,
                    "end": 6,
                    "unit": "bytes",
                },
                {"action": "read_artifact", "artifact_id": "nope"},
                {"action": "done", "message": "read"},
            ]
        )
        result = await AgentLoop(model, LocalSession(cwd=tmp_path), store).resume("crashy")
    assert result.status is RunStatus.COMPLETED
    seen = [str(m.get("content")) for m in model.calls[1]]
    lines = next(c for c in seen if c.startswith(f"artifact {artifact_id}, lines"))
    # the stored text starts with "exit code 0", so output line k is stored line k + 1
    assert re.search(r"lines 2500-2502 of 5001", lines) and lines.split("\n")[1:] == ["2499", "2500", "2501"]
    seen = [str(m.get("content")) for m in model.calls[2]]
    assert any(c.startswith(f"artifact {artifact_id}, bytes 1-6") and c.endswith("exit c") for c in seen)
    seen = [str(m.get("content")) for m in model.calls[3]]
    assert any("no artifact 'nope'" in c for c in seen)


def test_the_cli_live_view_prints_context_events():
    """The deploy live view shows the warning and each compression with its token counts."""
    from io import StringIO

    from rich.console import Console

    from tether.cli.agents import _printer
    from tether.runtime import Event

    out = StringIO()
    show = _printer(Console(file=out, width=200))
    detail = {
        "level": "standard",
        "before_tokens": 7000,
        "after_tokens": 4200,
        "folded": 12,
        "reason": "usage 86%",
    }
    show(Event(kind="context_compressed", run_id="r", step="iteration-3", detail=detail))
    show(Event(kind="context_warning", run_id="r", detail={"reason": "context at 71% of 24000 tokens"}))
    text = out.getvalue()
    assert "standard compression 7000 -> 4200 tokens, 12 items folded (usage 86%)" in text
    assert "context: warning context at 71% of 24000 tokens" in text
