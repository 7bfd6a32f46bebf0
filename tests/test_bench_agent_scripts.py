"""The agent-side benchmark scripts run in ``--quick`` mode and print the harness's shape
(header, runs, targets, JSON), and the targets that are exact counts, not timings, hold.

Timing targets are not asserted: the host is shared and a test must not fail on its load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.stores.conftest import unavailable

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_ssh import SSHD  # noqa: E402  (where the benchmark looks for sshd)


def run_quick(script: str, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    out = tmp_path / f"{script}.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "benchmarks")]),
        "TETHER_BENCH_JSON": str(out),
    }
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{script}.py"), "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["benchmark"] == script
    assert report["commit"] and report["load_start"] and report["load_end"]
    assert report["noise_start_ms"] > 0 and report["noise_end_ms"] > 0
    assert f"# {script}: " in proc.stdout and "# load average at end:" in proc.stdout
    assert "## run 1 of 1" in proc.stdout
    return proc.stdout, report


def targets(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = {t["name"]: t for t in report["targets"]}
    for t in found.values():
        assert t["runs"] == 1 and len(t["values"]) == 1, t  # --quick is one run
    return found


def lines(report: dict[str, Any]) -> dict[str, float]:
    return {line["name"]: line["value"] for line in report["lines"]}


def test_bench_tokens_counts_exactly_and_costs_what_tiktoken_costs(tmp_path: Path) -> None:
    _stdout, report = run_quick("bench_tokens", tmp_path)
    found = targets(report)
    assert len(found) == 5
    assert all(t["met"] for t in found.values()), found  # exact counts: the same on every host
    got = lines(report)
    best = "tether / floor, sum of each batch's best"
    per_run = [line for line in report["lines"] if line["name"] == best]  # one per encoding
    assert len(per_run) == 2 and all(0.5 < line["value"] < 2 for line in per_run), per_run
    assert got["Hindi: cl100k / o200k tokens"] > 2 and 0.95 < got["log lines: cl100k / o200k tokens"] < 1.05


def test_bench_policy_contains_every_dangerous_line_and_blocks_no_benign_one(tmp_path: Path) -> None:
    stdout, report = run_quick("bench_policy", tmp_path)
    found = targets(report)
    assert found["dangerous lines not contained (of 210)"]["met"]
    assert found["benign lines blocked (of 121)"]["met"]
    assert found["1 MB line decided"]["met"]  # not read: over the length bound
    assert "chained, " in stdout and "(under the word bound)" in stdout and "not read: confirm" in stdout
    assert lines(report)["policy.check: p50"] > 0


def test_bench_sandbox_times_every_line(tmp_path: Path) -> None:
    stdout, report = run_quick("bench_sandbox", tmp_path)
    if "no working bwrap" in stdout:
        pytest.skip("bubblewrap is not usable here")
    got = lines(report)
    for name in ("true, bare subprocess (floor)", "true, sandbox offline", "cat build.log, sandbox offline"):
        assert got[f"{name}: median"] > 0.1, got  # a real process start, not an empty loop
    assert "sandbox start overhead (true, offline, median)" in targets(report)


def test_bench_plan_summary_keeps_a_steps_delta_flat(tmp_path: Path) -> None:
    _stdout, report = run_quick("bench_plan_summary", tmp_path)
    found = targets(report)
    assert set(found) == {"plan run: stored bytes / final state", "plan run: SQLite file / final state"}
    assert all(t["met"] for t in found.values()), found  # byte counts: the same on every host
    got = lines(report)
    first, later = got["step 1: plan"], got["step 10: plan"]
    assert 0.5 < later / first < 2, (first, later)  # while the summary it folds keeps growing
    assert got["step 30: plan"] > 5 * later  # the last step stores the summary, once


def test_bench_agent_prompt_stays_bounded_and_its_run_stores_little(tmp_path: Path) -> None:
    _stdout, report = run_quick("bench_agent", tmp_path)
    found = targets(report)
    for name in ("largest prompt", "last prompt / naive prompt", "stored / final state"):
        assert found[name]["met"], found[name]
    own = found["loop's own time per iteration (median)"]["values"][0]
    assert 0 < own < 1_000, own  # milliseconds of the loop's own work, never negative


def test_bench_ssh_times_a_command_on_each_path(tmp_path: Path) -> None:
    if not SSHD.exists():
        unavailable("OpenSSH's sshd", FileNotFoundError(f"{SSHD} (install Debian's openssh-server)"))
    _stdout, report = run_quick("bench_ssh", tmp_path)
    got = lines(report)
    for name in ("SSHSession, relayed (the default)", "SSHSession(relay=False)", "asyncssh conn.run (floor)"):
        assert got[f"{name}: a command"] > 1, got  # milliseconds of a real remote command
    assert "relayed command / direct command" in targets(report)
