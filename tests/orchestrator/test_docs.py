"""docs/orchestrator.md: its Python snippet is the example, and the example runs as shown."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_documented_example_runs_and_prints_what_the_page_says():
    page = (ROOT / "docs" / "orchestrator.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    example = (ROOT / "examples" / "orchestrator_demo.py").read_text()
    assert snippet == example
    out = subprocess.run(
        [sys.executable, "-c", snippet], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "COMPLETED {'success': True, 'final_test_verdict': 'PASS', 'iterations': 1}",
        "结论：PASS",
    ]
