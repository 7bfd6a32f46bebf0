"""Every docs snippet runs as written, or says why it cannot.

Every fenced ``python``, ``bash`` or ``sh`` block in README.md or docs/*.md is preceded by
either ``<!-- runnable -->`` or ``<!-- not run: REASON -->`` (an API signature listing, needs a
model API key, ...). A user who copies a block must be able to tell which of the two it is, so
an unmarked block fails the test with its file and line.

A runnable block is run in a fresh temporary directory (python with ``python -c``, bash and sh
with ``bash -e``), with no ``TETHER_*`` variable set, the ``tether`` command on PATH and this
checkout's ``src`` first on PYTHONPATH; it must exit 0 without a traceback. A python block
followed by ``It prints `TEXT` `` must print that first line. The last test prints the count
for the hardening note.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"<!-- runnable -->\n```(python|bash|sh)\n(.*?)```", re.S)
_FENCE = re.compile(r"^\s*```(\S*)\s*$")
_MARK = re.compile(r"^(<!-- runnable -->|<!-- not run: \S.*\S -->)$")
COUNTS = {"run": 0, "passing": 0}


def snippets() -> list[tuple[str, str, str, str]]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for n, m in enumerate(_BLOCK.finditer(text), 1):
            after = text[m.end() : m.end() + 400]
            shown = re.match(r"\s*\n\s*It prints `([^`]+)`", after)
            found.append(
                (f"{page.relative_to(ROOT)}#{n}", m.group(1), m.group(2), shown.group(1) if shown else "")
            )
    return found


SNIPPETS = snippets()


def unmarked_blocks() -> list[str]:
    """``file:line`` of every python/bash/sh fence whose previous line is not a marker."""
    missing = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        inside = False
        for i, line in enumerate(lines):
            fence = _FENCE.match(line)
            if not fence:
                continue
            marked = i > 0 and _MARK.match(lines[i - 1].strip()) is not None
            if not inside and fence.group(1) in ("python", "bash", "sh") and not marked:
                missing.append(f"{page.relative_to(ROOT)}:{i + 1}")
            inside = not inside
    return missing


def test_every_code_block_is_runnable_or_says_why_not() -> None:
    missing = unmarked_blocks()
    assert not missing, (
        "these blocks need <!-- runnable --> (the test runs them) or <!-- not run: REASON --> "
        "on the line above: " + ", ".join(missing)
    )


def test_the_quickstart_and_the_python_example_are_marked_runnable() -> None:
    assert sum(1 for name, *_ in SNIPPETS if name.startswith("README.md")) >= 2


@pytest.mark.slow  # real processes, a kill -9 and a resume
@pytest.mark.parametrize(("name", "lang", "code", "prints"), SNIPPETS, ids=[s[0] for s in SNIPPETS])
def test_snippet_runs_as_written(tmp_path: Path, name: str, lang: str, code: str, prints: str) -> None:
    COUNTS["run"] += 1
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    argv = [sys.executable, "-c", code] if lang == "python" else ["bash", "-e", "-c", code]
    out = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{name} exited {out.returncode}:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    if prints:
        assert out.stdout.splitlines()[0] == prints, out.stdout
    COUNTS["passing"] += 1


def test_zz_snippet_counts(capsys: pytest.CaptureFixture[str]) -> None:
    if not COUNTS["run"]:
        pytest.skip("the snippet tests did not run in this session")
    with capsys.disabled():
        print(f"\ndocs snippets run: {COUNTS['run']}, passing: {COUNTS['passing']}")
    assert COUNTS["run"] == COUNTS["passing"]
