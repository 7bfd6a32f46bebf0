"""Bytes a plan stores per step: the rolling summary folded in by its reducer (each step's
checkpoint holds that step's outputs) against the summary overwritten whole each step
(the baseline, measured in the same run on the same store).

    .venv/bin/python benchmarks/bench_plan_summary.py [--steps 60] [--keys 8]

Sizes, not times: the numbers do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from typing import Any

import ormsgpack

from tether.agent.plan import PlanOrchestrator, PlanStep, StepContext, StepResult, plan_reducers
from tether.context.summaries import StepOutputs
from tether.runtime import Runner
from tether.stores import open_store


def _whole(old: Any, update: Any) -> Any:
    """The summary reducer as a plain callable: stored as a 'set' of the whole summary."""
    from tether.agent.plan import SUMMARY_REDUCER

    return SUMMARY_REDUCER(old, update)


async def run(steps: int, keys: int, *, replayable: bool, url: str) -> tuple[list[int], int]:
    """(bytes of the summary's ops in each step's delta, bytes stored for the whole run)."""

    async def execute(ctx: StepContext) -> StepResult:
        outputs = StepOutputs(
            summary=f"Step {ctx.step_id} configured the service and checked its health endpoint",
            environment_changes={f"tool_{ctx.step_id}_{k}": f"{k}.{ctx.step_id}.0" for k in range(keys)},
            new_configurations={f"KEY_{ctx.step_id % 15}": f"value-{ctx.step_id}"},
            artifacts=[f"/srv/app/conf/step-{ctx.step_id}.yaml"],
            issues_resolved=[{"issue": f"port clash {ctx.step_id}", "resolution": "moved to the next port"}],
        )
        return StepResult.succeeded(structured_outputs=outputs)

    plan_steps = [PlanStep(name=f"Step {i}", goal=f"goal {i}", category="setup") for i in range(1, steps + 1)]
    per_step: list[int] = []
    async with open_store(url) as store:
        commit = store.commit

        async def measured(ctx: Any, **kw: Any) -> int:
            ops = [op for op in ctx.pending().ops if op[0] == "execution_summary"]
            if ops and not ctx.pending().full:
                per_step.append(len(ormsgpack.packb(ops)))
            version: int = await commit(ctx, **kw)
            return version

        store.commit = measured  # type: ignore[method-assign]
        plan = PlanOrchestrator(
            store=store, steps=plan_steps, step_executor=execute, project_name="bench", log_dir=None
        )
        reducers = plan_reducers()
        if not replayable:
            reducers.register("execution_summary", _whole)
        run_id = f"bench-{'delta' if replayable else 'whole'}"
        await Runner(plan.workflow(), store, reducers=reducers).start(run_id, {"execution_summary": {}})
        history = await store.history(run_id, limit=steps + 10)
        return per_step, sum(h.size for h in history)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--keys", type=int, default=8, help="environment keys each step adds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        delta, delta_total = asyncio.run(
            run(args.steps, args.keys, replayable=True, url=f"sqlite:///{tmp}/a.db")
        )
        whole, whole_total = asyncio.run(
            run(args.steps, args.keys, replayable=False, url=f"sqlite:///{tmp}/b.db")
        )
    print(f"{args.steps} plan steps, {args.keys} environment keys added per step")
    print("bytes of the execution_summary change in a step's checkpoint delta (msgpack):")
    print(f"{'step':>6} {'reducer (delta)':>16} {'whole summary':>14} {'ratio':>7}")
    for i in sorted({0, 9, 29, args.steps - 1} & set(range(min(len(delta), len(whole))))):
        print(f"{i + 1:>6} {delta[i]:>16} {whole[i]:>14} {whole[i] / delta[i]:>6.1f}x")
    print(f"{'sum':>6} {sum(delta):>16} {sum(whole):>14} {sum(whole) / sum(delta):>6.1f}x")
    print(
        f"bytes stored for the whole run (its SQLite checkpoint rows): {delta_total} vs {whole_total} "
        f"({whole_total / delta_total:.1f}x)"
    )


if __name__ == "__main__":
    main()
