"""`tether approve RUN [--deny]`: a real deploy run pauses on a command that needs approval
(stdin not a terminal, so no one to ask), the decision is stored, and `tether resume RUN`
continues: approved, the command runs (once, never asked again); denied, it never runs
and the model is told."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from tether.stores import open_store

PAUSED, COMPLETED = 4, 0
COMMAND = "echo approved-line >> ~/.bashrc"  # a shell rc file outside the workdir: approval


def _tether(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp_path / "home")}  # the rc file written is the test's own
    return subprocess.run(
        [sys.executable, "-m", "tether.cli.app", *args, "--store", f"sqlite:///{tmp_path}/runs.db"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        env=env,
        check=False,
    )


def _script(tmp_path: Path, name: str, replies: list[dict]) -> str:
    (tmp_path / name).write_text(json.dumps(replies))
    return str(tmp_path / name)


def _state(tmp_path: Path, run_id: str) -> dict:
    async def load() -> dict:
        async with open_store(f"sqlite:///{tmp_path}/runs.db") as st:
            cp = await st.load(run_id)
            assert cp is not None
            return dict(cp.state)

    return asyncio.run(load())


def _start(tmp_path: Path, run_id: str) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "repo").mkdir()
    first = _script(tmp_path, "first.json", [{"action": "execute", "command": COMMAND}])
    paused = _tether(tmp_path, "deploy", "repo", "--script", first, "--run-id", run_id, "--log-dir", "logs")
    assert paused.returncode == PAUSED, paused.stdout + paused.stderr
    assert "waits for your approval" in paused.stdout and f"tether approve {run_id}" in paused.stdout
    assert not (tmp_path / "home" / ".bashrc").exists()
    status = _tether(tmp_path, "status", run_id)
    assert f"tether approve {run_id} [--deny], then tether resume {run_id}" in status.stdout


def test_approve_then_resume_runs_the_command_and_never_asks_again(tmp_path):
    _start(tmp_path, "safety-approve-yes")
    approved = _tether(tmp_path, "approve", "safety-approve-yes")
    assert approved.returncode == 0, approved.stderr
    assert "approved" in approved.stdout and COMMAND in approved.stdout
    again = _tether(tmp_path, "approve", "safety-approve-yes")
    assert again.returncode == 1 and "not waiting on an approval" in again.stderr
    assert _state(tmp_path, "safety-approve-yes")["pending_approval"] is None  # still PAUSED, decided
    replies = [{"action": "execute", "command": COMMAND}] * 2 + [{"action": "done", "message": "ok"}]
    done = _tether(tmp_path, "resume", "safety-approve-yes", "--script", _script(tmp_path, "r.json", replies))
    assert done.returncode == COMPLETED, done.stdout + done.stderr
    assert (tmp_path / "home" / ".bashrc").read_text() == "approved-line\napproved-line\n"  # asked once


def test_deny_then_resume_never_runs_the_command_and_tells_the_model(tmp_path):
    _start(tmp_path, "safety-approve-no")
    denied = _tether(tmp_path, "approve", "safety-approve-no", "--deny")
    assert denied.returncode == 0 and "denied" in denied.stdout, denied.stderr
    replies = [{"action": "done", "message": "skipped the rc file"}]
    done = _tether(tmp_path, "resume", "safety-approve-no", "--script", _script(tmp_path, "r.json", replies))
    assert done.returncode == COMPLETED, done.stdout + done.stderr
    assert not (tmp_path / "home" / ".bashrc").exists()
    assert "the operator refused" in json.dumps(_state(tmp_path, "safety-approve-no"))  # in its prompt


def test_approve_a_run_that_is_not_paused_on_an_approval_is_one_error_line(tmp_path):
    missing = _tether(tmp_path, "approve", "no-such-run")
    assert missing.returncode == 1 and missing.stderr.startswith("error: run 'no-such-run' not found")
