"""MAIN: stall → re-plan, the USER pause, a model as MAIN, bad decisions."""

from __future__ import annotations

import pytest

from tether.errors import ModelOutputError
from tether.models import ScriptedModel
from tether.orchestrator import (
    MainDecision,
    MainRequest,
    ModelMain,
    Orchestrator,
    OrchestratorConfig,
    ScriptedMain,
    ScriptedRunner,
)
from tether.orchestrator.decisions import stall_check
from tether.orchestrator.demo import finish_review_role, review_role
from tether.state import RunStatus


def review_only():
    return ScriptedRunner({"REVIEW": review_role, "FINISH_REVIEW": finish_review_role})


async def test_no_plan_progress_for_three_rounds_asks_main_to_replan(repo, store):
    """MAIN keeps sending REVIEW (a FAIL: the bug is there) without progress; the 4th round is told to re-plan."""

    def main(req: MainRequest) -> MainDecision:
        if req.replan:
            return MainDecision(
                next_agent="FINISH", reason="re-planned: stop", dev_plan=[{"id": "t1", "status": "BLOCKED"}]
            )
        return MainDecision(
            next_agent="REVIEW",
            reason="look again",
            dev_plan=[{"id": "t1", "title": "fix", "status": "TODO"}],
        )

    policy = ScriptedMain(lambda req: main(req) if req.mode == "main" else MainDecision(next_agent="FINISH"))
    orch = Orchestrator(repo, store, main=policy, runners=review_only())
    result = await orch.start("stall", "fix the median")
    assert result.status is RunStatus.COMPLETED
    flags = [r.replan for r in policy.requests if r.mode == "main"]
    assert flags == [False, False, False, True]
    replan_prompt = [r.prompt for r in policy.requests if r.replan][0]
    assert "RE-PLAN REQUIRED" in replan_prompt and "no dev_plan progress for 3 MAIN rounds" in replan_prompt
    assert "re-plan requested" in (repo / "project_history.md").read_text()


async def test_user_decision_pauses_then_the_answer_is_a_milestone(repo, store):
    def main(req: MainRequest) -> MainDecision:
        if req.mode == "finish_check":
            return MainDecision(next_agent="FINISH", reason="user chose to stop")
        if req.iteration == 1:
            return MainDecision(next_agent="USER", reason="two options", question="option A or B?")
        return MainDecision(next_agent="FINISH", reason="done")

    orch = Orchestrator(repo, store, main=ScriptedMain(main), runners=review_only())
    paused = await orch.start("user", "decide")
    assert paused.status is RunStatus.PAUSED
    assert paused.state["pending_question"] == "option A or B?"
    done = await orch.answer("user", "A")
    assert done.status is RunStatus.COMPLETED
    assert done.state["user_decisions"] == [{"question": "option A or B?", "answer": "A"}]
    assert "## Iteration 1: [MILESTONE] user decision - A - USER" in (repo / "project_history.md").read_text()


async def test_a_model_as_main_and_its_invalid_replies(repo, store):
    """ModelMain parses JSON; an invalid reply goes back to the model, then succeeds."""
    model = ScriptedModel(
        [
            "not json",
            {
                "next_agent": "FINISH",
                "reason": "trivial task",
                "dev_plan": [{"id": "t1", "title": "x", "status": "DONE"}],
            },
            {"next_agent": "FINISH", "reason": "verified"},
        ]
    )
    orch = Orchestrator(repo, store, main=ModelMain(model), runners=review_only())
    result = await orch.start("model", "nothing to do")
    assert result.status is RunStatus.COMPLETED
    assert "Invalid reply" in model.calls[1][-1]["content"]
    assert "## Task\nnothing to do" in model.calls[0][1]["content"]
    assert result.state["dev_plan"] == [{"id": "t1", "title": "x", "status": "DONE"}]
    with pytest.raises(ModelOutputError, match="next_agent must be one of"):
        MainDecision(next_agent="DEPLOY")
    always_bad = ModelMain(ScriptedModel(["{}", "[]", "x"]))
    with pytest.raises(ModelOutputError, match="MAIN gave no valid decision"):
        await always_bad.decide(MainRequest(mode="main", iteration=1, prompt="p", task="t"))


