"""While the model is asked, a terminal shows a spinner with the seconds elapsed; piped
output (scripts) never gets it. A real `tether deploy` on a pseudo-terminal."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path


def _deploy(tmp_path: Path, *, terminal: bool) -> str:
    app = tmp_path / "app"
    app.mkdir(parents=True)
    script = tmp_path / "s.json"
    script.write_text(
        json.dumps([{"action": "execute", "command": "echo hi"}, {"action": "done", "message": "ok"}])
    )
    argv = [sys.executable, "-m", "tether.cli.app", "deploy", str(app), "--script", str(script)]
    argv += ["--store", f"sqlite:///{tmp_path}/a.db", "--log-dir", str(tmp_path / "logs"), "--safety", "ask"]
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm-256color"}
    if not terminal:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    out = b""
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        assert proc.wait(timeout=30) == 0, out.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    return out.decode(errors="replace")


def test_a_terminal_sees_the_model_wait_and_a_pipe_does_not(tmp_path):
    shown = _deploy(tmp_path / "tty", terminal=True)
    assert "waiting for the model" in shown and "COMPLETED" in shown
    piped = _deploy(tmp_path / "pipe", terminal=False)
    assert "waiting for the model" not in piped and "COMPLETED" in piped and "$ echo hi" in piped
