"""`tether deploy`, `tether plan` and `tether resume RUN` in real CLI processes with stdin
not a terminal: a question pauses the run (exit 4) for --answer, a failure for --decision."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

from typer.testing import CliRunner

from tether.cli.agents import EXIT_PAUSED
from tether.cli.app import app
from tether.state import ExecutionContext
from tether.stores import open_store

runner = CliRunner()


def tether(tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli.app", *args, "--store", f"sqlite:///{tmp_path}/cli.db"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def write_script(tmp_path, name: str, replies: list) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(replies))
    return str(path)


def test_deploy_pauses_on_a_question_then_on_a_failure_and_is_continued(tmp_path):
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    ask = write_script(
        tmp_path,
        "1.json",
        [
            {"action": "execute", "command": "echo built > build.txt"},
            {"action": "ask_user", "question": "Which port?", "options": ["3000", "8080"]},
        ],
    )
    first = tether(tmp_path, "deploy", str(app_dir), "--script", ask, "--run-id", "d1", "--log-dir", "logs")
    assert first.returncode == EXIT_PAUSED, first.stdout + first.stderr
    assert "the agent asks: Which port?" in first.stdout and "options: 3000, 8080" in first.stdout
    assert "tether resume d1 --answer" in first.stdout

    # answered; the script then runs out: a failure pauses the run for a decision
    more = write_script(tmp_path, "2.json", [{"action": "execute", "command": "cat build.txt"}])
    second = tether(tmp_path, "resume", "d1", "--answer", "8080", "--script", more)
    assert second.returncode == EXIT_PAUSED, second.stdout + second.stderr
    assert "$ cat build.txt" in second.stdout and "ScriptExhausted" in second.stdout
    assert "tether resume d1 --decision retry|skip|abort" in second.stdout
    assert "tether decide d1 takeover --note" in second.stdout

    done = write_script(tmp_path, "3.json", [{"action": "done", "message": "up on port 8080"}])
    third = tether(
        tmp_path, "deploy", str(app_dir), "--resume", "d1", "--decision", "retry", "--script", done
    )
    assert third.returncode == 0, third.stdout + third.stderr
    assert "COMPLETED d1: up on port 8080" in third.stdout
    log = json.loads((tmp_path / "logs" / "d1.json").read_text())
    assert log["status"] == "success" and log["repo_url"] == str(app_dir)
    assert [(s["action"], s.get("answer")) for s in log["steps"]] == [
        ("execute", None),
        ("ask_user", "8080"),
        ("execute", None),
        ("done", None),
    ]


def test_plan_pauses_on_a_step_question_and_resumes_by_run_id(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "project_name": "demo",
                "deploy_dir": str(tmp_path),
                "strategy": "traditional",
                "steps": [
                    {"name": "Prepare", "goal": "create the data dir", "category": "prerequisite"},
                    {"name": "Configure", "goal": "write the config", "success_criteria": "app.conf exists"},
                ],
            }
        )
    )
    replies = [
        {"action": "execute", "command": "mkdir -p data"},
        {"action": "step_done", "outputs": {"summary": "Created data/", "artifacts": ["data"]}},
        {"action": "ask_user", "question": "Log level?", "options": ["info", "debug"]},
    ]
    first = tether(
        tmp_path, "plan", str(plan), "--script", write_script(tmp_path, "p1.json", replies), "--run-id", "p1"
    )
    assert first.returncode == EXIT_PAUSED, first.stdout + first.stderr
    assert "the agent asks: Log level?" in first.stdout and "tether resume p1 --answer" in first.stdout

    finish = [
        {"action": "execute", "command": "echo level=debug > app.conf"},
        {
            "action": "step_done",
            "outputs": {"summary": "Wrote app.conf", "new_configurations": {"LEVEL": "debug"}},
        },
    ]
    second = tether(
        tmp_path, "resume", "p1", "--answer", "debug", "--script", write_script(tmp_path, "p2.json", finish)
    )
    assert second.returncode == 0, second.stdout + second.stderr
    assert "COMPLETED p1" in second.stdout and (tmp_path / "app.conf").read_text() == "level=debug\n"
    log = json.loads((tmp_path / "agent_logs" / "p1.json").read_text())
    assert [s["step_name"] for s in log["steps"]] == ["Prepare", "Configure"]
    assert log["execution_summary"]["configurations"] == {"LEVEL": "debug"}
    assert log["execution_summary"]["completed_actions"][0] == "[PREREQUISITE] Prepare: Created data/"
    nested = runner.invoke(app, ["resume", "p1.2", "--store", f"sqlite:///{tmp_path}/cli.db"])
    assert nested.exit_code == 1 and "step 2 of the plan 'p1': `tether resume p1`" in nested.output


def test_workflow_runs_resume_by_run_id_and_old_runs_need_the_workflow(tmp_path):
    url = f"sqlite:///{tmp_path}/w.db"
    out = runner.invoke(
        app, ["run", "tests.cli._flows:flaky_plan", "--run-id", "w1", "--store", url, "--plain"]
    )
    assert "PAUSED" in out.output
    done = runner.invoke(app, ["resume", "w1", "--decision", "skip", "--store", url, "--plain"])
    assert done.exit_code == 0, done.output
    assert "COMPLETED" in done.output
    missing = runner.invoke(app, ["resume", "nope", "--store", url])
    assert missing.exit_code == 1 and "run 'nope' not found" in missing.output
    bad = runner.invoke(app, ["resume", "w1", "--decision", "later", "--store", url])
    assert bad.exit_code == 2 and "--decision must be" in bad.output

    async def old_run() -> None:  # started by code that records no origin
        async with open_store(url) as store:
            await store.commit(ExecutionContext("old", {"goal": "x"}), node_id="a")

    asyncio.run(old_run())
    old = runner.invoke(app, ["resume", "old", "--store", url])
    assert old.exit_code == 1 and "tether resume module:workflow old" in old.output


def test_decide_takeover_hands_a_stuck_deploy_back_with_a_note(tmp_path):
    """A deploy stuck on the same failing command pauses with a report; `tether decide RUN
    takeover --note` records what the person did and the agent continues from it."""
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    stuck = write_script(tmp_path, "s.json", [{"action": "execute", "command": "cat settings.ini"}] * 6)
    first = tether(
        tmp_path, "deploy", str(app_dir), "--script", stuck, "--run-id", "st1", "--log-dir", "logs"
    )
    assert first.returncode == EXIT_PAUSED, first.stdout + first.stderr
    assert "AgentStuck" in first.stdout and "cat settings.ini" in first.stdout
    assert "[takeover] do the stuck part by hand" in first.stdout
    refused = tether(tmp_path, "decide", "st1", "takeover")
    assert refused.returncode == 2 and "takeover needs --note" in refused.stdout + refused.stderr
    rest = write_script(tmp_path, "r.json", [{"action": "done", "message": "settings written by a person"}])
    note = "wrote settings.ini by hand"
    done = tether(tmp_path, "decide", "st1", "takeover", "--note", note, "--script", rest)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "COMPLETED st1" in done.stdout

    async def history() -> list:
        async with open_store(f"sqlite:///{tmp_path}/cli.db") as store:
            cp = await store.load("st1")
        assert cp is not None
        return [h for h in cp.state["execution_history"] if h.get("status") == "takeover"]

    assert [h["note"] for h in asyncio.run(history())] == [note]
