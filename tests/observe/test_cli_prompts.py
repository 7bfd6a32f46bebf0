"""``tether prompt`` and ``tether replay`` on a recorded run."""

from __future__ import annotations

import asyncio
import json

from typer.testing import CliRunner

from tests.observe.test_prompt_records import long_run
from tether.cli.app import app
from tether.stores import open_store


def recorded(tmp_path):
    url = f"sqlite:///{tmp_path}/cli.db"

    async def go():
        async with open_store(url) as store:
            model, result = await long_run(store, tmp_path, 5)
        return url, model, result.run_id

    return asyncio.run(go())


def version_of(url: str, rid: str) -> int:
    async def go():
        async with open_store(url) as s:
            return (await s.get_run(rid)).version

    return asyncio.run(go())


def test_prompt_prints_the_exact_messages_and_the_diff(tmp_path):
    """--json gives the messages the model received; --diff names the items that entered."""
    url, model, rid = recorded(tmp_path)
    runner = CliRunner()
    out = runner.invoke(app, ["prompt", rid, "-i", "3", "--json", "--store", url])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["messages"] == model.calls[2] and data["iteration"] == 3
    text = runner.invoke(app, ["prompt", rid, "--store", url])
    assert text.exit_code == 0 and "iteration 6" in text.output and "layer 1 · System" in text.output
    diff = runner.invoke(app, ["prompt", rid, "--diff", "2", "3", "--store", url])
    assert diff.exit_code == 0 and "+ call-2" in diff.output and "+ result-2" in diff.output
    missing = runner.invoke(app, ["prompt", rid, "-i", "40", "--store", url])
    assert missing.exit_code == 1 and "no model call recorded at iteration 40" in missing.output


def test_replay_prints_the_new_reply_beside_the_old_without_touching_the_run(tmp_path):
    """An edited prompt replayed on a scripted model; the run's version does not move."""
    url, model, rid = recorded(tmp_path)
    runner = CliRunner()
    prompt = json.loads(runner.invoke(app, ["prompt", rid, "-i", "2", "--json", "--store", url]).output)
    prompt["messages"][-1]["content"] = "Stop now."
    edit = tmp_path / "edit.json"
    edit.write_text(json.dumps(prompt))
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"action": "done", "message": "stopped as asked"}]))
    before = version_of(url, rid)
    out = runner.invoke(
        app,
        ["replay", rid, "-i", "2", "--edit", str(edit), "--script", str(script), "--json", "--store", url],
    )
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    assert result["edited"] and "stopped as asked" in result["newReply"] and "seq 1" in result["oldReply"]
    table = runner.invoke(app, ["replay", rid, "-i", "2", "--script", str(script), "--store", url])
    assert "recorded reply" in table.output and "stopped as asked" in table.output
    assert version_of(url, rid) == before
    offline = runner.invoke(
        app, ["replay", rid, "-i", "2", "--store", url], env={"TETHER_MODEL_PROVIDER": ""}
    )
    assert offline.exit_code == 1 and "scripted model" in offline.output


def test_prompt_at_a_checkpoint_version_shows_the_latest_call_then(tmp_path):
    """--version V: the latest call recorded as of that checkpoint, not the run's last one."""
    url, model, rid = recorded(tmp_path)

    async def records_at(v: int) -> int:
        from tether.agent.replay import load_records

        async with open_store(url) as s:
            return len(await load_records(s, rid, version=v))

    version = next(v for v in range(2, 30) if asyncio.run(records_at(v)) == 3)
    out = CliRunner().invoke(app, ["prompt", rid, "--version", str(version), "--json", "--store", url])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["iteration"] == 3 and data["messages"] == model.calls[2]
