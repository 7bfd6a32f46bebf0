#!/usr/bin/env python
"""Compare bench_stores.py and bench_runtime.py between a base revision and this checkout.

    .venv/bin/python benchmarks/compare_commits.py BASE_REV [--rounds 3] [--backends memory,sqlite]
                                                   [--full] [--skip-runtime] [--skip-stores]

Makes a temporary ``git worktree`` of BASE_REV, then runs each side's own benchmark scripts
with this repository's ``.venv`` and ``PYTHONPATH`` at that side's ``src``, alternating the
sides round by round (base first in odd rounds, HEAD first in even ones) so that a loaded
host's drift hits both alike. Prints each figure (a ratio to the floor measured in the same
process, or a runtime ratio) as the median over rounds for both sides, and HEAD / base.
A ratio within 0.90-1.10 is "same".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"


def _run(side: Path, script: str, args: list[str]) -> str:
    env = {**os.environ, "PYTHONPATH": str(side / "src")}
    out = subprocess.run(
        [str(PYTHON), str(side / "benchmarks" / script), *args],
        cwd=side,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        sys.stderr.write(out.stderr[-2000:])
    return out.stdout


def _stores(side: Path, backends: str, full: bool, tmp: Path, tag: str) -> dict[str, float]:
    path = tmp / f"{tag}.json"
    args = ["--backends", backends, "--no-langgraph", "--json", str(path)]
    if not full:
        args.append("--quick")
    _run(side, "bench_stores.py", args)
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    figures: dict[str, float] = {}
    for name, b in data["backends"].items():
        for size, row in (b.get("latency") or {}).items():
            for op in ("save", "load"):
                figures[f"{name} {size} {op} /floor"] = _med(row["tether"][op]) / _med(row["floor"][op])
        app = b.get("append") or {}
        if app:
            figures[f"{name} append step /floor"] = _med(app["tether"]["step"]) / _med(app["floor_step"])
            figures[f"{name} load after appends /floor"] = _med(app["tether"]["load_after"]) / _med(
                app["floor_load_after"]
            )
        for section in ("growth", "small"):
            g = b.get(section) or {}
            if g:
                figures[f"{name} {section} step ms"] = _med(g["tether"]["step"])
                figures[f"{name} {section} load final /floor"] = _med(g["tether"]["load_final"]) / _med(
                    g["floor_load_final"]
                )
                figures[f"{name} {section} stored/state"] = float(g["tether"]["ratio"])
    return figures


def _med(entry: dict[str, Any]) -> float:
    return float(entry["median_ms"])


_STEP = re.compile(r"^(\S+)\s+raw commit\s+([\d.]+) ms\s+runner step\s+([\d.]+) ms\s+ratio\s+([\d.]+)x")
_RESUME = re.compile(r"load latest\s+([\d.]+) ms resume .*?\)\s+([\d.]+) ms\s+ratio\s+([\d.]+)x")


def _runtime(side: Path, backends: str, full: bool) -> dict[str, float]:
    args = ["--backends", backends]
    if not full:
        args += ["--steps", "100", "--resume-steps", "200", "--size-mb", "2"]
    figures: dict[str, float] = {}
    name = "?"
    for line in _run(side, "bench_runtime.py", args).splitlines():
        if m := _STEP.match(line):
            name = m.group(1)
            figures[f"runtime {name} runner step / raw commit"] = float(m.group(4))
        elif m := _RESUME.search(line):
            figures[f"runtime {name} resume / load"] = float(m.group(3))
    return figures


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--backends", default="memory,sqlite", help="bench_stores backends")
    p.add_argument("--runtime-backends", default="sqlite", help="bench_runtime backends (no memory there)")
    p.add_argument("--full", action="store_true", help="full benchmark modes (default: quick ones)")
    p.add_argument("--skip-runtime", action="store_true")
    p.add_argument("--skip-stores", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-compare-") as tmp_name:
        tmp = Path(tmp_name)
        base = tmp / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.base], cwd=ROOT, check=True)
        try:
            results: dict[str, dict[str, list[float]]] = {"base": {}, "head": {}}
            for r in range(args.rounds):
                order = [("base", base), ("head", ROOT)]
                if r % 2:
                    order.reverse()
                for tag, side in order:
                    print(f"round {r + 1}/{args.rounds}: {tag}", file=sys.stderr, flush=True)
                    figures: dict[str, float] = {}
                    if not args.skip_stores:
                        figures |= _stores(side, args.backends, args.full, tmp, f"{tag}{r}")
                    if not args.skip_runtime:
                        figures |= _runtime(side, args.runtime_backends, args.full)
                    for key, value in figures.items():
                        results[tag].setdefault(key, []).append(value)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)
    print(f"# {args.base} vs HEAD, {args.rounds} interleaved rounds, medians; loadavg {os.getloadavg()}")
    print(f"{'figure':<48} {'base':>9} {'HEAD':>9} {'HEAD/base':>10}")
    worst = 1.0
    for key in sorted(set(results["base"]) & set(results["head"])):
        b, h = statistics.median(results["base"][key]), statistics.median(results["head"][key])
        ratio = h / b if b else float("nan")
        flag = "" if 0.9 <= ratio <= 1.1 else ("  faster" if ratio < 0.9 else "  SLOWER")
        worst = max(worst, ratio)
        print(f"{key:<48} {b:9.3f} {h:9.3f} {ratio:9.2f}x{flag}")
    print(f"worst HEAD/base: {worst:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
