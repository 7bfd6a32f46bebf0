"""The orchestrator view's data: an active sub-loop, reports read from the blackboard, and a
run whose working directory is not on this machine (summaries from the state only)."""

from __future__ import annotations

from tether.orchestrator.engine import initial_state
from tether.orchestrator.view import orchestration_view, report_text


def state_in(workdir: str) -> dict:
    state = initial_state(
        "fix it", workdir=workdir, dev_plan=[{"id": "t1", "title": "fix", "status": "DOING"}]
    )
    state["iteration"] = 2
    state["latest"] = {
        "TEST": {
            "iteration": 2,
            "path": "reports/report_test_2.md",
            "verdict": "FAIL",
            "blockers": ["a == b"],
        }
    }
    state["subloop"] = {
        "active": True,
        "iteration": 2,
        "sub_iteration": 2,
        "stage": "test",
        "entry_reason": "code",
    }
    state["history"] = {
        "1": {"iteration": 1, "title": "TEST", "milestone": "user decision - go", "lines": []}
    }
    return state


def test_an_active_subloop_and_a_report_on_the_blackboard(tmp_path):
    (tmp_path / "reports").mkdir()
    (tmp_path / ".tether").mkdir()
    (tmp_path / "reports" / "report_test_2.md").write_text(
        "iteration: 2\n结论：FAIL\n阻塞：assert 3 == 2.5\n"
    )
    view = orchestration_view(state_in(str(tmp_path)))
    assert view["orchestration"] and view["workdirAvailable"]
    assert view["plan"] == [{"id": "t1", "title": "fix", "status": "DOING"}]
    assert (
        view["subloop"]["active"]
        and view["subloop"]["sub_iteration"] == 2
        and view["subloop"]["stage"] == "test"
    )
    (test,) = view["reports"]
    assert test["available"] and test["verdict"] == "FAIL" and test["blockers"] == ["assert 3 == 2.5"]
    assert view["milestones"] == [{"iteration": 1, "title": "TEST", "milestone": "user decision - go"}]
    assert "assert 3 == 2.5" in report_text(state_in(str(tmp_path)), "test")["text"]


def test_a_workdir_elsewhere_shows_the_states_summary_without_text(tmp_path):
    state = state_in(str(tmp_path / "elsewhere"))
    view = orchestration_view(state)
    assert not view["workdirAvailable"]
    (test,) = view["reports"]
    assert not test["available"] and test["blockers"] == ["a == b"]
    assert report_text(state, "TEST") is None
    assert not (tmp_path / "elsewhere").exists()  # reading creates nothing
    assert orchestration_view({"messages": []}) == {"orchestration": False}


def test_only_report_files_inside_the_blackboard_are_read(tmp_path):
    """An edited state cannot make the server read another file: not a path outside, not a
    symlink leading out, not a file that is not a report, not a folder without a blackboard."""
    work = tmp_path / "w"
    (work / "reports").mkdir(parents=True)
    (work / ".tether").mkdir()
    (tmp_path / "secret.md").write_text("iteration: 1\n结论：PASS\n")
    (work / "reports" / "report_test_9.md").symlink_to(tmp_path / "secret.md")
    (work / "reports" / "notes.md").write_text("iteration: 1\n结论：PASS\n")
    state = state_in(str(work))
    for path in (
        "../secret.md",
        "reports/../../secret.md",
        "reports/report_test_9.md",
        "reports/notes.md",
        "/etc/passwd",
    ):
        state["latest"]["TEST"]["path"] = path
        assert report_text(state, "TEST") is None, path
        assert orchestration_view(state)["reports"][0]["available"] is False
    state["workdir"] = str(tmp_path)  # no .tether: not a blackboard
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "report_test_2.md").write_text("iteration: 2\n结论：FAIL\n")
    state["latest"]["TEST"]["path"] = "reports/report_test_2.md"
    assert report_text(state, "TEST") is None
