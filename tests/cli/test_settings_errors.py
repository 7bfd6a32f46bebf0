"""Every documented setting with a bad value, through the real ``tether`` command.

Each case runs ``python -m tether.cli.app`` in a subprocess with one ``TETHER_*`` variable
set wrong, and expects exit code 2 and exactly one ``error:`` line on stderr naming the
variable, showing the value (a key is shown as ``<hidden>``) and saying what it accepts;
never a traceback, never a server that starts. The last test prints the count for the
hardening note.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "environment-variables.md"
COUNTS = {"tried": 0, "clean": 0}

CASES: list[tuple[str, str, str]] = [
    # (variable, bad value, command that reads it)
    ("TETHER_STORE_URL", "foo://x", "runs"),
    ("TETHER_STORE_URL", "redis://127.0.0.1:6379/abc", "runs"),
    ("TETHER_STORE_URL", "no-scheme.db", "runs"),
    ("TETHER_ENCRYPTION_KEY", "notbase64", "runs"),
    ("TETHER_ENCRYPTION_KEY", "c2hvcnQ=", "runs"),
    ("TETHER_COMPRESS_MIN_BYTES", "x", "runs"),
    ("TETHER_COMPRESS_MIN_BYTES", "-1", "runs"),
    ("TETHER_CHECKPOINT_TTL_HOURS", "-2", "runs"),
    ("TETHER_CHECKPOINT_TTL_HOURS", "nan", "runs"),
    ("TETHER_COMPLETED_TTL_HOURS", "inf", "runs"),
    ("TETHER_COMPLETED_TTL_HOURS", "1e300", "runs"),
    ("TETHER_COMPLETED_TTL_HOURS", "soon", "runs"),
    ("TETHER_HOST", "", "serve"),
    ("TETHER_PORT", "abc", "serve"),
    ("TETHER_PORT", "99999", "serve"),
    ("TETHER_PORT", "-1", "serve"),
    ("TETHER_MAX_BODY_BYTES", "-5", "serve"),
    ("TETHER_MAX_BODY_BYTES", "16MB", "serve"),
    ("TETHER_SNAPSHOT_CACHE_BYTES", "lots", "serve"),
    ("TETHER_SNAPSHOT_CACHE_BYTES", "-1", "serve"),
    ("TETHER_OTEL_EXPORTER", "jaeger", "serve"),
    ("TETHER_API_TOKENS", "garbage", "serve"),
    ("TETHER_API_TOKENS", "sha256:" + "0" * 64 + " scope=root", "serve"),
    ("TETHER_API_TOKENS_FILE", "/nonexistent/tokens", "serve"),
    ("TETHER_CORS_ORIGINS", "notaurl", "serve"),
    ("TETHER_ALLOWED_HOSTS", "http://x.example", "serve"),
    ("TETHER_STORE_URL", "redis://127.0.0.1:6379/abc", "serve"),
    ("TETHER_ENCRYPTION_KEY", "notbase64", "serve"),
]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
    return {**env, **extra}


def tether(*args: str, cwd: Path, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli.app", *args],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_every_case_names_a_documented_setting() -> None:
    documented = set(re.findall(r"`(TETHER_[A-Z_]+)`", DOCS.read_text(encoding="utf-8")))
    assert {var for var, _v, _c in CASES} <= documented


@pytest.mark.slow  # a subprocess per case
@pytest.mark.parametrize(("var", "value", "command"), CASES, ids=[f"{v}={x}" for v, x, _c in CASES])
def test_a_bad_setting_is_one_error_line_and_exit_2(
    tmp_path: Path, var: str, value: str, command: str
) -> None:
    COUNTS["tried"] += 1
    args = [command] if command == "runs" else [command, "--store", f"sqlite:///{tmp_path}/t.db"]
    if var == "TETHER_STORE_URL" and command == "serve":
        args = [command]
    out = tether(*args, cwd=tmp_path, **{var: value})
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert var in lines[0] or (var == "TETHER_API_TOKENS_FILE" and "token file" in lines[0]), lines[0]
    if var == "TETHER_API_TOKENS":
        assert "entry 1" in lines[0]  # which entry, not its text
    elif var != "TETHER_ENCRYPTION_KEY" and value:
        assert value in lines[0] or value.split()[0] in lines[0], lines[0]
    else:
        assert value not in lines[0] or not value
    assert "Traceback" not in out.stderr + out.stdout and "http://" not in out.stderr.split("error:")[0]
    assert not (tmp_path / ".tether").exists()  # nothing was created on the way
    COUNTS["clean"] += 1


def test_serve_on_a_busy_port_says_so_and_prints_no_url(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        out = tether("serve", "--port", str(port), "--store", f"sqlite:///{tmp_path}/t.db", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert f"port {port} on 127.0.0.1 is already in use" in out.stderr
    assert "http://" not in out.stderr + out.stdout and "Traceback" not in out.stderr


def test_usage_mistakes_are_one_line(tmp_path: Path) -> None:
    """No boxed panel: one ``error:`` line that names the command's help, exit 2."""
    for args in (
        ["runs", "--bogus"],
        ["show"],
        ["bogus"],
        ["serve", "--port", "x"],
        ["--env-file", "/no", "runs"],
    ):
        out = tether(*args, cwd=tmp_path)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1, (args, out.stderr)
        assert lines[0].startswith("error: ") and "--help" in lines[0] and "─" not in out.stderr, lines


def test_a_mistyped_sqlite_folder_is_not_created_by_a_read(tmp_path: Path) -> None:
    out = tether("runs", "--store", f"sqlite:///{tmp_path}/typo/tether.db", cwd=tmp_path)
    assert out.returncode == 1 and "no store at" in out.stderr, out.stderr
    assert not (tmp_path / "typo").exists()


def test_serve_without_the_server_extra_has_its_own_exit_code(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['fastapi'] = None; sys.modules['uvicorn'] = None; "
        "sys.argv = ['tether', 'serve']; from tether.cli.app import main; main()"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True
    )
    assert out.returncode == 7, out.stderr
    assert "pip install 'tether[server]'" in out.stderr and "Traceback" not in out.stderr
    imported = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['fastapi'] = None; import tether.server"],
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert "pip install 'tether[server]'" in imported.stderr


def test_zz_settings_counts(capsys: pytest.CaptureFixture[str]) -> None:
    if not COUNTS["tried"]:
        pytest.skip("the settings cases did not run in this session")
    with capsys.disabled():
        print(f"\nsettings tried: {COUNTS['tried']}, clean errors: {COUNTS['clean']}")
    assert COUNTS["tried"] == COUNTS["clean"]
