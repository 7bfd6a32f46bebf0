"""Orchestrator measurements: MAIN prompt size by level, summary extraction, cache, overhead.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_orchestrator.py [--quick] [--iterations 30] [--stages 60]

1. MAIN's prompt at each of ``--iterations`` iterations of a simulated run (TEST, DEV and
   REVIEW reports of realistic size each iteration, a growing project_history with
   milestones), built at level 1, level 2 (the default) and level 3 (full injection: every
   latest report whole and the whole history, the baseline).
2. Batch summary extraction of every report the run wrote, cold (no cache) and warm.
3. The summary cache hit rate over the simulated run (MAIN reads the latest reports
   every iteration; each is extracted once).
4. Orchestration overhead per stage (goal <= 20 ms, checkpoint included): real
   Orchestrator runs on SQLite whose roles and MAIN answer at once with reports of
   realistic size, interleaved round by round with plain routed Runner steps returning an
   update of the same size on the same store (the floor: the checkpoint alone).
5. MAIN calls saved by the TEST->DEV sub-loop on the end-to-end demo flows (the sample
   project's real bug, pytest really run): one fix, and a wrong fix then the right one;
   sub-loop on vs off.

The header and footer print the load average and a CPU noise probe; the targets are MET
when they hold in two runs of three (one run with --quick).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import Report, ainterleave, median

from tether.orchestrator import (
    Blackboard,
    MainDecision,
    Orchestrator,
    OrchestratorConfig,
    PromptConfig,
    RoleOutput,
    ScriptedMain,
    ScriptedRunner,
    SummaryStore,
)
from tether.orchestrator.history import add_history, render_history
from tether.orchestrator.prompts import build_main_prompt
from tether.runtime import Runner, Step, StepContext, Workflow
from tether.stores import create_store, open_store


def test_report(it: int) -> str:
    verdict = "PASS" if it % 4 == 0 else "FAIL"
    lines = [f"tests/test_mod{j}.py::test_case_{k} PASSED" for j in range(10) for k in range(12)]
    fails = (
        []
        if verdict == "PASS"
        else [f"FAILED tests/test_mod3.py::test_case_{it % 7} - assert {it} == {it + 1}"]
    )
    return (
        f"iteration: {it}\n结论：{verdict}\n阻塞：{'无' if not fails else fails[0][7:]}\n命令：python -m pytest -q\n\n"
        "## 失败用例\n"
        + ("\n".join(f"- {f[7:]}" for f in fails) or "- none")
        + "\n\ncoverage: 84%\n\n## 证据\n```\n"
        + "\n".join(lines + fails)
        + "\n```\n"
    )


def dev_report(it: int) -> str:
    diff = "\n".join(f"+    line {k} of the change in iteration {it}" for k in range(60))
    return (
        f"iteration: {it}\n结论：PASS\n阻塞：无\n\n## 关键变更\n- fixed case {it % 7}\n\n## 修改文件\n- src/mod3.py\n\n"
        f"自测：pytest tests/test_mod3.py ok\n\n## diff\n```\n{diff}\n```\n"
    )


def review_report(it: int) -> str:
    notes = "\n".join(f"- checked path {k}: consistent with the task" for k in range(30))
    return (
        f"iteration: {it}\n结论：PASS\n阻塞：无\n\n## 证据来源\n- src/mod3.py\n- report_test.md\n\n"
        f"验证方式：re-ran the failing case\n\n## notes\n{notes}\n"
    )


def simulate(workdir: Path, iterations: int) -> dict[str, Any]:
    board = Blackboard(workdir)
    store = SummaryStore(board)
    config = PromptConfig(max_prompt_bytes=10_000_000, history_max_tokens=6_000)
    state: dict[str, Any] = {"task": "make the suite pass " * 5, "dev_plan": [], "latest": {}}
    history: dict[str, dict[str, Any]] = {}
    sizes: dict[int, list[int]] = {1: [], 2: [], 3: []}
    files: list[tuple[Path, str, int]] = []
    for it in range(1, iterations + 1):
        state["iteration"] = it
        state["dev_plan"] = [
            {"id": f"t{k}", "title": f"task {k}", "status": "DONE" if k < it // 3 else "TODO"}
            for k in range(12)
        ]
        role, maker = [("TEST", test_report), ("DEV", dev_report), ("REVIEW", review_report)][it % 3]
        path = board.write(f"reports/report_{role.lower()}_{it}.md", maker(it))
        files.append((path, role, it))
        state["latest"][role] = {"iteration": it, "path": board.relative(path)}
        milestone = "first TEST PASS" if it == 4 else ("FINISH attempt #1" if it == 20 else "")
        lines = [f"next_agent: {role}", f"reason: iteration {it} " + "because " * 20, "dev_plan: 12 tasks"]
        lines += [f"{role}: verdict noted, details line {k}" for k in range(6)]
        history = add_history(history, it, role, lines, milestone)
        board.write("project_history.md", render_history(history))
        for level in (1, 2, 3):
            prompt, _ = build_main_prompt(store, state, config, level=level)
            sizes[level].append(len(prompt.encode()))
    return {
        "sizes": sizes,
        "files": files,
        "hit_rate": store.hit_rate,
        "hits": store.hits,
        "misses": store.misses,
    }


def extraction(workdir: Path, files: list[tuple[Path, str, int]]) -> tuple[float, float]:
    cache = workdir / ".tether/cache/report_summaries.json"
    cache.unlink(missing_ok=True)
    cold_store = SummaryStore(Blackboard(workdir))
    began = time.perf_counter()
    cold_store.batch(files)
    cold = time.perf_counter() - began
    cold_store.flush()
    warm_store = SummaryStore(Blackboard(workdir))  # a restarted orchestrator: the cache on disk
    began = time.perf_counter()
    warm_store.batch(files)
    return cold, time.perf_counter() - began


ROLE_REPORTS = {
    "TEST": test_report,
    "DEV": dev_report,
    "REVIEW": review_report,
    "FINISH_REVIEW": review_report,
}


def _orchestrator(workdir: Path, store: Any, stages: int) -> Orchestrator:
    """MAIN and roles that answer at once with reports of realistic size (TEST ~5 KB with its
    pytest output, DEV's diff, REVIEW's notes): what is left is the orchestrator's own work."""

    def role(request: Any) -> RoleOutput:
        text = ROLE_REPORTS[request.role](request.iteration)
        return RoleOutput(report=text.replace("结论：FAIL", "结论：PASS"))  # no sub-loop: one stage each

    order = ["TEST", "DEV", "REVIEW"]

    def main(req: Any) -> MainDecision:
        if req.mode == "finish_check":
            return MainDecision(next_agent="FINISH", reason="done")
        if req.iteration * 2 >= stages:
            return MainDecision(next_agent="FINISH", reason="enough")
        plan = [{"id": f"t{req.iteration}", "title": f"task {req.iteration}", "status": "DONE"}]
        return MainDecision(next_agent=order[req.iteration % 3], reason="next", dev_plan=plan)

    runners = ScriptedRunner(dict.fromkeys([*order, "FINISH_REVIEW"], role))
    config = OrchestratorConfig(max_iterations=stages, subloop=False)
    return Orchestrator(workdir, store, main=ScriptedMain(main), runners=runners, config=config)


