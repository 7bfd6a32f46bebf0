"""Bytes a plan stores per step: the plan as it runs by default (a step stores its outputs
once, in its ``plan_steps`` entry; the rolling summary is stored when the plan ends) against
``fresh_summary=True`` (each step also folds its outputs into the stored summary, the shape
plans had before: the baseline, run in the same process on the same kind of store).

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_plan_summary.py            # 60 steps, 3 runs
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_plan_summary.py --quick    # 30 steps, 1 run

A ``--steps`` plan (no model) runs twice on SQLite through ``PlanOrchestrator.start`` (as
``tether plan`` runs it), each step handing on seeded outputs of realistic shape
(``corpus.py``): a prose summary, ``--keys`` installed packages with versions, a
configuration value (fifteen names, so later steps overwrite earlier ones), an artefact path
and a resolved issue with its resolution in prose. Once as plans run by default, once with
``fresh_summary=True``. The agent's own nested runs (one per step) are not part of it: a
custom step executor stands for them.

Printed: the plan's bytes in a step's delta (the ``plan_steps`` and ``execution_summary``
ops, msgpack) at a few steps and summed, for both; the bytes each run stored in all (the
payloads of every version in its history) against its final state's packed size and the
SQLite file; and the time to load each finished run, interleaved with its floor (decoding
the final state's msgpack bytes).

Sizes are exact and the same on every host; only the load times depend on it. Targets (the
bounds ``bench_storage.py`` sets for orchestration and agent runs, which are stored as deltas
too): the plan's run stores <= 1.3x its final state, and its SQLite file is <= 2.5x. The
baseline stores each step's outputs twice (its entry and the summary's fold) and every line
that rolls out of the summary's capped lists.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import ormsgpack
from harness import Report, ainterleave, corpus

from tether.agent.plan import PlanOrchestrator, PlanStep, StepContext, StepResult
from tether.context.summaries import StepOutputs
from tether.stores import open_store

SEED = 34
CONFIG_NAMES = tuple(
    "_".join(corpus.words(random.Random(f"config-{i}"), 2).split()).upper() for i in range(15)
)


def outputs(step_id: object, keys: int) -> StepOutputs:
    """Step ``step_id``'s outputs, seeded by its id: both runs hand on the same bytes."""
    rng = random.Random(f"{SEED}-{step_id}")

    def name() -> str:
        return "-".join(corpus.words(rng, 2).split())

    return StepOutputs(
        summary=corpus.prose(rng, rng.randint(80, 240)),
        environment_changes={
            name(): f"{rng.randint(0, 9)}.{rng.randint(0, 40)}.{rng.randint(0, 20)}" for _ in range(keys)
        },
        new_configurations={rng.choice(CONFIG_NAMES): rng.choice((str(rng.randint(1024, 65535)), name()))},
        artifacts=(f"/srv/app/{name()}/step-{step_id}.yaml",),
        issues_resolved=(
            {
                "issue": corpus.prose(rng, rng.randint(50, 140)),
                "resolution": corpus.prose(rng, rng.randint(60, 200)),
            },
        ),
    )


def why(cp: Any) -> Any:
    from tether.state.reserved import runtime_get

    return runtime_get(cp.state, "pause_reason") if cp is not None else None


async def run(steps: int, keys: int, *, fresh: bool, path: Path) -> dict[str, Any]:
    """One plan: the plan's bytes in each step's delta, what the run stored, its final state."""

    async def execute(ctx: StepContext) -> StepResult:
        return StepResult.succeeded(structured_outputs=outputs(ctx.step_id, keys))

    plan_steps = [
        PlanStep(name=f"Step {i}", goal=corpus.prose(random.Random(f"goal-{i}"), 80), category="setup")
        for i in range(1, steps + 1)
    ]
    per_step: list[int] = []
    run_id = f"bench-{'fresh' if fresh else 'plan'}"
    async with open_store(f"sqlite:///{path}") as store:
        commit = store.commit

        async def measured(ctx: Any, **kw: Any) -> int:  # the plan's ops in each step's delta
            ops = [op for op in ctx.pending().ops if op[0] in ("plan_steps", "execution_summary")]
            if ops and not ctx.pending().full:
                per_step.append(len(ormsgpack.packb(ops)))
            version: int = await commit(ctx, **kw)
            return version

        store.commit = measured  # type: ignore[method-assign]
        plan = PlanOrchestrator(
            store=store,
            steps=plan_steps,
            step_executor=execute,
            project_name="bench",
            log_dir=None,
            fresh_summary=fresh,
        )
        await plan.start(run_id)
        stored, before = 0, None
        while page := await store.history(run_id, before=before, limit=1000):
            stored += sum(h.size for h in page)
            before = page[-1].version
        cp = await store.load(run_id)
        assert cp is not None and str(cp.status) == "COMPLETED", (
            f"the plan ended {cp and cp.status}: {why(cp)}"
        )
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    file_bytes = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    return {"per_step": per_step, "stored": stored, "final": ormsgpack.packb(cp.state), "file": file_bytes}


