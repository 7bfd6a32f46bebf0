"""A stage writes records of what changed (a report, a reference, counters, the stall's
numbers) and reducers fold them into the state the readers see; a run stored before, with
the whole values, resumes and reads as it did."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tether.errors import InvalidStateValue
from tether.orchestrator import (
    MainDecision,
    MainRequest,
    Orchestrator,
    OrchestratorConfig,
    ScriptedMain,
    ScriptedRunner,
)
from tether.orchestrator.decisions import failure_sig, stall_check, stall_of
from tether.orchestrator.demo import finish_review_role, review_role, run_tests_role
from tether.orchestrator.history import add_history, add_line, add_lines, delta, history_of, mark_milestone
from tether.orchestrator.metrics import add_metrics, check_thresholds, metrics_of, record
from tether.orchestrator.stage import (
    add_reference,
    add_report,
    last_stage,
    overlay,
    report_record,
    verdicts_of,
)
from tether.orchestrator.view import orchestration_view
from tether.state import RunStatus


def test_a_report_record_sets_its_role_entry_and_a_dict_merges():
    entry = {"iteration": 4, "verdict": "FAIL", "blockers": ["t - assert"], "subloop": 0}
    assert report_record("TEST", entry) == ["TEST", 4, "FAIL", ["t - assert"]]
    assert report_record("DEV", {**entry, "verdict": "PASS", "blockers": []}) == ["DEV", 4, "PASS"]
    kept = {**entry, "path": "reports/report_test_4_final.md"}
    assert report_record("TEST", kept)[-1] == "reports/report_test_4_final.md"
    old = {"DEV": {"iteration": 3, "verdict": "PASS", "blockers": [], "subloop": 0}}
    latest = add_report(old, report_record("TEST", kept))
    assert latest == {**old, "TEST": kept} and old == {"DEV": old["DEV"]}  # not changed in place
    assert add_report(latest, {"DEV": {"iteration": 5}})["DEV"] == {"iteration": 5}
    with pytest.raises(InvalidStateValue):
        add_report(latest, ["TEST"])


def test_a_line_added_to_the_history_is_written_as_the_line():
    state = {
        "history": {"1": {"iteration": 1, "title": "TEST", "milestone": "", "lines": ["next_agent: TEST"]}}
    }
    history = add_line(history_of(state), "TEST: FAIL, blockers: t - assert")
    assert delta(state, history) == ["1", "TEST: FAIL, blockers: t - assert"]
    assert add_lines(state["history"], delta(state, history)) == history
    assert history_of(state, {"history": ["1", "more"]})["1"]["lines"][-1] == "more"
    marked = mark_milestone(history, 1, "first TEST PASS after a FAIL")
    assert delta(state, marked) == {"1": marked["1"]}  # more than lines: the entry
    assert delta(state, add_history(history_of(state), 2, "DEV", ["next_agent: DEV"])) == {
        "2": {"iteration": 2, "title": "DEV", "milestone": "", "lines": ["next_agent: DEV"]}
    }
    with pytest.raises(InvalidStateValue):
        add_lines(state["history"], ["7", "no such entry"])


def test_references_keep_the_last_twenty_per_role():
    index: dict = {"DEV": [[1, "reports/report_dev_1_final.md"]]}
    for i in range(2, 30):
        index = add_reference(index, ["DEV", i])
    assert index["DEV"][0] == 10 and index["DEV"][-1] == 29 and len(index["DEV"]) == 20
    assert add_reference(index, {"TEST": [1]}) == {**index, "TEST": [1]}


def test_metrics_records_add_and_a_run_from_before_keeps_its_counts():
    assert record(main_size=2500, level=2, extractions=3, cache_hits=2) == [2500, 2, 3, 0, 2]
    assert record(test_runs=1) == [None, None, 0, 0, 0, 0, 1]
    with pytest.raises(ValueError, match="unknown metrics counters"):
        record(tests=1)
    old = {"main_prompt_bytes": list(range(100)), "main_levels": [1] * 100, "test_runs": 4}
    old |= {"rates": {"cache_hit_rate": 1.0}, "active_warnings": ["cache_hit_rate"]}
    m = add_metrics(old, record(main_size=7, level=3, test_runs=1))
    assert (
        m["main_prompt_bytes"][-1] == 7 and len(m["main_prompt_bytes"]) == 100 and m["main_levels"][-1] == 3
    )
    assert m["test_runs"] == 5 and m["cache_hits"] == 0
    assert "rates" not in m and "active_warnings" not in m  # derived where read
    assert add_metrics(m, {"test_runs": 1}) == {"test_runs": 1}  # a whole value replaces them
    assert check_thresholds(metrics_of({})) == []


def test_the_last_stage_is_the_last_step_done_unless_a_run_kept_it():
    ran = [{"node": "main", "status": "done"}, {"node": "subloop_dev", "status": "done"}]
    assert last_stage({"execution_history": ran}) == "DEV"
    assert last_stage({"execution_history": [*ran, {"node": "test", "status": "failed"}]}) == "DEV"
    assert last_stage({"execution_history": ran, "last_stage": "TEST"}) == "TEST"
    assert last_stage({}) == ""


def test_the_stall_reads_as_a_dict_from_either_shape():
    sig = failure_sig("t - assert")
    assert stall_of([2, sig, 1, 3]) == {"done": 2, "fail_sig": sig, "rounds": 1, "repeats": 3}
    old = {"done": 1, "rounds": 2, "fail_sig": "t - assert", "repeats": 2}
    assert stall_of(old) == {**old, "fail_sig": sig} and stall_of(None) == {}
    assert stall_of({**old, "fail_sig": ""})["fail_sig"] == 0
    # a run from before, failing the same way again: the repeat goes on counting
    state = {"verdicts": {"TEST": "FAIL"}, "latest": {"TEST": {"blockers": ["t - assert"]}}, "stall": old}
    text, stall = stall_check({**state, "iteration": 5}, 3)
    assert stall == [1, sig, 0, 0] and "the same TEST failure 3 times in a row" in text


def _main(req: MainRequest) -> MainDecision:
    if req.mode == "finish_check":
        return MainDecision(next_agent="FINISH", reason="done")
    steps = {1: "TEST", 2: "REVIEW", 3: "USER", 4: "TEST"}
    nxt = steps.get(req.iteration, "FINISH")
    return MainDecision(next_agent=nxt, reason=f"round {req.iteration}", question="go on?")


async def test_a_run_stored_with_the_whole_values_resumes_and_continues_them(repo, store):
    runners = ScriptedRunner(
        {"TEST": run_tests_role, "REVIEW": review_role, "FINISH_REVIEW": finish_review_role}
    )
    orch = Orchestrator(
        repo, store, main=ScriptedMain(_main), runners=runners, config=OrchestratorConfig(subloop=False)
    )
    paused = await orch.start("old", "fix the median")
    assert paused.status is RunStatus.PAUSED
    state = paused.state
    assert state["latest"]["TEST"]["iteration"] == 1 and state["report_index"] == {"TEST": [1], "REVIEW": [2]}
    assert isinstance(state["stall"], list) and "verdicts" not in state
    # the keys as the orchestrator wrote them before its records: whole values
    before = {
        "verdicts": verdicts_of(state),
        "stall": stall_of(state["stall"]),
        "last_stage": "USER",
        "report_index": {"TEST": [[0, "reports/report_test_0_final.md"], 1], "REVIEW": [2]},
        "metrics": {**metrics_of(state), "test_runs": 7, "rates": {}, "active_warnings": []},
    }
    await store.update_state("old", before)
    done = await orch.answer("old", "yes")
    assert done.status is RunStatus.COMPLETED
    final = done.state
    assert final["verdicts"] is None and final["last_stage"] is None  # cleared by the first stage after
    assert last_stage(final) == "FINISH_CHECK"
    assert verdicts_of(final) == {"TEST": "FAIL", "REVIEW": "FAIL", "FINISH_REVIEW": "FAIL"}
    assert final["report_index"]["TEST"] == [[0, "reports/report_test_0_final.md"], 1, 4]
    assert final["metrics"]["test_runs"] == 8 and "rates" not in final["metrics"]
    assert isinstance(final["stall"], list) and stall_of(final["stall"])["fail_sig"]
    view = orchestration_view(final)
    assert [r["role"] for r in view["reports"]] == ["TEST", "REVIEW", "FINISH_REVIEW"]
    assert overlay(final, {"latest": ["DEV", 6, "PASS"]})["latest"]["DEV"]["verdict"] == "PASS"


def test_a_process_that_never_imported_the_orchestrator_loads_its_runs(tmp_path):
    """The records' reducers are found by their names (``tether.orchestrator.…``) when a
    store replays a run: a CLI or server that has not imported the orchestrator reads it."""
    code = f"""
