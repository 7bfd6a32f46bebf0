"""``tether eval`` on 100 runs of 1,000 operations each, with 2 worker processes
(goal: <= 60 s on 2 cores).

The runs come from a seeded generator (commands with varied output from
``corpus.tool_output``, configuration values, ports and failing commands), in the two
shapes ``tether eval`` reads:

* stored runs: a SQLite store holding each run's context window the way the agent loop
  stores it (``context_meta`` + ``context_log``) plus a prompt record per operation;
* JSONL transcripts in the OpenAI message format, one run per line.

Each is timed end to end through the CLI (``tether eval ... --workers 2 --json``, in a
subprocess, as a user runs it), compressing at the standard and deep levels. The CPU seconds of the command and its
workers are printed too: on a loaded host, CPU / 2 is what the wall time would be on two
free cores.

Run: ``PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_eval.py`` (``--quick``:
20 runs of 1,000 operations, one round; the goal scales with the runs).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import Report, corpus

QUICK = "--quick" in sys.argv
ROOT = Path(__file__).resolve().parent.parent
RUNS = 20 if QUICK else 100
OPS = 1_000
GOAL_S = 60 * RUNS / 100


def transcript(rng: random.Random, run: int, ops: int) -> list[dict[str, Any]]:
    """One deployment-shaped run: ``ops`` tool calls and results with planted facts."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You deploy services. " + corpus.prose(rng, 800)},
        {"role": "user", "content": f"Deploy service {run} of the orders platform to staging-{run % 7}."},
    ]
    for i in range(ops):
        r = rng.random()
        if r < 0.1:
            command = f"export ORDERS_POOL_{i}={rng.randrange(10, 99_999)}"
            output = "exit code 0"
        elif r < 0.15:
            command = f"docker compose up -d api-{i}"
            output = (
                f"Error: Bind for 0.0.0.0:{rng.randrange(1024, 65_000)} failed: port is already allocated"
            )
        else:
            command = f"make step-{i} PORT={8000 + i % 97}"
            output = corpus.tool_output(rng, rng.randrange(200, 1_200))
        cid = f"c{i}"
        call = {
            "id": cid,
            "type": "function",
            "function": {"name": "run", "arguments": json.dumps({"command": command})},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": cid, "content": output})
    return messages


def write_jsonl(path: Path, runs: int, ops: int) -> None:
    rng = random.Random(20261128)
    with path.open("w", encoding="utf-8") as out:
        for r in range(runs):
            out.write(json.dumps({"messages": transcript(rng, r, ops)}) + "\n")


async def write_store(url: str, runs: int, ops: int) -> None:
    """Stored runs: the window as the loop keeps it, and a prompt record per operation
    (the counts ``tether eval`` compares; the deltas are left out to keep generation quick)."""
    from tether.context.evaluation import window_from_messages
    from tether.state.model import Checkpoint, RunStatus
    from tether.stores import open_store

    rng = random.Random(20261128)
    async with open_store(url) as store:
        for r in range(runs):
            window = window_from_messages(transcript(rng, r, ops), model="gpt-4o", budget=400_000)
            raw = window.usage().raw_tokens
            records = [
                {
                    "v": 1,
                    "iteration": i + 1,
                    "model": "gpt-4o",
                    "responseModel": "gpt-4o-2024-08-06",
                    "rawTokens": raw * (i + 1) // ops,
                    "usage": {"input": raw * (i + 1) // ops + rng.randrange(0, 3), "output": 60},
                    "reply": json.dumps({"action": "execute", "command": f"make step-{i}"}),
                }
                for i in range(ops)
            ]
            state = {
                "goal": f"deploy service {r}",
                "context_meta": window.meta_state(),
                "context_log": window.item_dicts(),
                "prompt_log": records,
            }
            await store.save(
                Checkpoint(
                    run_id=f"bench-eval-{r:03d}", node_id="iteration", state=state, status=RunStatus.COMPLETED
                )
            )


def tether_eval(*args: str) -> tuple[float, float, dict[str, Any]]:
    """Wall seconds, CPU seconds of the command and its workers, and the JSON report."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "tether.cli.app", "eval", *args, "--json", "--workers", "2"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if out.returncode != 0:
        raise SystemExit(
            f"tether eval failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
        )
    return elapsed, cpu, json.loads(out.stdout)


def main() -> int:
    rep = Report("bench_eval", f"tether eval on {RUNS} runs of {OPS:,} operations, 2 workers")
    with tempfile.TemporaryDirectory() as tmp:
        jsonl = Path(tmp) / "runs.jsonl"
        url = f"sqlite:///{tmp}/runs.db"
        t0 = time.perf_counter()
        write_jsonl(jsonl, RUNS, OPS)
        asyncio.run(write_store(url, RUNS, OPS))
        print(f"# generated {RUNS} transcripts ({jsonl.stat().st_size / 1e6:.0f} MB) and {RUNS} stored runs "
              f"in {time.perf_counter() - t0:.0f} s")  # fmt: skip
        for _ in rep.runs(1 if QUICK else 3):
            rep.section("stored runs (SQLite), a glob over their ids")
            t_store, cpu, report = tether_eval("bench-eval-*", "--store", url)
            rep.line("CPU of the command and its workers", cpu, "s", note=f"/ 2 cores = {cpu / 2:.1f} s")
            assert report["runs"] == RUNS and not report["failed"], report["failed"][:3]
            rep.line("standard: token ratio", report["levels"]["standard"]["tokenRatio"], "x")
            rep.line(
                "standard: ports/paths/versions kept",
                report["levels"]["standard"]["kept"]["ports/paths/versions"],
                "x",
            )
            acc = report["tokenAccuracy"].get("gpt-4o", {})
            rep.line(
                "token-count accuracy, gpt-4o",
                acc.get("accuracy", float("nan")),
                "x",
                note=f"{acc.get('calls', 0)} calls",
            )
            rep.target("stored runs: eval wall time", t_store, goal=GOAL_S, unit="s")

            rep.section("JSONL transcripts")
            t_jsonl, cpu, report = tether_eval("--jsonl", str(jsonl))
            rep.line("CPU of the command and its workers", cpu, "s", note=f"/ 2 cores = {cpu / 2:.1f} s")
            assert report["runs"] == RUNS and not report["failed"], report["failed"][:3]
            rep.line("standard: token ratio", report["levels"]["standard"]["tokenRatio"], "x")
            rep.target("transcripts: eval wall time", t_jsonl, goal=GOAL_S, unit="s")
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
