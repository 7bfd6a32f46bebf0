"""End to end on the sample project: scripted DEV edits files, TEST really runs pytest."""

from __future__ import annotations

import json
import logging

from tether.orchestrator import Orchestrator, OrchestratorConfig, ScriptedMain
from tether.orchestrator.demo import BUG_FIX, demo_runners, rule_main
from tether.orchestrator.stage import verdicts_of
from tether.state import RunStatus


def orchestrator(repo, store, *, fixes=(BUG_FIX,), events=None, **config):
    return Orchestrator(
        repo,
        store,
        main=ScriptedMain(rule_main),
        runners=demo_runners(fixes),
        config=OrchestratorConfig(**config),
        on_event=None if events is None else events.append,
    )


def stages(result) -> list[str]:
    return [h["node"] for h in result.state["execution_history"]]


async def test_normal_flow_test_dev_review_finish(repo, store):
    """Without the sub-loop: MAIN → TEST(FAIL) → DEV → TEST(PASS) → REVIEW → FINISH."""
    result = await orchestrator(repo, store, subloop=False).start("normal", "make the tests pass")
    assert result.status is RunStatus.COMPLETED, result.state.get("final_output")
    assert stages(result) == [
        "main", "test", "main", "dev", "main", "test", "main", "review", "main", "finish_review", "finish_check",
    ]  # fmt: skip
    assert "(ordered[mid - 1] + ordered[mid]) / 2" in (repo / "stats.py").read_text()
    assert verdicts_of(result.state) == {
        "TEST": "PASS",
        "DEV": "PASS",
        "REVIEW": "PASS",
        "FINISH_REVIEW": "PASS",
    }
    reports = repo / "reports"
    assert "结论：FAIL" in (reports / "report_test_1.md").read_text()
    assert "test_median_even" in (reports / "report_test_1.md").read_text()
    assert "结论：PASS" in (reports / "report_test.md").read_text()
    history = (repo / "project_history.md").read_text()
    assert "## Iteration 1: TEST" in history
    assert "[MILESTONE] first TEST PASS after a FAIL" in history
    assert "[MILESTONE] FINISH attempt #1" in history
    assert "[DONE] t1" in (repo / "dev_plan.md").read_text()
    cache = json.loads((repo / ".tether/cache/report_summaries.json").read_text())
    assert {"TEST_1", "DEV_2", "TEST_3", "REVIEW_4", "FINISH_REVIEW_5"} <= set(cache)


async def test_subloop_fixes_the_bug_without_main(repo, store, caplog):
    """TEST FAIL on code blockers → DEV → TEST inside the sub-loop, then back to MAIN."""
    caplog.set_level(logging.INFO, logger="tether.orchestrator")
    runners = demo_runners()
    orch = Orchestrator(repo, store, main=ScriptedMain(rule_main), runners=runners)
    result = await orch.start("sub", "make the tests pass")
    dev, test = [c for c in runners.calls if c.subloop_round == 1]
    assert dev.role == "DEV" and "Fast-fix loop, round 1" in dev.prompt
    assert "[TEST #1 full report: reports/report_test_1.md]" in dev.prompt  # the full TEST report
    assert "short test summary info" in dev.prompt  # pytest's own output, in full
    assert test.role == "TEST" and "[DEV #1 full report: reports/report_dev_subloop_1.md]" in test.prompt
    assert "[TEST #1] verdict: FAIL" in test.prompt  # the last TEST report as a summary
    assert result.status is RunStatus.COMPLETED
    assert stages(result)[:5] == ["main", "test", "subloop_dev", "subloop_test", "main"]
    assert result.state["subloop_result"] == {"success": True, "final_test_verdict": "PASS", "iterations": 1}
    assert (
        "orchestrator: subloop_enter iter=1 reason=code blockers: tests/test_stats.py::test_median_even"
        in caplog.text
    )
    assert "orchestrator: subloop_exit iter=1 sub_iter=1 success=true" in caplog.text
    assert "orchestrator: prompt_size stage=MAIN size=" in caplog.text
    assert "orchestrator: summary_extract agent=TEST level=2 cache_hit=" in caplog.text
    reports = repo / "reports"
    assert not list(reports.glob("*_subloop_*"))  # round files removed
    assert not (repo / ".tether/subloop_state.json").exists() and not (repo / ".tether/subloop.lock").exists()
    assert "结论：PASS" in (reports / "report_test.md").read_text()
    assert (reports / "report_dev_1_final.md").is_file()
    assert "sub-loop: 1 round(s), success=true" in (repo / "project_history.md").read_text()
