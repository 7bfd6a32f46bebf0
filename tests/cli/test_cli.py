"""The CLI: the demo end to end in real processes, and run operations through CliRunner."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tether.cli.app import app
from tether.cli.app import app as cli
from tether.state import ExecutionContext, RunStatus
from tether.stores import open_store

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_demo_is_killed_mid_node_and_resumes_every_node_once(tmp_path):
    """The README's main job: SIGKILL inside 'deploy', resume runs only what was left."""
    url = f"sqlite:///{tmp_path}/demo.db"
    out = subprocess.run(
        [sys.executable, "-m", "tether.cli.app", "demo", "--store", url, "--crash-in", "deploy"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "SIGKILL" in text and "COMPLETED" in text
    assert "executed     plan, analyze, configure, build" in text
    before, after = text.split("3. resuming")
    assert "step_started    deploy" in before  # it was running when it died...
    assert "step_done       deploy" not in before
    assert "step_done       deploy" in after and "step_done       verify" in after  # ...and ran again
    assert "step_started    build" not in after  # done before the kill: never re-run

    async def check() -> None:
        async with open_store(url) as store:
            (run,) = await store.list_runs()
            cp = await store.load(run.run_id)
            assert run.status is RunStatus.COMPLETED
            assert cp.executed_node_ids == ["plan", "analyze", "configure", "build", "deploy", "verify"]
            assert [h["node"] for h in cp.state["execution_history"]] == cp.executed_node_ids
            history = await store.history(run.run_id)
            assert len(history) == 8  # start, 6 steps, resume: the last step's commit finishes the run
            assert history[0].node_id == "verify" and history[0].status is RunStatus.COMPLETED

    asyncio.run(check())


def test_quickstart_example_continues_across_processes(tmp_path):
    """examples/quickstart.py: the second process resumes the first one's run."""
    for expected in ("1 {", "2 {"):
        out = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "quickstart.py")],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            check=True,
        )
        assert out.stdout.startswith(expected)
    assert out.stdout.count("deploy my app") == 2


@pytest.fixture
def paused_run(tmp_path):
    url = f"sqlite:///{tmp_path}/cli.db"

    async def make() -> None:
        async with open_store(url) as store:
            ctx = ExecutionContext("r1", {"goal": "ship", "messages": ["a"]})
            await store.commit(ctx, node_id="plan")
            ctx.merge({"messages": ["b"]})
            await store.commit(ctx, node_id="build")

    asyncio.run(make())
    return url


def test_pause_update_show_round_trip(paused_run):
    """update is refused while RUNNING, accepted once PAUSED, and merges through reducers."""
    refused = runner.invoke(app, ["update", "r1", '{"goal": "x"}', "--store", paused_run])
    assert refused.exit_code == 1 and "PAUSED" in refused.output
    assert runner.invoke(app, ["status", "r1", "paused", "--store", paused_run]).exit_code == 0
    done = runner.invoke(app, ["update", "r1", '{"goal": "x", "messages": ["c"]}', "--store", paused_run])
    assert done.exit_code == 0 and "version 3" in done.output
    shown = json.loads(runner.invoke(app, ["show", "r1", "--store", paused_run]).output)
    assert shown["status"] == "PAUSED"
    assert shown["state"] == {"goal": "x", "messages": ["a", "b", "c"]}
    old = json.loads(runner.invoke(app, ["show", "r1", "--version", "1", "--store", paused_run]).output)
    assert old["state"]["messages"] == ["a"]


def test_history_copy_prune_delete(paused_run):
    hist = runner.invoke(app, ["history", "r1", "--store", paused_run])
    assert hist.exit_code == 0 and "delta" in hist.output and "full" in hist.output
    assert runner.invoke(app, ["copy", "r1", "r2", "--version", "1", "--store", paused_run]).exit_code == 0
    assert (
        "removed 1 versions"
        in runner.invoke(app, ["prune", "r1", "--keep", "1", "--store", paused_run]).output
    )
    listed = runner.invoke(app, ["runs", "--store", paused_run]).output
    assert "r1" in listed and "r2" in listed
    assert "deleted" in runner.invoke(app, ["delete", "r2", "--store", paused_run]).output
    missing = runner.invoke(app, ["show", "r2", "--store", paused_run])
    assert missing.exit_code == 1 and "not found" in missing.output


