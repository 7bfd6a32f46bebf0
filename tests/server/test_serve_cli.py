"""`tether serve`: refuses open access off loopback, prints tokens, serves for real."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from typer.testing import CliRunner

from tether.cli.app import app
from tether.server import hash_token


def test_refuses_a_public_address_without_tokens():
    """No token configured and a non-loopback host: exit 2, nothing served."""
    result = CliRunner().invoke(app, ["serve", "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert "refusing to listen on 0.0.0.0 without tokens" in result.output


def test_new_token_prints_the_token_and_only_its_hash_entry():
    """--new-token prints a token and an entry holding its hash, not the token."""
    result = CliRunner().invoke(app, ["serve", "--new-token", "--scope", "operate", "--namespace", "team-a"])
    assert result.exit_code == 0, result.output
    token = result.output.split("token (give it to the client; it is not stored): ")[1].split()[0]
    entry = result.output.split("entry (add it to the token file or TETHER_API_TOKENS): ")[1].strip()
    assert entry == f"{hash_token(token)} scope=operate namespace=team-a"
    bad = CliRunner().invoke(app, ["serve", "--new-token", "--scope", "root"])
    assert bad.exit_code == 2 and "--scope must be one of" in bad.output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_answers_with_a_token_from_the_file(tmp_path: Path):
    """A real `tether serve` process: 401 without the token, the run list with it."""
    token = "tth_test_token"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{hash_token(token)} scope=read name=test\n")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.app", "serve", "--store", f"sqlite:///{tmp_path}/t.db"]
        + ["--port", str(port), "--tokens-file", str(tokens)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}/api/runs"
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(url, timeout=1)
            except urllib.error.HTTPError as exc:
                exc.close()
                assert exc.code == 401
                break
            except OSError:
                assert proc.poll() is None, "tether serve exited"
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.1)
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert json.loads(resp.read()) == {"items": [], "limit": 50, "offset": 0, "nextOffset": None}
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert b"Traceback" not in err


def test_replan_option_names_a_registered_workflow_and_a_callable():
    """--replan needs WORKFLOW=module:attribute, a callable, and a workflow given with --workflow."""
    shape = CliRunner().invoke(app, ["serve", "--replan", "failing"])
    assert shape.exit_code == 2 and "WORKFLOW=module:attribute" in shape.output
    unknown = CliRunner().invoke(app, ["serve", "--replan", "failing=tests.server.flows:note"])
    assert unknown.exit_code == 2 and "not registered: failing" in unknown.output
