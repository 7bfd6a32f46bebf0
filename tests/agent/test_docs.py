"""The agent pages of docs/ run as written: their Python blocks in order as one script,
their console blocks command by command (exit code and the output lines shown)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["deployment-agent.md", "plan-orchestrator.md"]


def blocks(page: str, lang: str) -> list[str]:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    return re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)


@pytest.mark.parametrize("page", PAGES)
def test_the_python_examples_run(page, tmp_path):
    script = tmp_path / "example.py"
    script.write_text("\n\n".join(blocks(page, "python")))
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "COMPLETED" in out.stdout or "succeeded" in out.stdout


@pytest.mark.parametrize("page", PAGES)
def test_the_console_examples_run(page, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    (console,) = blocks(page, "console")
    steps: list[tuple[str, list[str]]] = []
    for line in console.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif line.strip():
            steps[-1][1].append(line.strip())
    assert steps
    for command, expected in steps:
        wanted = re.search(r"# exit (\d+)$", command)
        out = subprocess.run(
            ["bash", "-c", command],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=env,
            check=False,
        )
        flat = " ".join(out.stdout.split())
        assert out.returncode == (int(wanted.group(1)) if wanted else 0), (
            f"{command}\n{out.stdout}{out.stderr}"
        )
        for line in expected:
            assert " ".join(line.split()) in flat, f"{command}: {line!r} not in\n{out.stdout}"
