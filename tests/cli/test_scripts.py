"""The CLI for scripts: real ``tether`` processes interrupted by SIGINT and SIGKILL, paused
and cancelled from another process; exit codes, --json, errors as one line, no markup."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tether.cli.app import app
from tether.state.reserved import runtime_state

ROOT = Path(__file__).resolve().parents[2]
SLOW = "tests.cli._flows:slow_plan"
cli = CliRunner()


def tether(*args: str, env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess[str]:
    """``tether ARGS`` as a real process, output piped (as a script sees it)."""
    return subprocess.run(
        [sys.executable, "-m", "tether.cli.app", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
        **kw,
    )


def start(url: str, run_id: str, tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    """``tether run`` of the slow plan, returned once it is inside step 'b'; and the go file."""
    mark, go = tmp_path / f"{run_id}.mark", tmp_path / f"{run_id}.go"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.app", "run", SLOW, "--run-id", run_id, "--store", url],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TETHER_TEST_MARK": str(mark), "TETHER_TEST_GO": str(go)},
        # A suite started as a background job has SIGINT ignored, and children inherit
        # that: give the CLI the default disposition a terminal's Ctrl-C meets.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while not mark.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise AssertionError(f"the run never reached step 'b': {proc.communicate()}")
        time.sleep(0.05)
    return proc, go


def stop(proc: subprocess.Popen[str]) -> None:
    """Never leave a child behind when a test fails or times out."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Callable[[str, str], tuple[subprocess.Popen[str], Path]]]:
    """``start`` whose processes are killed at teardown if still running."""
    procs: list[subprocess.Popen[str]] = []

    def go(url: str, run_id: str) -> tuple[subprocess.Popen[str], Path]:
        proc, go_file = start(url, run_id, tmp_path)
        procs.append(proc)
        return proc, go_file

    yield go
    for proc in procs:
        stop(proc)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/cli.db"


def test_ctrl_c_leaves_the_run_interrupted_and_says_how_to_resume(url, started):
    proc, go = started(url, "sigint")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "interrupted: run sigint left INTERRUPTED at version" in err and "after step 'a'" in err
    assert "continue with: tether resume sigint" in err
    assert "Traceback" not in err
    shown = json.loads(tether("status", "sigint", "--store", url, "--json").stdout)
    assert shown["status"] == "INTERRUPTED" and shown["pause_reason"].startswith("cancelled")
    go.touch()
    done = tether("resume", "sigint", "--store", url, env={"TETHER_TEST_GO": str(go)})
    assert done.returncode == 0, done.stderr
    assert "status: COMPLETED" in done.stdout


def test_a_killed_runner_lists_as_interrupted(url, started):
    proc, go = started(url, "sigkill")
    proc.kill()
    proc.communicate(timeout=60)
    listed = json.loads(tether("runs", "--store", url, "--json").stdout)
    assert [(r["run_id"], r["status"]) for r in listed] == [("sigkill", "INTERRUPTED")]
    status = tether("status", "sigkill", "--store", url)
    assert "sigkill: INTERRUPTED" in status.stdout
    assert "continue with: tether resume sigkill" in status.stdout
    go.touch()
    done = tether("resume", "sigkill", "--store", url, env={"TETHER_TEST_GO": str(go)})
    assert done.returncode == 0, done.stderr
    log = runtime_state(json.loads(tether("show", "sigkill", "--store", url).stdout)["state"])["event_log"]
    cut = [e for e in log if e["kind"] == "interrupted"]
    assert cut and cut[0]["detail"]["after"] == "a"  # the crash is on record


@pytest.mark.parametrize(("command", "status", "code"), [("pause", "PAUSED", 4), ("cancel", "CANCELLED", 5)])
def test_pause_and_cancel_stop_a_live_runner_at_the_next_step_boundary(url, started, command, status, code):
    proc, go = started(url, command)
    asked = tether(command, command, "--store", url)
    assert asked.returncode == 0 and "its runner stops at the next step boundary" in asked.stdout
    go.touch()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, (out, err)
    assert f"status: {status}" in out
    shown = json.loads(tether("show", command, "--store", url).stdout)
    assert shown["status"] == status and shown["state"]["messages"] == ["a", "b"]  # 'b' was kept
    assert runtime_state(shown["state"])["lease"] is None
    if status == "PAUSED":
        assert "paused from outside" in out and f"continue with: tether resume {command}" in out
        done = tether("resume", SLOW, command, "--store", url, env={"TETHER_TEST_GO": str(go)})
        assert done.returncode == 0 and "status: COMPLETED" in done.stdout
    else:
        again = tether("resume", SLOW, command, "--store", url)
        assert again.returncode == 5 and "status: CANCELLED" in again.stdout  # final