async def loads(rep: Report, paths: dict[str, Path], final: bytes, rounds: int) -> None:
    """Load each finished run from a long-lived store, interleaved with decoding its final state."""
    async with (
        open_store(f"sqlite:///{paths['plan']}") as a,
        open_store(f"sqlite:///{paths['fresh']}") as b,
    ):

        async def floor() -> None:
            ormsgpack.unpackb(final)

        times = await ainterleave(
            {
                "load, plan run": lambda: a.load("bench-plan"),
                "load, fresh_summary run (baseline: replays each step's fold)": lambda: b.load("bench-fresh"),
                "floor: decode the final state's msgpack": floor,
            },
            rounds=rounds,
            warmup=2,
        )
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    for name, ms in med.items():
        rep.line(name, ms, "ms", note=f"median of {rounds}")
    rep.line("load, plan run / fresh_summary run", med["load, plan run"]
             / med["load, fresh_summary run (baseline: replays each step's fold)"], "x")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="30 steps, 1 run")
    parser.add_argument("--runs", type=int, default=None, help="repetitions (default 3; 1 with --quick)")
    parser.add_argument("--steps", type=int, default=None, help="plan steps (default 60; 30 with --quick)")
    parser.add_argument("--keys", type=int, default=8, help="environment keys each step adds")
    args = parser.parse_args()
    logging.getLogger("tether").setLevel(logging.ERROR)  # the loop's notes on compression, the summary's size
    steps = args.steps or (30 if args.quick else 60)
    rep = Report(
        "bench_plan_summary", "bytes a plan step stores: its outputs once against the summary folded in too"
    )
    for _ in rep.runs(args.runs or (1 if args.quick else 3)):
        with tempfile.TemporaryDirectory() as tmp:
            paths = {"plan": Path(tmp) / "plan.db", "fresh": Path(tmp) / "fresh.db"}
            delta = asyncio.run(run(steps, args.keys, fresh=False, path=paths["plan"]))
            whole = asyncio.run(run(steps, args.keys, fresh=True, path=paths["fresh"]))
            a, b = delta["per_step"], whole["per_step"]
            rep.section(f"the plan's bytes in a step's delta, {steps} steps, {args.keys} keys a step")
            for i in sorted({0, 9, 29, len(a) - 1} & set(range(min(len(a), len(b))))):
                rep.line(
                    f"step {i + 1}: plan",
                    a[i],
                    "B",
                    note=f"fresh_summary {b[i]:,} B, {b[i] / a[i]:.1f}x",
                )
            rep.line("sum over the plan: plan", sum(a), "B", note=f"fresh_summary {sum(b):,} B, {sum(b) / sum(a):.1f}x")  # fmt: skip
            rep.section("what each run stored in all")
            for label, r in (("plan", delta), ("fresh_summary (baseline)", whole)):
                final = len(r["final"])
                rep.line(
                    f"{label}: stored",
                    r["stored"] / 1e3,
                    "KB",
                    note=f"final state {final / 1e3:.1f} KB packed",
                )
                if label != "plan":
                    rep.line(f"{label}: stored / final state", r["stored"] / final, "x")
                    rep.line(f"{label}: SQLite file / final state", r["file"] / final, "x")
            rep.line("stored, fresh_summary / plan", whole["stored"] / delta["stored"], "x")
            rep.target(
                "plan run: stored bytes / final state", delta["stored"] / len(delta["final"]), goal=1.3
            )
            rep.target("plan run: SQLite file / final state", delta["file"] / len(delta["final"]), goal=2.5)
            rep.section("load the finished run (long-lived store), interleaved with its floor")
            asyncio.run(loads(rep, paths, delta["final"], 10 if args.quick else 30))
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
