"""``tether orchestrate``: the offline demo end to end, resume, and bad role specs."""

from __future__ import annotations

from typer.testing import CliRunner

from tether.cli.app import app

runner = CliRunner()


def test_orchestrate_demo_fixes_the_sample_bug_with_a_live_view(tmp_path):
    work = tmp_path / "project"
    store = f"sqlite:///{tmp_path}/o.db"
    args = ["orchestrate", "--demo", "--workdir", str(work), "--store", store, "--run-id", "demo1"]
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    assert "iter  1  MAIN           -> TEST    prompt" in out.output
    assert "verdict FAIL" in out.output and "sub-loop round 1" in out.output
    assert "success=True (TEST PASS)" in out.output
    assert "COMPLETED demo1: verified" in out.output
    assert "(ordered[mid - 1] + ordered[mid]) / 2" in (work / "stats.py").read_text()
    again = runner.invoke(
        app, ["orchestrate", "--workdir", str(work), "--store", store, "--resume", "demo1", "--demo"]
    )
    assert again.exit_code == 0 and "COMPLETED demo1" in again.output  # a finished run stays finished
    # the run records what started it, so its id alone continues it
    by_id = runner.invoke(app, ["resume", "demo1", "--store", store])
    assert by_id.exit_code == 0 and "COMPLETED demo1" in by_id.output, by_id.output
    refused = runner.invoke(app, ["resume", "demo1", "--store", store, "--script", "x.json"])
    assert refused.exit_code == 2 and "not --script" in refused.output


def test_orchestrate_refuses_unknown_roles_and_missing_agents(tmp_path):
    out = runner.invoke(app, ["orchestrate", "fix it", "--workdir", str(tmp_path), "--agent", "QA=cmd:x"])
    assert out.exit_code == 2 and "ROLE=SPEC" in out.output
    out = runner.invoke(app, ["orchestrate", "fix it", "--workdir", str(tmp_path), "--agent", "DEV=cmd:x"])
    assert out.exit_code == 2 and "no --agent for TEST, REVIEW, FINISH_REVIEW" in out.output
    out = runner.invoke(app, ["orchestrate", "fix it", "--workdir", str(tmp_path), "--agent", "*=robot"])
    assert out.exit_code == 2 and "use cmd:COMMAND" in out.output
    out = runner.invoke(app, ["orchestrate", "--workdir", str(tmp_path), "--agent", "*=demo"])
    assert out.exit_code == 2 and "give a TASK" in out.output
