"""Running a script of ``benchmarks/`` as its README says, for the tests that check one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def run_bench(name: str, *args: str, timeout: float = 240, tmp: Path | None = None) -> str:
    """What ``benchmarks/<name>`` prints run with ``PYTHONPATH=src:benchmarks`` (temporary
    files under ``tmp`` when given); the script must exit 0."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{BENCH}"}
    env.pop("TETHER_BENCH_JSON", None)
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    done = subprocess.run(
        [sys.executable, str(BENCH / name), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
