"""Secrets planted in the environment, in files, in command output and in exception texts
reach no sink: real ``tether`` processes at ``--debug``, then the raw bytes of their
stdout/stderr, the SQLite checkpoint files (WAL included) and the run logs are searched."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _secret(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(10)}"


@pytest.fixture
def planted(tmp_path):
    values = {
        "env_token": _secret("tok"),  # only in the environment (and a file that repeats it)
        "db_password": _secret("Pw"),  # in a DATABASE_URL and in exception texts
        "file_password": _secret("Fp"),  # only in a repository file, as password=...
        "github": "ghp_" + secrets.token_hex(18),  # a credential shape in command output
    }
    env = {
        **os.environ,
        "TETHER_TEST_SERVICE_TOKEN": values["env_token"],
        "TETHER_TEST_DB_PASSWORD": values["db_password"],
        "DATABASE_URL": f"postgresql://app:{values['db_password']}@db.internal/app",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return values, env


def _tether(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run(
        [sys.executable, "-m", "tether.cli.app", "--debug", *args],
        capture_output=True,
        timeout=180,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        env=env,
        check=False,
    )
    (tmp_path / f"out-{len(list(tmp_path.glob('out-*')))}.bin").write_bytes(proc.stdout + b"\n" + proc.stderr)
    return proc


def _hits(root: Path, values: dict[str, str], skip: set[Path]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and path not in skip:
            data = path.read_bytes()
            found += [
                f"{name} in {path.relative_to(root)}" for name, v in values.items() if v.encode() in data
            ]
    return found


def test_deploy_debug_leaks_nothing_to_logs_checkpoints_or_run_logs(tmp_path, planted):
    values, env = planted
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "config.ini").write_text(f"[db]\npassword = {values['file_password']}\n")
    (repo / "notes.txt").write_text(f"service token: {values['env_token']}\n")
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"action": "execute", "command": f"cat config.ini notes.txt; echo {values['github']}"},
                {
                    "action": "execute",
                    "command": "python3 -c \"import os; raise SystemExit('connect failed: ' + os.environ.get("
                    f"'X', 'postgresql://admin:{values['db_password']}@10.0.0.5/prod'))\"",
                },
            ]
        )
    )
    store = f"sqlite:///{tmp_path}/state/cli.db"
    (tmp_path / "state").mkdir()
    proc = _tether(
        tmp_path, env, "deploy", str(repo), "--script", str(script), "--store", store,
        "--log-dir", str(tmp_path / "agent_logs"), "--safety", "trusted",
    )  # fmt: skip
    assert proc.returncode == 4, proc.stderr.decode()[-3000:]  # paused on the script's end
    out = proc.stdout + proc.stderr
    assert b"[REDACTED" in out and b"DEBUG" in proc.stderr  # the sinks were written, redacted
    assert list((tmp_path / "agent_logs").glob("*.json")), "no run log written"
    # the inputs hold the secrets by construction; every other byte must not
    assert _hits(tmp_path, values, skip={script, repo / "config.ini", repo / "notes.txt"}) == []


def test_failed_workflow_debug_keeps_the_db_password_out_of_report_checkpoint_and_logs(tmp_path, planted):
    values, env = planted
    (tmp_path / "state").mkdir()
    store = f"sqlite:///{tmp_path}/state/wf.db"
    proc = _tether(
        tmp_path, env, "run", "tests.cli._secret_flows:leaky_plan", "--run-id", "safety-leaky",
        "--plain", "--store", store,
    )  # fmt: skip
    assert proc.returncode == 4, proc.stderr.decode()[-3000:]  # waits for a decision
    assert b"migration failed on postgresql://app:[REDACTED" in proc.stdout + proc.stderr
    assert b"connect failed" in proc.stderr and b"Traceback" in proc.stderr  # logger.exception kept
    show = _tether(tmp_path, env, "show", "safety-leaky", "--store", store)
    assert b"failure_report" in show.stdout and b"relation missing" in show.stdout
    assert _hits(tmp_path, values, skip=set()) == []
