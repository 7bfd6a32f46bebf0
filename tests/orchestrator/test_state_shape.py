"""What an orchestration keeps in its state so its checkpoints stay deltas: nothing a reader
can derive (MAIN's last decision, the metric rates, standard report paths), and the readers
(the view, the prompts) still see all of it."""

from __future__ import annotations

from tether.orchestrator import Orchestrator, OrchestratorConfig, ScriptedMain
from tether.orchestrator.demo import BUG_FIX, demo_runners, rule_main
from tether.orchestrator.history import last_decision
from tether.orchestrator.metrics import rates
from tether.orchestrator.prompts import recent_reports, report_file, report_ref
from tether.orchestrator.view import orchestration_view, report_text
from tether.state import RunStatus


async def test_a_run_keeps_no_derivable_key_and_the_view_still_shows_it(repo, store):
    orch = Orchestrator(
        repo,
        store,
        main=ScriptedMain(rule_main),
        runners=demo_runners((BUG_FIX,)),
        config=OrchestratorConfig(subloop=False),
    )
    result = await orch.start("shape", "make the tests pass")
    assert result.status is RunStatus.COMPLETED
    state = result.state
    assert "last_decision" not in state and "rates" not in state["metrics"]
    assert all("path" not in entry for entry in state["latest"].values())
    assert state["report_index"]["TEST"] == [1, 3]
    # derived where read: the decision from MAIN's history entry, the rates from the counters
    decision = last_decision(state)
    assert decision["next_agent"] == "FINISH" and decision["reason"]
    assert f"reason: {decision['reason']}" in (repo / "project_history.md").read_text()
    assert rates(state["metrics"])["cache_hit_rate"] <= 1.0
    view = orchestration_view(state)
    assert view["lastDecision"] == decision
    test = next(r for r in view["reports"] if r["role"] == "TEST")
    assert test["path"] == "reports/report_test_3.md" and test["available"]
    assert "结论：PASS" in report_text(state, "TEST")["text"]
    assert recent_reports(state, "TEST", 5) == [
        (1, "reports/report_test_1.md"),
        (3, "reports/report_test_3.md"),
    ]


def test_a_state_written_before_still_reads_as_it_did():
    old = {
        "last_decision": {"next_agent": "DEV", "reason": "fix median"},
        "history": {"4": {"iteration": 4, "title": "TEST", "milestone": "", "lines": ["next_agent: TEST"]}},
        "report_index": {"DEV": [[2, "reports/report_dev_2.md"], [3, "reports/report_dev_3_final.md"]]},
    }
    assert last_decision(old) == {"next_agent": "DEV", "reason": "fix median"}
    assert recent_reports(old, "DEV", 5) == [
        (2, "reports/report_dev_2.md"),
        (3, "reports/report_dev_3_final.md"),
    ]
    assert report_file("TEST", {"iteration": 2, "path": "reports/report_test_subloop_1.md"}) == (
        "reports/report_test_subloop_1.md"
    )
    assert report_ref("DEV", 3, "reports/report_dev_3_final.md") == [3, "reports/report_dev_3_final.md"]
    assert report_ref("DEV", 3, "reports/report_dev_3.md") == 3
