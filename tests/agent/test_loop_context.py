"""The agent loop and its context: stored as a log of changes, monitored, artefacts durable."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.server.conftest import serve
from tests.stores.conftest import require_url
from tether.agent import AgentLoop, LoopConfig
from tether.agent.config import artifact_root, artifact_store_for, loop_reducers
from tether.context import ContextWindow, new_item
from tether.context.monitor import Thresholds
from tether.models import ScriptedModel
from tether.state import ExecutionContext, RunStatus
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


async def test_a_window_changed_between_two_steps_is_the_one_the_next_step_prompts_with(tmp_path):
    """The loop keeps each run's window between steps instead of replaying its log; an item
    added to the stored window while the run waits (as the server's context routes do) is in
    the next prompt all the same, and the window the loop goes on with is the stored one."""
    model = ScriptedModel(
        [
            execute("echo first"),
            {"action": "ask_user", "question": "Which port?", "input_type": "text"},
            {"action": "done", "message": "ok"},
        ]
    )
    async with open_store(f"sqlite:///{tmp_path}/agent.db") as store:
        loop = AgentLoop(model, LocalSession(cwd=tmp_path), store, config=LoopConfig(budget=6_000))
        paused = await loop.start("edited", "serve it")
        assert paused.status is RunStatus.PAUSED
        cp = await store.load("edited")
        window = ContextWindow.from_log(cp.state["context_meta"], cp.state["context_log"])
        window.start_journal()
        window.add(new_item("constraint", "never restart the database", id="rule-1"))
        update = {"context_meta": window.meta_state(), "context_log": window.take_journal()}
        await store.update_state("edited", update, reducers=loop_reducers())
        result = await loop.answer("edited", "8080")
        assert result.status is RunStatus.COMPLETED
        final = await store.load("edited")
    last_prompt = " ".join(str(m.get("content")) for m in model.calls[-1])
    assert "never restart the database" in last_prompt and "8080" in last_prompt
    rebuilt = ContextWindow.from_log(final.state["context_meta"], final.state["context_log"])
    assert rebuilt.get("rule-1") is not None


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_read_artifact_after_kill_9_and_resume_then_delete(backend, tmp_path, monkeypatch):
    """A trimmed output survives a SIGKILL in a durable place (beside the SQLite file; for a
    server store under the data dir); the resumed agent reads lines of it; `tether delete`
    removes it with the run."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the child inherits it
    url = f"sqlite:///{tmp_path}/agent.db" if backend == "sqlite" else require_url(backend, tmp_path)
    run_id = f"crashy-{uuid.uuid4().hex[:10]}"
    script = tmp_path / "run.py"
    script.write_text(
        "import asyncio\n"
        "from tether.agent import AgentLoop, LoopConfig\n"
        "from tether.models import ScriptedModel\n"
        "from tether.stores import open_store\n"
        "from tether.tools import LocalSession\n"
        "async def main():\n"
        f"    async with open_store({url!r}) as store:\n"
        "        model = ScriptedModel([\n"
        "            {'action': 'execute', 'command': 'seq 1 5000'},\n"
        "            {'action': 'execute', 'command': 'kill -9 $PPID'},\n"
        "        ])\n"
        f"        loop = AgentLoop(model, LocalSession(cwd={str(tmp_path)!r}), store, config=LoopConfig(output_tokens=200))\n"
        f"        await loop.start({run_id!r}, 'list numbers')\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == -9, out.stderr
    async with open_store(url) as store:
        root = artifact_root(store)
        assert root is not None
        expected = (
            tmp_path / "agent.db.artifacts"
            if backend == "sqlite"
            else tmp_path / "data" / "tether" / "artifacts"
        )
        assert root == expected or root.parent == expected
        assert (root / run_id).is_dir()
        before = await store.load(run_id)
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
        loop = AgentLoop(model, LocalSession(cwd=tmp_path), store)
        paused = await loop.resume(run_id)  # it died inside `kill -9 $PPID`, which changes the host
        assert paused.status is RunStatus.PAUSED and "kill -9 $PPID" in (
            paused.report.error if paused.report else ""
        )
        result = await loop.resume(run_id, decision="takeover", note="that command stopped the agent")
    assert result.status is RunStatus.COMPLETED
    seen = [str(m.get("content")) for m in model.calls[1]]
    lines = next(c for c in seen if c.startswith(f"artifact {artifact_id}, lines"))
    # the stored text starts with "exit code 0", so output line k is stored line k + 1
    assert re.search(r"lines 2500-2502 of 5001", lines) and lines.split("\n")[1:] == ["2499", "2500", "2501"]
    seen = [str(m.get("content")) for m in model.calls[2]]
    assert any(c.startswith(f"artifact {artifact_id}, bytes 1-6") and c.endswith("exit c") for c in seen)
    seen = [str(m.get("content")) for m in model.calls[3]]
    assert any("no artifact 'nope'" in c for c in seen)
    # the run goes, and its artefacts with it
    gone = subprocess.run(
        [sys.executable, "-m", "tether.cli.app", "delete", run_id, "--store", url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert gone.returncode == 0 and "deleted" in gone.stdout, gone.stdout + gone.stderr
    assert not (root / run_id).exists()
    async with open_store(url) as store:
        assert await store.load(run_id) is None


async def test_the_server_delete_route_removes_the_run_and_its_artefacts(tmp_path):
    url = f"sqlite:///{tmp_path}/srv.db"
    async with open_store(url) as store:
        ctx = ExecutionContext("gone-run", {"goal": "x"})
        await store.commit(ctx, node_id="start")
        artefacts = artifact_store_for(LoopConfig(), store, "gone-run")
        aid = artefacts.put("a long output")
        kept = artifact_store_for(LoopConfig(), store, "kept-run")
        kept_id = kept.put("another output")
    assert (tmp_path / "srv.db.artifacts" / "gone-run").is_dir()
    async with serve(url) as (client, _app):
        assert (await client.delete("/api/runs/gone-run")).status_code == 204
        assert (await client.delete("/api/runs/gone-run")).status_code == 404
        assert (await client.get("/api/runs/gone-run/snapshot")).status_code == 404
    assert not (tmp_path / "srv.db.artifacts" / "gone-run").exists()
    assert not artefacts.exists(aid) and kept.get(kept_id) == "another output"


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
