#!/usr/bin/env python
"""The storage engine at this checkout against a base revision: ``bench_stores.py`` and
``bench_runtime.py`` on each side's code, run in turn round by round.

    .venv/bin/python benchmarks/compare_commits.py BASE_REV                  # 3 rounds, quick modes
    .venv/bin/python benchmarks/compare_commits.py BASE_REV --quick          # 1 round, sqlite only
    .venv/bin/python benchmarks/compare_commits.py BASE_REV [--rounds 3] [--backends memory,sqlite]
        [--runtime-backends sqlite] [--full] [--own-scripts] [--skip-runtime] [--skip-stores]

Makes a temporary ``git worktree`` of BASE_REV, then runs this checkout's copy of the
benchmark scripts with this repository's ``.venv`` and ``PYTHONPATH`` at each side's ``src``
(the same seeded corpus data and settings on both sides), alternating the sides round by
round (base first in odd rounds, HEAD first in even ones) so that a loaded host's drift hits
both alike. A base whose API today's scripts no longer fit takes ``--own-scripts``: each side
runs its own copy (then the data and the quick settings may differ too: a base from before
the corpus data measures its own chats). Each figure is a ratio the script measured against
its own floor in the same process (a load / its floor, a runner step / a raw commit), or a
stored-bytes ratio, so the two sides are compared on what each measured in the same minute.

Quick modes measure little: against a base whose ``src`` is the same as HEAD's (an A/A run,
e.g. ``compare_commits.py HEAD``), quick rounds on a busy 2-core host put figures anywhere
from 0.2x to 3x. Run the A/A first to see the host's spread, and read several full rounds.

Target, per figure and round: HEAD / base <= 1.10 (HEAD no more than 10% worse than the
base; a figure where lower is better). Met when it holds in two thirds of the rounds.
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

from harness import Report

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"
GOAL = 1.10


def _run(side: Path, script: str, args: list[str], env: dict[str, str] | None = None) -> str:
    """``script`` with ``side``'s ``src`` on the path: HEAD's copy of the script (the same data
    and settings on both sides), or the side's own with ``--own-scripts``."""
    bench = side / "benchmarks" if OWN_SCRIPTS else ROOT / "benchmarks"
    path = bench / script
    if not path.exists():
        return ""
    if "--runs" in path.read_text():  # a script on the harness: one run per round is enough
        args = [*args, "--runs", "1"]
    environ = {**os.environ, "PYTHONPATH": f"{side / 'src'}{os.pathsep}{bench}", **(env or {})}
    out = subprocess.run(
        [str(PYTHON), str(path), *args], cwd=side, env=environ, capture_output=True, text=True, check=False
    )
    if out.returncode:
        sys.stderr.write(f"{script} failed on {side.name}:\n{out.stderr[-2000:]}\n")
        if not OWN_SCRIPTS:
            sys.stderr.write("(the base may lack an API HEAD's script uses: try --own-scripts)\n")
    return out.stdout


OWN_SCRIPTS = False


def _stores(side: Path, backends: str, full: bool, tmp: Path, tag: str) -> dict[str, float]:
    path = tmp / f"{tag}.json"
    args = ["--backends", backends, "--no-langgraph", "--json", str(path)]
    if not full:
        args.append("--quick")
    _run(side, "bench_stores.py", args)
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    runs = data.get("runs") or [data]  # before the harness: one run, its backends at the top
    per_run = [_store_figures(r["backends"]) for r in runs]
    return {k: statistics.median(f[k] for f in per_run if k in f) for k in per_run[0]}


def _store_figures(backends: dict[str, Any]) -> dict[str, float]:
    figures: dict[str, float] = {}
    for name, b in backends.items():
        for size, row in (b.get("latency") or {}).items():
            for op in ("save", "load"):
                figures[f"{name} {size} {op} / floor"] = _med(row["tether"][op]) / _med(row["floor"][op])
        app = b.get("append") or {}
        if app:
            figures[f"{name} append step / floor"] = _med(app["tether"]["step"]) / _med(app["floor_step"])
            figures[f"{name} load after appends / floor"] = _med(app["tether"]["load_after"]) / _med(
                app["floor_load_after"]
            )
        for section in ("growth", "small"):
            g = b.get(section) or {}
            if g and "tether" in g:
                figures[f"{name} {section} load final / floor"] = _med(g["tether"]["load_final"]) / _med(
                    g["floor_load_final"]
                )
                figures[f"{name} {section} stored / state"] = float(g["tether"]["ratio"])
    return figures


