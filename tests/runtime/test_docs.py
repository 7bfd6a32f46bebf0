"""docs/runtime.md: the interruption example runs as written and prints what the page says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_interruption_example_prints_what_the_page_says(tmp_path):
    page = (ROOT / "docs" / "runtime.md").read_text()
    section = page.split("## Every exit leaves the run consistent", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    promised = re.search(r"prints `(.*?)`", section).group(1)
    out = subprocess.run(
        [sys.executable, "-c", snippet], capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == promised
