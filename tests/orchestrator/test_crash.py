"""kill -9 of the orchestrator inside the sub-loop, then resume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tether.stores import create_store

ROOT = Path(__file__).resolve().parents[2]


def run(url, repo, mode, log, crash=""):
    args = [
        sys.executable,
        "-m",
        "tests.orchestrator._crash_flow",
        url,
        str(repo),
        "crash-run",
        mode,
        str(log),
        crash,
    ]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.parametrize("crash", ["dev2", "test1"])
async def test_killed_inside_the_sub_loop_resumes_at_the_same_round(repo, tmp_path, crash):
    """The killed round runs again; every stage that finished before the kill ran once."""
    url = f"sqlite:///{tmp_path}/crash.db"
    log = tmp_path / "calls.log"
    killed = run(url, repo, "start", log, crash)
    assert killed.returncode == -9, killed.stderr
    state = json.loads((repo / ".tether/subloop_state.json").read_text())
    assert state["active"] is True
    resumed = run(url, repo, "resume", log)
    if crash == "dev2":  # DEV edits files: a crash inside it pauses with a report, never re-runs it blindly
        status, error = resumed.stdout.strip().splitlines()
        assert status == "PAUSED" and "DEV (sub-loop round 2)" in error, resumed.stdout
        resumed = run(url, repo, "retry", log)  # a person decides to run it again
    assert resumed.stdout.strip() == "COMPLETED", resumed.stderr
    lines = log.read_text().split()
    ends = [line for line in lines if line.startswith("end:")]
    assert len(ends) == len(set(ends)), ends  # no finished stage ran again
    role, rnd = ("DEV", "2") if crash == "dev2" else ("TEST", "1")
    assert lines.count(f"start:{role}:{rnd}") == 2  # the killed one, then its re-run
    assert ends[:5] == ["end:TEST:0", "end:DEV:1", "end:TEST:1", "end:DEV:2", "end:TEST:2"]
    store = create_store(url)
    cp = await store.load("crash-run")
    assert cp is not None
    assert cp.state["subloop_result"] == {"success": True, "final_test_verdict": "PASS", "iterations": 2}
    await store.aclose()
    assert not (repo / ".tether/subloop.lock").exists()


async def test_killed_after_dev_wrote_its_report_continues_without_running_dev_again(repo, tmp_path):
    """The probe: DEV's report of the round is on the blackboard, so the role had finished;
    the resumed run records it and goes on to TEST without asking anyone."""
    url = f"sqlite:///{tmp_path}/crash.db"
    log = tmp_path / "calls.log"
    killed = run(url, repo, "start", log, "after-dev1")
    assert killed.returncode == -9, killed.stderr
    resumed = run(url, repo, "resume", log)
    assert resumed.stdout.strip() == "COMPLETED", resumed.stdout + resumed.stderr
    lines = log.read_text().split()
    assert lines.count("start:DEV:1") == 1  # not run again
    store = create_store(url)
    cp = await store.load("crash-run")
    assert cp is not None
    events = cp.state["_tether"]["event_log"]
    takeover = [e for e in events if e["kind"] == "takeover"]
    assert takeover and "was on the blackboard" in takeover[0]["detail"]["note"]
    await store.aclose()
