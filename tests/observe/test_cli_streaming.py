"""The CLI's live view shows a streaming reply on a terminal, and nothing of it when piped."""

from __future__ import annotations

import io

from rich.console import Console

from tests.stores.conftest import new_id
from tether.agent import AgentLoop
from tether.cli.agents import _printer
from tether.models import ScriptedModel
from tether.state import RunStatus
from tether.tools import LocalSession


async def run_with(console: Console, store, tmp_path):
    model = ScriptedModel(
        [{"action": "execute", "command": "echo hi"}, {"action": "done", "message": "streamed fine"}],
        stream_chunk=5,
    )
    loop = AgentLoop(model, LocalSession(cwd=tmp_path), store, on_event=_printer(console))
    result = await loop.start(new_id(), "g")
    assert result.status is RunStatus.COMPLETED
    return model


async def test_terminal_shows_the_reply_growing_then_the_command(store, tmp_path):
    """Pieces print on one line, closed before the command line."""
    out = io.StringIO()
    model = await run_with(
        Console(file=out, force_terminal=True, width=200, color_system=None), store, tmp_path
    )
    text = out.getvalue()
    assert all(o["streamed"] for o in model.call_options)
    assert 'model: {"action": "execute", "command": "echo hi"}\n' in text
    assert text.index("model: {") < text.index("$ echo hi")
    assert "streamed fine" in text


async def test_piped_output_has_no_pieces(store, tmp_path):
    """Scripts read whole lines: no partial replies."""
    out = io.StringIO()
    await run_with(Console(file=out, force_terminal=False, width=200), store, tmp_path)
    assert "model:" not in out.getvalue() and "$ echo hi" in out.getvalue()