def test_bad_input_gets_clear_errors(paused_run):
    assert runner.invoke(app, ["update", "r1", "{not json", "--store", paused_run]).exit_code == 2
    assert runner.invoke(app, ["status", "r1", "sleeping", "--store", paused_run]).exit_code == 2
    bad_url = runner.invoke(app, ["runs", "--store", "nosuch://x"])
    assert (
        bad_url.exit_code == 2 and "unknown scheme 'nosuch'" in bad_url.output
    )  # a bad setting, like a bad flag
    key = runner.invoke(app, ["keygen"]).output.strip()
    assert len(key) == 44


def test_run_report_and_resume_with_a_decision(tmp_path):
    """A failing step pauses the run with a report; resume --decision skip finishes it."""
    url = f"sqlite:///{tmp_path}/flows.db"
    first = runner.invoke(
        app, ["run", "tests.cli._flows:flaky_plan", "--run-id", "f1", "--store", url, "--plain"]
    )
    assert first.exit_code == 4, first.output  # PAUSED: waits for a decision
    assert "status: PAUSED" in first.output and 'TODO item: "Find dataset"' in first.output
    rep = runner.invoke(app, ["report", "f1", "--store", url])
    assert "item 2 of 3" in rep.output and "data failure" in rep.output
    as_json = json.loads(runner.invoke(app, ["report", "f1", "--store", url, "--json"]).output)
    assert as_json["kind"] == "data" and as_json["item_id"] == "find"
    done = runner.invoke(
        app, ["resume", "tests.cli._flows:flaky_plan", "f1", "--decision", "skip", "--store", url, "--plain"]
    )
    assert done.exit_code == 0 and "status: COMPLETED" in done.output, done.output
    assert "step_done       report" in done.output
    bad = runner.invoke(app, ["run", "tests.cli._flows:nothing", "--store", url])
    assert bad.exit_code == 2 and "cannot load workflow" in bad.output


def test_deploy_with_a_scripted_model(tmp_path):
    """tether deploy runs the agent offline from a script, printing commands and results."""
    target = tmp_path / "app"
    target.mkdir()
    (target / "index.html").write_text("<h1>hi</h1>")
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"action": "execute", "command": "ls"},
                {"action": "done", "message": "served index.html"},
            ]
        )
    )
    url = f"sqlite:///{tmp_path}/d.db"
    out = runner.invoke(
        cli,
        ["deploy", str(target), "--script", str(script), "--store", url, "--log-dir", str(tmp_path / "logs")],
    )
    assert out.exit_code == 0, out.output
    assert "$ ls" in out.output and "index.html" in out.output and "COMPLETED" in out.output
    logs = list((tmp_path / "logs").glob("*.json"))
    assert len(logs) == 1 and json.loads(logs[0].read_text())["status"] == "success"


def test_deploy_escalates_host_changes_and_a_no_keeps_them_out(tmp_path, monkeypatch):
    """Sandboxed deploy: a write outside the workdir is an escalation; with no terminal the run pauses."""
    target = tmp_path / "app"
    target.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"action": "execute", "command": "echo planted > ~/x.conf"},
                {"action": "done", "message": "tried"},
            ]
        )
    )
    url = f"sqlite:///{tmp_path}/d.db"
    out = runner.invoke(
        cli,
        ["deploy", str(target), "--script", str(script), "--store", url, "--log-dir", str(tmp_path / "logs")],
    )
    assert out.exit_code == 4 and "PAUSED" in out.output, out.output  # no terminal: it waits for a human
    assert not (home / "x.conf").exists()
