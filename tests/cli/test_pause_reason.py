"""``tether pause RUN --reason ...``: the reason is stored with the run and shown by ``show``,
``status`` and ``runs`` with the command that continues it; real ``tether`` processes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_scripts import ROOT, start, tether
from tether.state.reserved import runtime_state

REASON = "waiting for the DBA to widen the users table"


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/pause.db"


def shown_everywhere(url: str, run_id: str, reason: str) -> None:
    status = tether("status", run_id, "--store", url)
    assert f"{run_id}: PAUSED" in status.stdout and f"reason: {reason}" in status.stdout
    assert f"continue with: tether resume {run_id}" in status.stdout
    shown = json.loads(tether("show", run_id, "--store", url).stdout)
    assert shown["pause_reason"] == reason and shown["continue_with"] == f"tether resume {run_id}"
    assert runtime_state(shown["state"])["pause_reason"] == reason  # under the reserved key
    listed = {r["run_id"]: r for r in json.loads(tether("runs", "--store", url, "--json").stdout)}
    assert listed[run_id]["pause_reason"] == reason
    assert listed[run_id]["continue_with"] == f"tether resume {run_id}"
    table = tether("runs", "--store", url, env={"COLUMNS": "400"})
    assert reason in table.stdout and f"tether resume {run_id}" in table.stdout


def test_a_reason_given_to_a_stopped_run_is_stored_and_shown_with_how_to_continue(url, tmp_path):
    proc, go = start(url, "dead", tmp_path)
    proc.kill()
    proc.communicate(timeout=60)
    paused = tether("pause", "dead", "--reason", REASON, "--store", url)
    assert paused.returncode == 0, paused.stderr
    assert "dead: PAUSED (was INTERRUPTED)" in paused.stdout and f"reason: {REASON}" in paused.stdout
    assert "continue with: tether resume dead" in paused.stdout
    shown_everywhere(url, "dead", REASON)
    go.touch()
    done = tether("resume", "dead", "--store", url, env={"TETHER_TEST_GO": str(go)})
    assert done.returncode == 0 and "status: COMPLETED" in done.stdout, done.stderr
    after = json.loads(tether("show", "dead", "--store", url).stdout)
    assert after["pause_reason"] is None  # a resumed run no longer carries it


def test_a_live_run_stops_at_its_step_boundary_then_its_reason_is_stored(url, tmp_path):
    proc, go = start(url, "live", tmp_path)
    asking = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.app", "pause", "live", "--reason", REASON, "--wait", "60"]
        + ["--store", url],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while json.loads(tether("status", "live", "--store", url, "--json").stdout)["status"] != "PAUSED":
        assert asking.poll() is None and time.monotonic() < deadline, asking.communicate()
        time.sleep(0.2)
    assert asking.poll() is None  # stored, and waiting: the runner is still inside step 'b'
    go.touch()
    out, err = asking.communicate(timeout=90)
    assert asking.returncode == 0, err
    assert "live: PAUSED (was RUNNING)" in out and f"reason: {REASON}" in out, out
    proc.communicate(timeout=60)
    assert proc.returncode == 4  # the runner exited PAUSED
    shown_everywhere(url, "live", REASON)
    state = json.loads(tether("show", "live", "--store", url).stdout)["state"]
    assert state["messages"] == ["a", "b"]  # the step in progress was kept


def test_a_runner_still_busy_keeps_its_own_reason_until_paused_again(url, tmp_path):
    proc, go = start(url, "busy", tmp_path)
    first = tether("pause", "busy", "--reason", REASON, "--wait", "0.3", "--store", url)
    assert first.returncode == 0 and "still inside a step" in first.stdout, first.stdout + first.stderr
    go.touch()
    proc.communicate(timeout=60)
    status = json.loads(tether("status", "busy", "--store", url, "--json").stdout)
    assert status["status"] == "PAUSED" and "paused from outside" in status["pause_reason"]
    again = tether("pause", "busy", "--reason", REASON, "--store", url)
    assert "busy: already PAUSED" in again.stdout and f"reason: {REASON}" in again.stdout
    shown_everywhere(url, "busy", REASON)


def test_pausing_a_finished_run_is_one_error_line(url, tmp_path):
    proc, go = start(url, "fin", tmp_path)
    go.touch()
    proc.communicate(timeout=60)
    refused = tether("pause", "fin", "--reason", REASON, "--store", url)
    assert (
        refused.returncode != 0 and refused.stderr.startswith("error:") and "Traceback" not in refused.stderr
    )