def test_bad_configuration_is_a_clear_error(repo, store):
    from tether.errors import ConfigError

    with pytest.raises(ConfigError, match="max_iterations"):
        OrchestratorConfig(max_iterations=0)
    with pytest.raises(ConfigError, match="does not exist"):
        Orchestrator(repo / "missing", store, main=ScriptedMain(lambda r: {}), runners=review_only())


async def test_reports_without_a_verdict_raise_the_extraction_failure_warning(repo, store):
    """Headerless reports: defaults, the iteration line added, and one warning event."""
    events = []

    def main(req: MainRequest) -> MainDecision:
        if req.mode == "finish_check" or req.iteration > 3:
            return MainDecision(next_agent="FINISH", reason="stop")
        return MainDecision(next_agent="REVIEW", reason="again")

    runners = ScriptedRunner(
        {"REVIEW": lambda r: "looked around, all fine", "FINISH_REVIEW": finish_review_role}
    )
    orch = Orchestrator(repo, store, main=ScriptedMain(main), runners=runners, on_event=events.append)
    result = await orch.start("nohdr", "check")
    assert result.status is RunStatus.COMPLETED
    warnings = [e.detail for e in events if e.detail.get("stage") == "WARNING"]
    assert [w["metric"] for w in warnings] == ["extraction_failure_rate"]
    assert result.state["warnings"][0]["level"] == "warning"
    assert result.state["metrics"]["extraction_failures"] == 3
    assert (repo / "reports/report_review_1.md").read_text() == "iteration: 1\nlooked around, all fine"


def test_thresholds_follow_the_design():
    from tether.orchestrator.metrics import check_thresholds, empty_metrics

    m = empty_metrics()
    assert check_thresholds(m) == []
    m |= {"main_prompt_bytes": [1_000] * 4 + [210_000], "subloop_entries": 4, "subloop_successes": 2}
    m |= {"test_runs": 5}  # the cache hit rate is judged from the fifth MAIN round on
    m |= {"cache_hits": 5, "cache_misses": 5}
    names = {t.name: t.level for t in check_thresholds(m)}
    assert names == {
        "main_prompt_bytes": "warning",
        "subloop_success_rate": "warning",
        "cache_hit_rate": "info",
        "subloop_trigger_rate": "info",
    }


def test_the_same_failing_test_three_times_is_a_stall(repo, store):
    orch = Orchestrator(repo, store, main=ScriptedMain(lambda r: {}), runners=review_only())
    failing = {"verdicts": {"TEST": "FAIL"}, "latest": {"TEST": {"blockers": ["test_a - assert 1 == 2"]}}}
    plan = [{"id": "t1", "status": "DONE"}]
    stall: dict = {}
    texts = []
    for i in range(1, 4):  # plan progress every round: only the repeated failure counts
        plan = [*plan, {"id": f"n{i}", "status": "DONE"}]
        text, stall = stall_check(
            {**failing, "iteration": i, "stall": stall, "dev_plan": plan}, orch.config.stall_rounds
        )
        texts.append(text)
    assert texts[:2] == ["", ""] and "the same TEST failure 3 times in a row" in texts[2]


async def test_a_plan_update_of_more_than_five_statuses_is_a_milestone(repo, store):
    tasks = [{"id": f"t{i}", "title": f"task {i}", "status": "TODO"} for i in range(7)]

    def main(req: MainRequest) -> MainDecision:
        if req.mode == "finish_check":
            return MainDecision(next_agent="FINISH", reason="ok")
        if req.iteration == 1:
            return MainDecision(next_agent="REVIEW", reason="plan", dev_plan=tasks)
        done = [{"id": t["id"], "status": "DONE"} for t in tasks]
        return MainDecision(next_agent="FINISH", reason="all done", dev_plan=done)

    result = await Orchestrator(repo, store, main=ScriptedMain(main), runners=review_only()).start(
        "big", "plan"
    )
    assert result.status is RunStatus.COMPLETED
    history = (repo / "project_history.md").read_text()
    assert "## Iteration 1: [MILESTONE] dev_plan: 7 task statuses changed - REVIEW" in history
    assert "## Iteration 2: [MILESTONE] FINISH attempt #1 - FINISH" in history  # FINISH wins the mark
    assert "- [DONE] t6: task 6" in (repo / "dev_plan.md").read_text()
