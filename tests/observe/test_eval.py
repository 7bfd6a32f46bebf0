"""``tether eval`` on transcripts and stored runs whose facts are known."""

from __future__ import annotations

import asyncio
import json

from typer.testing import CliRunner

from tests.observe.test_prompt_records import long_run
from tether.cli.app import app
from tether.context.evaluation import evaluate_window, facts_of, window_from_messages
from tether.stores import open_store


def transcript(ops: int = 30) -> list[dict]:
    """A deployment conversation with one fact of each operation category, then filler."""
    messages = [
        {"role": "system", "content": "You deploy services."},
        {"role": "user", "content": "Deploy the orders service to staging-7."},
    ]
    outputs = [
        ("cat .env", "ORDERS_POOL_SIZE=48213\nexit code 0"),
        (
            "docker build -t registry.local/orders:2.4.0-k7q .",
            "Successfully tagged registry.local/orders:2.4.0-k7q",
        ),
        (
            "docker compose up -d",
            "Error response from daemon: Bind for 0.0.0.0:5432 failed: port is already allocated",
        ),
        ("systemctl status orders", "orders.service: listening on 0.0.0.0:9123\nActive: active (running)"),
    ]
    outputs += [
        (f"echo step {i}", f"step {i} of the warm-up done, nothing to report " * 6) for i in range(ops)
    ]
    for i, (command, output) in enumerate(outputs):
        args = json.dumps({"command": command})
        call = {"id": f"c{i}", "type": "function", "function": {"name": "run_command", "arguments": args}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": output})
    return messages


def test_facts_are_found_by_category_and_deep_keeps_the_goal():
    """The planted values are facts of their categories; compression keeps the goal."""
    window = window_from_messages(transcript())
    found = {(f.category, f.value) for f in facts_of(window.items())}
    assert ("goal", "Deploy the orders service to staging-7.") in found
    assert ("configuration", "ORDERS_POOL_SIZE=48213") in found
    assert any(c == "artefacts" and "2.4.0-k7q" in v for c, v in found)
    assert any(c == "errors and fixes" and "port is already allocated" in v for c, v in found)
    assert any(c == "ports/paths/versions" and "9123" in v for c, v in found)
    result = evaluate_window(window, levels=("standard", "deep"), budgets=(600,))
    assert result.kept["deep"]["goal"] == 1 and result.kept["standard"]["goal"] == 1
    assert result.ratio["deep"] < result.ratio["standard"] < 1.0
    assert result.ratio["fit 600"] * result.tokens <= 700


def test_eval_cli_on_jsonl_and_on_a_store(tmp_path):
    """Table, JSON and HTML from transcripts; a glob over stored agent runs, in two workers."""
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps({"messages": transcript(n)}) for n in (20, 40)) + "\n")
    runner = CliRunner()
    html = tmp_path / "report.html"
    out = runner.invoke(app, ["eval", "--jsonl", str(path), "--json", "--workers", "1", "--html", str(html)])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["runs"] == 2 and report["facts"]["goal"] == 2 and report["facts"]["configuration"] == 2
    assert report["levels"]["standard"]["kept"]["goal"] == 1.0
    assert 0 < report["levels"]["deep"]["tokenRatio"] < report["levels"]["standard"]["tokenRatio"] < 1
    page = html.read_text()
    assert "<svg" in page and "ports/paths/versions" in page

    url = f"sqlite:///{tmp_path}/eval.db"

    async def make() -> None:
        async with open_store(url) as store:
            for _ in range(3):
                await long_run(store, tmp_path, 12, budget=30_000)

    asyncio.run(make())
    table = runner.invoke(app, ["eval", "run-*", "--store", url, "--workers", "2", "--level", "deep"])
    assert table.exit_code == 0, table.output
    assert "facts kept over 3 run(s)" in table.output and "token counts, scripted" in table.output
    missing = runner.invoke(app, ["eval", "nope-1", "--store", url, "--json", "--workers", "1"])
    assert json.loads(missing.output)["failed"][0]["run"] == "nope-1"