def _med(entry: dict[str, Any]) -> float:
    return float(entry["median_ms"])


_STEP = re.compile(r"^(\S+)\s+raw commit\s+([\d.]+) ms\s+runner step\s+([\d.]+) ms\s+ratio\s+([\d.]+)x")
_RESUME = re.compile(r"load latest\s+([\d.]+) ms resume .*?\)\s+([\d.]+) ms\s+ratio\s+([\d.]+)x")


def _runtime(side: Path, backends: str, full: bool, tmp: Path, tag: str) -> dict[str, float]:
    args = ["--backends", backends]
    if not full:
        args += ["--steps", "100", "--resume-steps", "200", "--size-mb", "2"]
    path = tmp / f"{tag}-runtime.json"
    stdout = _run(side, "bench_runtime.py", args, env={"TETHER_BENCH_JSON": str(path)})
    figures: dict[str, float] = {}
    if path.exists():  # a script on the harness: its targets are the figures
        for t in json.loads(path.read_text())["targets"]:
            figures[f"runtime {t['name']}"] = statistics.median(t["values"])
        return figures
    name = "?"
    for line in stdout.splitlines():  # the own format of a base from before the harness
        if m := _STEP.match(line):
            name = m.group(1)
            figures[f"runtime {name}: runner step / raw commit"] = float(m.group(4))
        elif m := _RESUME.search(line):
            figures[f"runtime {name}: resume / load"] = float(m.group(3))
    return figures


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base")
    p.add_argument("--rounds", type=int, default=0, help="rounds (default 3; 1 with --quick)")
    p.add_argument(
        "--backends", default="", help="bench_stores backends (default memory,sqlite; quick sqlite)"
    )
    p.add_argument("--runtime-backends", default="sqlite", help="bench_runtime backends (no memory there)")
    p.add_argument("--full", action="store_true", help="full benchmark modes (default: quick ones)")
    p.add_argument("--quick", action="store_true", help="one round on sqlite: checks the script works")
    p.add_argument(
        "--own-scripts",
        action="store_true",
        help="run each side's own copy of the scripts (for a base whose API HEAD's scripts do not fit)",
    )
    p.add_argument("--skip-runtime", action="store_true")
    p.add_argument("--skip-stores", action="store_true")
    args = p.parse_args()
    global OWN_SCRIPTS
    OWN_SCRIPTS = args.own_scripts
    backends = args.backends or ("sqlite" if args.quick else "memory,sqlite")
    rep = Report(
        "compare_commits", f"the storage engine at HEAD against {args.base} (each side's own scripts)"
    )
    with tempfile.TemporaryDirectory(prefix="tether-compare-") as tmp_name:
        tmp = Path(tmp_name)
        base = tmp / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(base), args.base],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        try:
            for r in rep.runs(args.rounds or (1 if args.quick else 3)):
                results: dict[str, dict[str, float]] = {}
                order = [("base", base), ("HEAD", ROOT)]
                for tag, side in order if r % 2 else order[::-1]:
                    print(f"  ({tag} running)", flush=True)
                    figures: dict[str, float] = {}
                    if not args.skip_stores:
                        figures |= _stores(side, backends, args.full, tmp, f"{tag}{r}")
                    if not args.skip_runtime:
                        figures |= _runtime(side, args.runtime_backends, args.full, tmp, f"{tag}{r}")
                    results[tag] = figures
                report_round(rep, results["base"], results["HEAD"])
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base)],
                cwd=ROOT,
                check=False,
                capture_output=True,
            )
    return rep.finish()


def report_round(rep: Report, base: dict[str, float], head: dict[str, float]) -> None:
    only = sorted(set(base) ^ set(head))
    if only:
        rep.line("figures only one side printed (not compared)", len(only), note=", ".join(only)[:200])
    for key in sorted(set(base) & set(head)):
        b, h = base[key], head[key]
        rep.line(f"{key}: base", b, "x")
        rep.line(f"{key}: HEAD", h, "x")
        rep.target(f"{key}: HEAD / base", h / b if b else float("nan"), goal=GOAL)


if __name__ == "__main__":
    sys.exit(main())
