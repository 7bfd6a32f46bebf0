"""Stuck detection and the orchestrator's sub-loop, measured on real agent loops.

    PYTHONPATH=src:/work/main/benchmarks .venv/bin/python benchmarks/bench_stuck.py [--quick]

1. Detection: for each stuck pattern (repeat, cycle of 2 and of 3, the same error after
   different fixes, no progress), a scripted agent loop running real shell commands starts
   healthy for 2 iterations, then gets stuck; measured: the iteration of the first
   detection counted from the loop's start, and how many repeats of the stuck unit it took
   (goal <= 3).
2. False positives: ``--runs`` healthy scripted runs of 16 iterations (failures fixed,
   polling, edit/test loops, an error seen twice, files written); goal 0 detections.
3. MAIN calls saved by the TEST->DEV sub-loop on the offline demo flow (sub-loop on vs off).
4. Orchestrator overhead per stage with its checkpoint (instant roles and MAIN, SQLite),
   goal <= 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import Report

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.agent.stuck_runs import healthy_run, stuck_run  # noqa: E402
from tether.agent import AgentLoop, LoopConfig  # noqa: E402
from tether.models import ScriptedModel  # noqa: E402
from tether.stores import open_store  # noqa: E402
from tether.tools import LocalSession  # noqa: E402

PATTERNS = {
    # pattern: (detector's name, iterations in one repeat of the stuck unit)
    "repeat": ("repeat", 1),
    "cycle2": ("cycle", 2),
    "cycle3": ("cycle", 3),
    "same_error": ("same_error", 2),
    "no_progress": ("no_progress", 4),
}
PREFIX = 2


async def run_loop(store: Any, work: Path, script: list[dict[str, Any]], run_id: str) -> list[Any]:
    events: list[Any] = []
    async with LocalSession(cwd=work) as session:
        loop = AgentLoop(
            ScriptedModel(script),
            session,
            store,
            config=LoopConfig(max_iterations=len(script) + 2),
            on_event=events.append,
        )
        await loop.start(run_id, "get the service running")
    return [e.detail for e in events if e.kind == "stuck_detected"]


async def detection(rep: Report, root: Path) -> None:
    async with open_store(f"sqlite:///{root}/stuck.db") as store:
        for pattern, (name, unit) in PATTERNS.items():
            work = root / pattern
            work.mkdir()
            found = await run_loop(store, work, stuck_run(pattern, prefix=PREFIX, length=18), pattern)
            first = next((f for f in found if f["pattern"] == name), None)
            if first is None:
                rep.line(f"{pattern}: not detected", 0)
                rep.target(f"{pattern} detected within 3 repeats", 99, goal=3, op="<=", unit="repeats")
                continue
            stuck_iterations = first["iteration"] - PREFIX
            repeats = int(first["evidence"].get("times") or 0)  # occurrences of the stuck unit seen
            rep.line(
                f"{pattern}: first detection at iteration", first["iteration"], note="from the loop's start"
            )
            rep.line(f"{pattern}: iterations since it got stuck", stuck_iterations)
            if name == "no_progress":
                rep.line(f"{pattern}: quiet iterations at detection", first["evidence"].get("quiet", 0))
                rep.target(
                    f"{pattern} found after 1 repeat of its 4-step loop",
                    stuck_iterations / unit,
                    goal=3,
                    op="<=",
                    unit="repeats",
                )
            else:
                rep.target(f"{pattern} detected within 3 repeats", repeats, goal=3, op="<=", unit="repeats")


async def false_positives(rep: Report, root: Path, runs: int) -> None:
    flagged = 0
    began = time.perf_counter()
    async with open_store(f"sqlite:///{root}/healthy.db") as store:
        for seed in range(runs):
            work = root / f"h{seed}"
            work.mkdir()
            found = await run_loop(store, work, healthy_run(seed), f"healthy-{seed}")
            flagged += bool(found)
    rep.line("healthy runs", runs, note=f"16 iterations each, {time.perf_counter() - began:.1f} s")
    rep.target("healthy runs flagged", flagged, goal=0, op="<=", unit="runs")


async def main_calls_saved(rep: Report, root: Path) -> None:
    from tether.orchestrator import Orchestrator, OrchestratorConfig, ScriptedMain, ScriptedRunner
    from tether.orchestrator import demo as d

    counts = {}
    for subloop in (True, False):
        work = d.make_sample_repo(root / f"demo-{subloop}")
        roles = {
            "TEST": d.run_tests_role,
            "DEV": d.dev_role(),
            "REVIEW": d.review_role,
            "FINISH_REVIEW": d.finish_review_role,
        }
        async with open_store(f"sqlite:///{root}/demo-{subloop}.db") as store:
            orch = Orchestrator(
                work,
                store,
                main=ScriptedMain(d.rule_main),
                runners=ScriptedRunner(roles),
                config=OrchestratorConfig(subloop=subloop),
            )
            result = await orch.start(f"demo-{subloop}", "make the suite pass")
        counts[subloop] = sum(1 for c in result.state.get("stage_changes") or [] if ": MAIN -> " in c)
        rep.line(
            f"MAIN decisions, sub-loop {'on' if subloop else 'off'}", counts[subloop], note=str(result.status)
        )
    rep.line("MAIN calls saved by the sub-loop", counts[False] - counts[True])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 healthy runs, 1 repetition")
    parser.add_argument("--runs", type=int, default=None, help="healthy runs (default 200; 20 with --quick)")
    args = parser.parse_args()
    runs = args.runs or (20 if args.quick else 200)
    rep = Report("bench_stuck", "stuck detection: iterations to detection, false positives; sub-loop savings")
    for _ in rep.runs(1 if args.quick else 3):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            asyncio.run(detection(rep, root))
            asyncio.run(false_positives(rep, root, runs))
            asyncio.run(main_calls_saved(rep, root))
    try:  # the orchestrator's own overhead per stage, from its benchmark
        from bench_orchestrator import overhead
    except ImportError:
        overhead = None
    if overhead is not None:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "orch").mkdir()
            per_stage, per_plain, n, own = asyncio.run(overhead(Path(tmp), 30 if args.quick else 120))
        rep.line("orchestrator stage with checkpoint", per_stage * 1e3, "ms", note=f"{n} stages")
        rep.line("plain runner step (checkpoint alone)", per_plain * 1e3, "ms")
        rep.target("orchestrator overhead per stage", per_stage * 1e3, goal=20, op="<=", unit="ms")
    return rep.finish()


if __name__ == "__main__":
    raise SystemExit(main())
