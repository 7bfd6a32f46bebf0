"""A process killed while the model streams its reply: nothing of the partial reply is in
the checkpoint, and the resumed run asks the model again with the same prompt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tether.agent import AgentLoop
from tether.context.records import PROMPT_LOG_KEY, rebuild
from tether.models import ScriptedModel
from tether.state import RunStatus
from tether.stores import open_store
from tether.tools import LocalSession

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    from tether.agent import AgentLoop
    from tether.models import ScriptedModel
    from tether.stores import open_store
    from tether.tools import LocalSession

    url, run_id, work, pieces = sys.argv[1:5]
    slow = {"action": "done", "message": "x" * 400}
    model = ScriptedModel([{"action": "execute", "command": "echo first"}, slow], stream_chunk=8, stream_delay=0.05)
    out = open(pieces, "a", buffering=1)

    def on_event(event):
        if event.kind == "model_delta" and len(model.calls) == 2:
            out.write(json.dumps(model.calls[-1]) + "\\n")

    async def main():
        async with open_store(url) as store:
            await AgentLoop(model, LocalSession(cwd=work), store, on_event=on_event).start(run_id, "goal")

    asyncio.run(main())
    """
)


@pytest.mark.slow
async def test_kill_mid_stream_then_resume_asks_the_model_again(tmp_path):
    url = f"sqlite:///{tmp_path}/crash.db"
    pieces = tmp_path / "pieces.jsonl"
    run_id = "stream-crash-1"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, run_id, str(tmp_path), str(pieces)], env=env, cwd=tmp_path
    )
    try:
        deadline = time.monotonic() + 30
        while not (pieces.exists() and pieces.read_text().count("\n") >= 3):
            assert child.poll() is None, "the child ended before streaming"
            assert time.monotonic() < deadline, "no streamed piece in 30 s"
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(10)
    assert child.returncode == -signal.SIGKILL
    asked = json.loads(pieces.read_text().splitlines()[0])  # what the killed call was sent

    async with open_store(url) as store:
        cp = await store.load(run_id)
        assert cp.state["iteration"] == 1  # the streaming iteration left no trace
        assert len(cp.state[PROMPT_LOG_KEY]) == 1
        assert "xxxx" not in json.dumps(cp.state)
        again = ScriptedModel([{"action": "done", "message": "finished after the crash"}])
        result = await AgentLoop(again, LocalSession(cwd=tmp_path), store).resume(run_id)
    assert result.status is RunStatus.COMPLETED, result.message
    assert again.calls[0] == asked  # the very prompt the killed call was streaming from
    records = result.state[PROMPT_LOG_KEY]
    assert [r["iteration"] for r in records] == [1, 2]
    assert rebuild(records, 1).messages == again.calls[0]