def _plain(n: int) -> Workflow:
    """A plain routed step returning an update of the size a stage returns (the floor)."""
    note = review_report(1)[:600]

    def plain(sc: StepContext) -> dict[str, Any]:
        k = int(sc.get("n", 0)) + 1
        if k < n:
            sc.goto("s")
        return {"n": k, "note": f"step {k} {note}", "stage_changes": [f"step {k}"]}

    return Workflow([Step(id="s", fn=plain)], max_routed=100_000)


async def overhead(workdir: Path, stages: int) -> tuple[float, float, int, float]:
    """Per-stage wall time of a real orchestration with instant roles (checkpoint included),
    of a plain routed step on the same store, the stage count, and the orchestrator's own
    code per stage (files included, checkpoint and the roles' calls excluded)."""
    store = create_store(f"sqlite:///{workdir}/bench.db")
    await store.setup()
    orch = _orchestrator(workdir / "orch", store, stages)
    began = time.perf_counter()
    result = await orch.start(f"bench-orch-{time.time_ns()}", "benchmark")
    total = time.perf_counter() - began
    n = len(result.state["execution_history"])
    began = time.perf_counter()
    await Runner(_plain(n), store).start(f"bench-plain-{time.time_ns()}")
    base = time.perf_counter() - began
    await store.aclose()
    return total / n, base / n, n, statistics.mean(orch.overhead)