def test_user_data_is_printed_as_written_and_exit_codes_tell_statuses_apart(url):
    failed = tether("run", "tests.cli._flows:markup_plan", "--run-id", "m1", "--store", url)
    assert failed.returncode == 4, failed.stderr  # PAUSED: waits for a decision
    assert "closing tag '[/red]' in [bold]user data[/bold]" in failed.stdout
    assert "[retry]" in failed.stdout and "render [x]" in failed.stdout
    assert "continue with: tether resume m1 --decision retry|skip|takeover|abort" in failed.stdout
    report = json.loads(tether("report", "m1", "--store", url, "--json").stdout)
    assert report["item_id"] == "render [x]"
    aborted = tether("resume", "tests.cli._flows:markup_plan", "m1", "--decision", "abort", "--store", url)
    assert aborted.returncode == 5
    gave_up = tether("run", "tests.cli._flows:ends_failed", "--run-id", "f1", "--store", url)
    assert gave_up.returncode == 3 and "status: FAILED" in gave_up.stdout
    long_id = "r" * 120
    ok = tether(
        "run", "tests.cli._flows:slow_plan", "--run-id", long_id, "--store", url, env={"TETHER_TEST_GO": "/"}
    )
    assert ok.returncode == 0 and "\nstatus: COMPLETED at version" in ok.stdout  # its own line
    listed = tether("runs", "--store", url).stdout
    assert any(long_id in line for line in listed.splitlines())  # piped: never cut at 80 columns


def test_errors_are_one_line_with_a_non_zero_exit(url, tmp_path):
    cases = [
        (["history", "nope", "--store", url], "error: run 'nope' not found"),
        (["run", SLOW, "--input", '{"k\\ud83d": 1}', "--store", url], "error: state key: lone surrogate"),
        (["run", SLOW, "--run-id", "x" * 200, "--store", url], "error: run id is 200 characters long"),
        (["pause", "nope", "--store", url], "error: run 'nope' not found"),
        (["diff", "nope", "1", "2", "--store", url], "error: version 1 of run 'nope' not found"),
    ]
    for args, message in cases:
        out = tether(*args)
        assert out.returncode == 1, (args, out.stdout, out.stderr)
        assert message in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)
    bad_setting = tether("runs", "--store", url, env={"TETHER_CHECKPOINT_TTL_HOURS": "-2"})
    assert bad_setting.returncode == 2  # a bad setting, like a bad flag
    assert "error: bad setting: TETHER_CHECKPOINT_TTL_HOURS='-2'" in bad_setting.stderr
    for usage in (
        ["runs", "--status", "sleeping", "--store", url],
        ["deploy", str(tmp_path), "--script", str(tmp_path / "missing.json"), "--store", url],
    ):
        bad = tether(*usage)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
    traced = tether("--debug", "history", "nope", "--store", url)
    assert "Traceback" in traced.stderr and "RunNotFound" in traced.stderr
    assert tether("--version").stdout.startswith("tether ")


def test_json_diff_rollback_and_never_expiring_settings(url, monkeypatch):
    monkeypatch.setenv("TETHER_COMPLETED_TTL_HOURS", "none")
    monkeypatch.setenv("TETHER_CHECKPOINT_TTL_HOURS", "0")
    run = cli.invoke(
        app, ["run", SLOW, "--run-id", "j1", "--store", url, "--plain"], env={"TETHER_TEST_GO": "/"}
    )
    assert run.exit_code == 0, run.output
    runs = json.loads(cli.invoke(app, ["runs", "--store", url, "--json"]).output)
    assert runs[0]["run_id"] == "j1" and runs[0]["status"] == "COMPLETED" and runs[0]["expires_at"] is None
    history = json.loads(cli.invoke(app, ["history", "j1", "--store", url, "--json"]).output)
    assert [h["node_id"] for h in history][:3] == ["c", "c", "b"] or history[0]["version"] == len(history)
    changed = json.loads(cli.invoke(app, ["diff", "j1", "2", "3", "--store", url, "--json"]).output)
    assert changed["changed"]["messages"] == {"from": ["a"], "to": ["a", "b"]}
    text = cli.invoke(app, ["diff", "j1", "2", "3", "--store", url]).output
    assert '~ messages: ["a"] -> ["a", "b"]' in text
    back = cli.invoke(app, ["rollback", "j1", "2", "--store", url])
    assert back.exit_code == 0 and "version 2 restored as version" in back.output
    shown = json.loads(cli.invoke(app, ["show", "j1", "--store", url]).output)
    assert shown["state"]["messages"] == ["a"] and runtime_state(shown["state"])["lease"] is None
    status = json.loads(cli.invoke(app, ["status", "j1", "--store", url, "--json"]).output)
    assert status["status"] == "PAUSED"  # rolled back to before its end: resume continues from there
    assert status["continue_with"] == "tether resume j1"


def test_the_shell_example_of_the_cli_docs_prints_what_the_page_says(tmp_path):
    page = (ROOT / "docs" / "cli.md").read_text()
    script = page.split("```sh\n", 1)[1].split("```", 1)[0]
    promised = page.split("prints\n\n```\n", 1)[1].split("```", 1)[0]
    bindir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "TETHER_STORE_URL": f"sqlite:///{tmp_path}/d.db",
    }
    out = subprocess.run(  # in its own folder: the example writes its workflow file there
        ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == promised
