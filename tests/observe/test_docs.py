"""docs/observability.md's Python example runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_python_example_runs(tmp_path):
    text = (ROOT / "docs" / "observability.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    script = tmp_path / "example.py"
    script.write_text(code)
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "COMPLETED" in out.stdout and "['call-1', 'result-1', 'instant-checkpoint']" in out.stdout