async def overhead_interleaved(rep: Report, workdir: Path, stages: int, rounds: int) -> None:
    """Orchestrations and plain runs of the same length, in turn within each round."""
    store = create_store(f"sqlite:///{workdir}/bench-il.db")
    await store.setup()
    counts: dict[str, int] = {}
    own: list[float] = []

    async def orchestration() -> None:
        board = workdir / f"orch-{time.time_ns()}"
        board.mkdir()
        orch = _orchestrator(board, store, stages)
        result = await orch.start(f"il-orch-{time.time_ns()}", "benchmark")
        counts["n"] = len(result.state["execution_history"])
        own.append(statistics.mean(orch.overhead))

    async def plain() -> None:
        await Runner(_plain(counts.get("n", stages)), store).start(f"il-plain-{time.time_ns()}")

    times = await ainterleave({"orchestration": orchestration, "plain": plain}, rounds=rounds)
    await store.aclose()
    n = counts["n"]
    stage, floor = median(times["orchestration"]) / n, median(times["plain"]) / n
    rep.line("plain routed step with its checkpoint (the floor)", floor * 1e3, "ms", note=f"{n} steps a run")
    rep.line("orchestrator's own code per stage (no checkpoint)", median(own) * 1e3, "ms")
    rep.line("orchestrator stage / plain step", stage / floor, "x")
    rep.target("orchestrator stage with its checkpoint", stage * 1e3, goal=20, op="<=", unit="ms")


async def main_calls_saved(rep: Report, root: Path) -> None:
    """MAIN decisions (MAIN rounds and FINISH_CHECK) on the end-to-end demo flows with the
    sub-loop on and off: the sample project with its real bug and real pytest runs."""
    from tether.orchestrator import demo as d

    wrong = ("stats.py", "    return ordered[mid]\n", "    return ordered[mid - 1]\n")
    right = ("stats.py", "    return ordered[mid - 1]\n", d.BUG_FIX[2])
    flows = {"one fix": (d.BUG_FIX,), "a wrong fix, then the right one": (wrong, right)}
    saved_all = 0
    for name, fixes in flows.items():
        calls = {}
        for subloop in (True, False):
            tag = f"{name.split()[0]}-{subloop}-{time.time_ns()}"
            work = d.make_sample_repo(root / tag)
            async with open_store(f"sqlite:///{root}/{tag}.db") as store:
                orch = Orchestrator(
                    work,
                    store,
                    main=ScriptedMain(d.rule_main),
                    runners=d.demo_runners(fixes),
                    config=OrchestratorConfig(subloop=subloop),
                )
                result = await orch.start(tag, "make the suite pass")
            calls[subloop] = int(result.state.get("main_replies") or 0)
            rep.line(
                f"{name}: MAIN calls, sub-loop {'on' if subloop else 'off'}",
                calls[subloop],
                note=f"{result.status}, {len(result.state['execution_history'])} stages",
            )
        saved_all += calls[False] - calls[True]
        rep.line(f"{name}: MAIN calls saved by the sub-loop", calls[False] - calls[True])
    rep.target("MAIN calls saved by the sub-loop (all flows)", saved_all, goal=1, op=">=", unit="calls")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--stages", type=int, default=60, help="stages per orchestration run")
    parser.add_argument("--quick", action="store_true", help="1 run, 3 rounds of 30 stages")
    args = parser.parse_args()
    logging.getLogger("tether.orchestrator").setLevel(logging.ERROR)  # the flows' stall notes
    stages, rounds, runs = (30, 3, 1) if args.quick else (args.stages, 5, 3)
    rep = Report(
        "bench_orchestrator", "MAIN prompt by level, summaries, overhead per stage, sub-loop savings"
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "sim").mkdir()
        rep.section(f"MAIN prompt bytes over {args.iterations} iterations (level 3 = full injection)")
        sim = simulate(root / "sim", args.iterations)
        s1, s2, s3 = (statistics.mean(sim["sizes"][k]) for k in (1, 2, 3))
        rep.line("MAIN prompt, level 1 (mean)", s1, "bytes")
        rep.line("MAIN prompt, level 2 (mean, the default)", s2, "bytes")
        rep.line("MAIN prompt, level 3 (mean, full injection)", s3, "bytes")
        rep.line("level 2 / level 3", s2 / s3, "x")
        cold, warm = extraction(root / "sim", sim["files"])
        rep.line(f"batch extraction of {len(sim['files'])} reports, cold", cold * 1e3, "ms")
        rep.line("batch extraction, warm (cache on disk)", warm * 1e3, "ms")
        rep.line("summary cache hit rate over the run", sim["hit_rate"], note=f"{sim['hits']} hits")
        for i in rep.runs(runs):
            run = root / f"run{i}"
            run.mkdir()
            rep.section(f"overhead per stage ({stages} stages a run, {rounds} interleaved rounds, SQLite)")
            asyncio.run(overhead_interleaved(rep, run, stages, rounds))
            rep.section("MAIN calls saved by the TEST->DEV sub-loop (end-to-end demo flows)")
            asyncio.run(main_calls_saved(rep, run))
    return rep.finish()


if __name__ == "__main__":
    raise SystemExit(main())
