"""The Python snippets of docs/server.md run as written and print what the page says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "server.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_python_snippets_run_and_print_what_the_page_shows(tmp_path: Path):
    """The in-process example prints the output block that follows it; the tracing one runs."""
    text = DOC.read_text()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    for code in blocks("python"):
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        after = text[text.index(code) + len(code) :]
        shown = re.match(r"```\n\nIt prints:\n\n```text\n(.*?)```", after, flags=re.S)
        if shown:
            assert out.stdout == shown.group(1)


def test_new_token_snippet_prints_the_documented_lines(tmp_path: Path):
    """`tether serve --new-token …` prints a token line and a hashed entry as shown."""
    (cmd,) = [b.strip() for b in blocks("bash") if "--new-token" in b]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    args = cmd.split()[1:]
    out = subprocess.run(
        [sys.executable, "-m", "tether.cli.app", *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("token (give it to the client; it is not stored): tth_")
    assert re.fullmatch(
        r"entry \(add it to the token file or TETHER_API_TOKENS\): sha256:[0-9a-f]{64} scope=operate namespace=team-a",
        lines[1],
    )
