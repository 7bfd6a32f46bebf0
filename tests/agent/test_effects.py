"""Commands that change the host: declared, run in their own non-idempotent step; a kill -9
inside one pauses the resumed run with the command named, unless a probe settles it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tether.agent import AgentLoop
from tether.agent.effects import SideEffects, changes_host, default_probe, probe_verdict
from tether.models import ScriptedModel
from tether.state import RunStatus
from tether.stores import open_store
from tether.tools import LocalSession

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("command", "changes"),
    [
        ("ls -la", False),
        ("cat app.log 2>&1 | tail -5", False),
        ("curl -sf http://127.0.0.1:8000/health", False),
        ("git status && git log -3", False),
        ("docker compose ps", False),
        ("systemctl status nginx", False),
        ("grep -q x y >/dev/null", False),
        ("echo hi > out.txt", True),
        ("printf 'a' >> log", True),
        ("curl -X POST http://x/api", True),
        ("docker compose up -d", True),
        ("systemctl restart nginx", True),
        ("pip install flask", True),
        ("nohup python app.py > app.log 2>&1 &", True),
        ("git clone https://example.org/r.git", True),
        ("git branch feature", True),
        ("find . -name '*.pyc' -delete", True),
        ("rm -rf build", True),
        ("./deploy.sh", True),
        ("sudo apt-get install -y nginx", True),
    ],
)
def test_which_commands_change_the_host(command, changes):
    assert changes_host(command) is changes


def test_default_probes_and_their_verdicts():
    assert default_probe("mkdir -p a/b") == "test -d a/b"
    assert default_probe("echo x > conf.ini") == "test -s conf.ini"
    assert default_probe("git clone https://h/o/repo.git") == "test -d repo/.git"
    assert default_probe("systemctl start nginx") == "systemctl is-active --quiet nginx || exit 1"
    assert default_probe("nohup app > log &") is None  # only the model knows how to check a service
    assert default_probe("echo a >> log") is None  # an append: half of it proves nothing
    assert (probe_verdict(0), probe_verdict(1), probe_verdict(2), probe_verdict(None)) == (
        True,
        False,
        None,
        None,
    )


def flow(tmp_path: Path, mode: str, replies: list[dict]) -> subprocess.CompletedProcess[str]:
    """An agent loop in a child process (start or resume), replies scripted."""
    script = tmp_path / f"{mode}.py"
    script.write_text(
        "import asyncio\n"
        "from tether.agent import AgentLoop\n"
        "from tether.models import ScriptedModel\n"
        "from tether.stores import open_store\n"
        "from tether.tools import LocalSession\n"
        "async def main():\n"
        f"    async with open_store('sqlite:///{tmp_path}/agent.db') as store:\n"
        f"        loop = AgentLoop(ScriptedModel({replies!r}), LocalSession(cwd={str(tmp_path)!r}), store)\n"
        f"        r = await (loop.start('fx', 'set it up') if {mode!r} == 'start' else loop.resume('fx'))\n"
        "        print(r.status.value)\n"
        "        print(r.report.error if r.report else '')\n"
        "asyncio.run(main())\n"
    )
    return subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def run_then_die(command: str, probe: str | None = None) -> dict:
    return {
        "action": "execute",
        "command": command,
        "reasoning": "set up",
        **({"probe": probe} if probe else {}),
    }


async def test_kill_inside_a_command_pauses_naming_it(tmp_path):
    (tmp_path / "armed").touch()
    killed = flow(tmp_path, "start", [run_then_die("echo run >> runs.log; rm armed && kill -9 $PPID")])
    assert killed.returncode == -9, killed.stderr
    resumed = flow(tmp_path, "resume", [{"action": "done", "message": "never asked"}])
    status, error = resumed.stdout.splitlines()[:2]
    assert status == "PAUSED", resumed.stderr
    assert "`echo run >> runs.log; rm armed && kill -9 $PPID` (iteration 1) may have run" in error
    assert (tmp_path / "runs.log").read_text().split() == ["run"]  # not run twice


async def test_a_probe_that_proves_the_effect_continues_without_running_it_again(tmp_path):
    (tmp_path / "armed").touch()
    command = "echo written > out.txt; echo run >> runs.log; rm armed && kill -9 $PPID"
    killed = flow(tmp_path, "start", [run_then_die(command, probe="test -s out.txt")])
    assert killed.returncode == -9, killed.stderr
    resumed = flow(tmp_path, "resume", [{"action": "done", "message": "configured"}])
    assert resumed.stdout.splitlines()[0] == "COMPLETED", resumed.stdout + resumed.stderr
    assert (tmp_path / "runs.log").read_text().split() == ["run"]
    async with open_store(f"sqlite:///{tmp_path}/agent.db") as store:
        cp = await store.load("fx")
    assert cp is not None
    notes = [e["detail"]["note"] for e in cp.state["_tether"]["event_log"] if e["kind"] == "takeover"]
    assert notes and "test -s out.txt" in notes[0] and "is in place" in notes[0]
    assert "not run again after a crash" in cp.state["command_history"][-1]["stdout"]


async def test_a_probe_that_proves_it_did_not_happen_runs_it_again(tmp_path):
    (tmp_path / "armed").touch()
    command = "rm armed && kill -9 $PPID || echo done > out.txt"
    killed = flow(tmp_path, "start", [run_then_die(command, probe="test -s out.txt")])
    assert killed.returncode == -9, killed.stderr
    assert not (tmp_path / "out.txt").exists()
    resumed = flow(tmp_path, "resume", [{"action": "done", "message": "configured"}])
    assert resumed.stdout.splitlines()[0] == "COMPLETED", resumed.stdout + resumed.stderr
    assert (tmp_path / "out.txt").read_text().strip() == "done"  # the retry ran it


async def test_read_only_commands_stay_in_the_iteration_and_effects_can_be_turned_off(tmp_path):
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        replies = [
            {"action": "execute", "command": "ls"},
            {"action": "execute", "command": "echo x > f"},
            {"action": "done", "message": "ok"},
        ]
        async with LocalSession(cwd=tmp_path) as session:
            result = await AgentLoop(ScriptedModel(replies), session, store).start("ro", "go")
            off = AgentLoop(ScriptedModel(replies), session, store, effects=SideEffects(enabled=False))
            plain = await off.start("off", "go")
    steps = [h["node"] for h in result.state["execution_history"]]
    assert steps == ["iteration", "iteration", "effect", "iteration"]
    assert [h["node"] for h in plain.state["execution_history"]] == ["iteration"] * 3
    assert result.status is plain.status is RunStatus.COMPLETED
