"""`--json` on every command that ends a run or changes one, in real CLI processes: stdout
is exactly one JSON object a script can act on (progress goes to stderr), the exit code is
the same as without it, and what it says matches the store."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tether.stores import open_store

ROOT = Path(__file__).resolve().parents[2]
COMPLETED, PAUSED = 0, 4
APPROVAL_COMMAND = "echo approved-line >> ~/.bashrc"  # outside the workdir: needs approval


PYTHONPATH = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
"""The workflows under tests/ load by name from the run's own directory."""


def tether(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli.app", *args, "--store", f"sqlite:///{tmp_path}/j.db", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "HOME": str(tmp_path / "home"), "PYTHONPATH": os.pathsep.join(PYTHONPATH)},
        check=False,
    )
    try:
        data = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"stdout is not one JSON object:\n{done.stdout}\n{done.stderr}") from None
    return done.returncode, data, done.stderr


def script(tmp_path: Path, name: str, replies: list[dict[str, Any]]) -> str:
    (tmp_path / name).write_text(json.dumps(replies))
    return str(tmp_path / name)


def stored(tmp_path: Path, run_id: str) -> tuple[str, int]:
    async def look() -> tuple[str, int]:
        async with open_store(f"sqlite:///{tmp_path}/j.db") as st:
            info = await st.get_run(run_id)
            assert info is not None
            return str(info.status), info.version

    return asyncio.run(look())


def test_run_resume_rollback_copy_and_delete_print_one_json_object(tmp_path):
    code, paused, err = tether(tmp_path, "run", "tests.cli._flows:flaky_plan", "--run-id", "f1")
    assert code == PAUSED and paused["exit_code"] == PAUSED and paused["status"] == "PAUSED"
    assert paused["report"]["kind"] == "data" and paused["report"]["item_id"] == "find"
    assert paused["continue_with"].startswith("tether resume f1 --decision ")
    assert "run f1 on" in err  # progress went to stderr
    assert stored(tmp_path, "f1") == ("PAUSED", paused["version"])

    code, done, _ = tether(tmp_path, "resume", "f1", "--decision", "skip")
    assert code == COMPLETED and done["status"] == "COMPLETED" and done["report"] is None
    assert done["continue_with"] is None and stored(tmp_path, "f1") == ("COMPLETED", done["version"])

    code, back, _ = tether(tmp_path, "rollback", "f1", "2")
    assert code == 0 and back == {"run_id": "f1", "restored_version": 2, "version": done["version"] + 1}
    code, fork, _ = tether(tmp_path, "copy", "f1", "f2", "--version", "1")
    assert code == 0 and fork["run_id"] == "f2" and fork["from"] == "f1" and fork["from_version"] == 1
    assert stored(tmp_path, "f2")[1] == fork["version"]
    code, gone, _ = tether(tmp_path, "delete", "f2")
    assert code == 0 and gone == {"run_id": "f2", "deleted": True}


def test_deploy_approve_and_resume_print_one_json_object(tmp_path):
    (tmp_path / "home").mkdir()
    (tmp_path / "repo").mkdir()
    first = script(tmp_path, "1.json", [{"action": "execute", "command": APPROVAL_COMMAND}])
    code, paused, _ = tether(
        tmp_path, "deploy", "repo", "--script", first, "--run-id", "d1", "--log-dir", "logs"
    )
    assert code == PAUSED and paused["waits_for"] == "approval", paused
    assert paused["approval"]["command"] == APPROVAL_COMMAND
    assert paused["continue_with"] == "tether approve d1 [--deny], then tether resume d1"

    code, approved, _ = tether(tmp_path, "approve", "d1")
    assert code == 0 and approved["approved"] is True and approved["command"] == APPROVAL_COMMAND

    finish = script(
        tmp_path,
        "2.json",
        [{"action": "execute", "command": APPROVAL_COMMAND}, {"action": "done", "message": "rc written"}],
    )
    code, done, _ = tether(tmp_path, "resume", "d1", "--script", finish)
    assert code == COMPLETED and done["status"] == "COMPLETED" and done["message"] == "rc written"
    assert done["waits_for"] is None and Path(done["log_file"]).is_file()
    assert (tmp_path / "home" / ".bashrc").read_text() == "approved-line\n"


def test_a_plan_paused_on_a_question_says_so_in_json(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "project_name": "demo",
                "deploy_dir": str(tmp_path),
                "steps": [{"name": "Configure", "goal": "write the config"}],
            }
        )
    )
    ask = script(tmp_path, "p.json", [{"action": "ask_user", "question": "Log level?", "options": ["info"]}])
    code, paused, _ = tether(tmp_path, "plan", str(plan), "--script", ask, "--run-id", "p1")
    assert code == PAUSED and paused["waits_for"] == "answer"
    assert paused["question"]["question"] == "Log level?"
    assert paused["continue_with"] == "tether resume p1 --answer ANSWER"


def test_orchestrate_prints_one_json_object_and_the_shared_exit_code(tmp_path):
    code, done, err = tether(
        tmp_path, "orchestrate", "--demo", "--workdir", str(tmp_path / "proj"), "--run-id", "o1"
    )
    assert code == COMPLETED and done["status"] == "COMPLETED" and done["run_id"] == "o1", (done, err)
    assert done["exit_code"] == 0 and done["continue_with"] is None and done["final_output"]
    assert stored(tmp_path, "o1") == ("COMPLETED", done["version"])