import asyncio, json, sys
from tether.orchestrator import MainDecision, Orchestrator, OrchestratorConfig, ScriptedMain, ScriptedRunner
from tether.orchestrator.demo import finish_review_role, make_sample_repo, review_role, run_tests_role
from tether.stores import create_store

def main(req):
    if req.mode == "finish_check" or req.iteration > 3:
        return MainDecision(next_agent="FINISH", reason="done")
    return MainDecision(next_agent="TEST" if req.iteration % 2 else "REVIEW", reason="go")

async def run():
    store = create_store("sqlite:///{tmp_path}/o.db")
    await store.setup()
    runners = ScriptedRunner({{"TEST": run_tests_role, "REVIEW": review_role, "FINISH_REVIEW": finish_review_role}})
    repo = make_sample_repo(__import__("pathlib").Path("{tmp_path}") / "project")
    orch = Orchestrator(repo, store, main=ScriptedMain(main), runners=runners, config=OrchestratorConfig(subloop=False))
    result = await orch.start("r", "fix it")
    await store.aclose()
    print(json.dumps({{k: result.state[k] for k in ("latest", "report_index", "metrics", "stall")}}))

asyncio.run(run())
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    wrote = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    read = f"""
import asyncio, json, sys
from tether.stores import create_store

async def run():
    store = create_store("sqlite:///{tmp_path}/o.db")
    assert "tether.orchestrator" not in sys.modules
    cp = await store.load("r")
    await store.aclose()
    assert "tether.orchestrator.stage" in sys.modules  # imported by the replay, by name
    print(json.dumps({{k: cp.state[k] for k in ("latest", "report_index", "metrics", "stall")}}))

asyncio.run(run())
"""
    loaded = subprocess.run([sys.executable, "-c", read], capture_output=True, text=True, env=env, check=True)
    assert json.loads(loaded.stdout) == json.loads(wrote.stdout)
    assert json.loads(loaded.stdout)["report_index"] == {"TEST": [1, 3], "REVIEW": [2], "FINISH_REVIEW": [4]}
