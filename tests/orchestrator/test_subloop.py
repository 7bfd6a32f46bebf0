"""The TEST→DEV sub-loop: its round limit, its timeout, its state file, its lock."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time

from tether.orchestrator import Orchestrator, OrchestratorConfig, RoleOutput, ScriptedMain, ScriptedRunner
from tether.orchestrator.demo import dev_role, finish_review_role, review_role, rule_main, run_tests_role
from tether.orchestrator.subloop import classify_blocker, should_enter
from tether.state import RunStatus


def make(repo, store, runners, **config):
    return Orchestrator(
        repo, store, main=ScriptedMain(rule_main), runners=runners, config=OrchestratorConfig(**config)
    )


def roles(dev, test=run_tests_role):
    return ScriptedRunner(
        {"TEST": test, "DEV": dev, "REVIEW": review_role, "FINISH_REVIEW": finish_review_role}
    )


async def test_three_rounds_without_a_fix_return_to_main_then_the_iteration_limit_fails_the_run(repo, store):
    """A DEV that fixes nothing: the sub-loop stops after 3 rounds; MAIN's limit ends it FAILED."""
    seen_state: list[dict] = []

    def dev(request):
        state_file = repo / ".tether/subloop_state.json"
        if request.subloop_round:
            seen_state.append(json.loads(state_file.read_text()))
        return dev_role(())(request)

    result = await make(repo, store, roles(dev), max_iterations=2).start("limit", "fix it")
    assert result.status is RunStatus.FAILED
    assert result.state["subloop_result"] == {"success": False, "final_test_verdict": "FAIL", "iterations": 3}
    assert [s["sub_iteration"] for s in seen_state] == [1, 2, 3]  # the mirrored SubLoopState
    assert {
        "active",
        "iteration",
        "sub_iteration",
        "test_report",
        "dev_report",
        "entry_reason",
        "exit_condition",
    } <= set(seen_state[0])
    assert seen_state[0]["active"] is True and seen_state[0]["entry_reason"].startswith("code blockers")
    history = [h["node"] for h in result.state["execution_history"]]
    assert history[:8] == ["main", "test", *["subloop_dev", "subloop_test"] * 3]
    assert history.count("subloop_dev") == 3 and history[8] == "main"
    assert not (repo / ".tether/subloop_state.json").exists()
    report = (repo / "reports/report_orchestrator.md").read_text()
    assert "max_iterations=2" in report and "结论：BLOCKED" in report
    assert "3 rounds without a PASS" in (repo / "project_history.md").read_text()


async def test_the_sub_loop_times_out_and_returns_to_main(repo, store):
    """600 s in the seed; 0.5 s here: a DEV that takes longer ends the sub-loop."""

    async def slow_dev(request):
        if request.subloop_round:
            await asyncio.sleep(5)
        return dev_role()(request)

    runners = roles(slow_dev)
    began = time.monotonic()
    result = await make(repo, store, runners, subloop_timeout=0.5).start("slow", "fix it")
    assert time.monotonic() - began < 30
    assert result.status is RunStatus.COMPLETED  # MAIN then sent DEV outside the sub-loop
    changes = result.state["stage_changes"]
    assert "iteration 1: sub-loop exit (timeout in DEV round 1)" in changes
    assert result.state["subloop"]["exit_condition"] == "timeout in DEV round 1"


async def test_a_stale_lock_of_a_dead_process_is_taken_over(repo, store, caplog):
    caplog.set_level(logging.INFO, logger="tether.orchestrator")
    (repo / ".tether").mkdir(exist_ok=True)
    dead = {"owner": "crashed-run", "host": socket.gethostname(), "pid": 2**22 + 7, "since": time.time()}
    (repo / ".tether/subloop.lock").write_text(json.dumps(dead))
    result = await make(repo, store, roles(dev_role())).start("stale", "fix it")
    assert result.status is RunStatus.COMPLETED
    assert "took over a stale sub-loop lock" in caplog.text
    assert result.state["subloop_result"]["success"] is True
    assert not (repo / ".tether/subloop.lock").exists()


async def test_a_live_lock_of_another_run_stops_other_stages(repo, store):
    """No other agent runs during a sub-loop: the stage fails with SubLoopLocked, reported."""
    (repo / ".tether").mkdir(exist_ok=True)
    live = {"owner": "other-run", "host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}
    (repo / ".tether/subloop.lock").write_text(json.dumps(live))
    result = await make(repo, store, roles(dev_role())).start("locked", "fix it")
    assert result.status is RunStatus.PAUSED
    assert result.report is not None and result.report.error_type == "SubLoopLocked"
    assert "other-run" not in result.report.error or "sub-loop" in result.report.error


def test_blockers_are_classified():
    assert classify_blocker("tests/test_x.py::test_a - AssertionError: assert 2 == 3") == "code"
    assert classify_blocker("no tests collected: the tests are missing") == "missing_test"
    assert classify_blocker("缺少测试：登录模块") == "missing_test"
    assert classify_blocker("ModuleNotFoundError: No module named 'requests'") == "environment"
    assert classify_blocker("please ask the product owner") == "other"
    assert should_enter("FAIL", ["test_a - AssertionError"]) == (
        True,
        "code blockers: test_a - AssertionError",
    )
    assert should_enter("PASS", [])[0] is False  # the first TEST passing never enters
    assert should_enter("FAIL", ["AssertionError", "missing tests for B"])[0] is False
    assert should_enter("FAIL", [])[0] is False


async def test_an_error_in_the_sub_loop_returns_to_main(repo, store):
    def broken_dev(request):
        if request.subloop_round:
            raise RuntimeError("agent crashed")
        return dev_role()(request)

    result = await make(repo, store, roles(broken_dev)).start("err", "fix it")
    assert result.status is RunStatus.COMPLETED
    assert result.state["subloop"]["exit_condition"].startswith("error in DEV round 1: RuntimeError")
    assert [h["node"] for h in result.state["execution_history"]][:4] == [
        "main",
        "test",
        "subloop_dev",
        "main",
    ]


async def test_report_paths_outside_the_workdir_are_refused(repo, store, tmp_path):
    """A report_file with '..' or through a symlink leading out fails the stage, reported."""
    outside = tmp_path / "outside.md"
    outside.write_text("iteration: 1\n结论：PASS\n")
    (repo / "link").symlink_to(tmp_path)
    for bad in ["../outside.md", "link/outside.md", str(outside)]:
        runners = roles(dev_role(), test=lambda r, bad=bad: RoleOutput(report="", report_file=bad))
        result = await make(repo, store, runners).start(f"path-{abs(hash(bad))}", "fix it")
        assert result.status is RunStatus.PAUSED, bad
        assert result.report.error_type == "BlackboardPathError", bad
        assert "outside" in result.report.error or "'..'" in result.report.error
