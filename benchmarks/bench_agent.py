"""The agent loop's prompt size, its own time per iteration, and what its run stores.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_agent.py            # 3 runs: 30 iterations, 200 for storage
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_agent.py --quick    # 1 run: 12 iterations, 60 for storage

1. **Prompt and overhead.** A scripted model (it answers at once) drives ``AgentLoop``
   through ``--iterations`` iterations of real commands in a ``LocalSession`` on the
   embedded SQLite store, under a ``--budget`` token budget. The commands read seeded files
   of about ``--output-kb`` KB of tool output from the corpus (log lines, JSON rows, Python
   code) with ``cat``, ``grep`` and ``tail``; every fifth copies a file, a command with side
   effects, which the loop runs in a step of its own with its own checkpoint. The model's
   reasoning is corpus prose. Per iteration:

   * the prompt tokens tether sent, beside the baseline, a naive prompt at the same
     iteration: the system prompt and a "current state" JSON holding every earlier command
     with its whole output (as the session returned it), counted with the same tokenizer;
   * the loop's own time: from the start of one iteration to the start of the next, minus
     the model's and the commands' time in it (prompt building, parsing, trimming, state
     update, checkpoints). Its floor, what the command and the model took in the same
     iteration, is printed beside it; the two are measured in the same iteration, so host
     noise lands on both. The own time is also split: iterations that read (an output to
     trim and count) and iterations that copy (a tiny output, two checkpoints).

2. **Storage.** ``--storage-iterations`` iterations (0 skips it) of ``cat`` on seeded tool
   outputs of 300 to 3,000 characters under an 8k budget: *stored* (the payload bytes of
   every version the store keeps for the run, from ``history()``), *written* (every payload
   the store was handed, segment seals included) and the SQLite file (after a WAL
   checkpoint), each against the final state's packed size.

Targets: the largest prompt <= the budget; the last iteration's prompt <= 0.4x the naive
one; the loop's own time <= 20 ms per iteration (median); stored <= 1.3x the final state;
the SQLite file <= 2.5x (the bound ``bench_storage.py`` sets for runs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import ormsgpack
from harness import Report, corpus, percentile

from tether.agent import AgentLoop, LoopConfig
from tether.agent.loop import SYSTEM_PROMPT
from tether.context import TiktokenTokenizer
from tether.models import ScriptedModel
from tether.runtime import Event
from tether.stores import open_store
from tether.tools import LocalSession

SEED = 34


class TimedSession:
    """The session, with each command's interval and whole output kept (the naive prompt's)."""

    def __init__(self, inner: LocalSession) -> None:
        self.inner = inner
        self.cwd = inner.cwd
        self.spans: list[tuple[float, float]] = []
        self.outputs: list[str] = []

    async def run(self, command: str, *, timeout: float | None = None, env: Any = None) -> Any:
        t = time.perf_counter()
        try:
            result = await self.inner.run(command, timeout=timeout, env=env)
        finally:
            self.spans.append((t, time.perf_counter()))
        self.outputs.append(result.stdout + result.stderr)
        return result


class TimedModel:
    """The scripted model, with each call's interval kept."""

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner
        self.spans: list[tuple[float, float]] = []

    async def complete(self, messages: list[dict[str, Any]], *, json_mode: bool = False) -> Any:
        t = time.perf_counter()
        try:
            return await self.inner.complete(messages, json_mode=json_mode)
        finally:
            self.spans.append((t, time.perf_counter()))


def workspace(root: Path, iterations: int, output_kb: int) -> list[dict[str, Any]]:
    """Seeded files under ``root`` and the script of replies that reads them."""
    rng = random.Random(SEED)
    for d in ("logs", "data", "src", "out"):
        (root / d).mkdir()
    size = output_kb * 1024
    replies: list[dict[str, Any]] = []
    for i in range(1, iterations):
        (root / "logs" / f"deploy-{i}.log").write_text(corpus.log_lines(rng, max(1, size // 90)) + "\n")
        (root / "data" / f"orders-{i}.json").write_text(corpus.json_blob(rng, size) + "\n")
        (root / "src" / f"handlers_{i}.py").write_text(code(rng, size) + "\n")
        command = (
            f"cp data/orders-{i}.json out/ && wc -c out/orders-{i}.json",
            f"cat logs/deploy-{i}.log",
            f"cat data/orders-{i}.json",
            f"cat src/handlers_{i}.py",
            f"grep -n -E 'ERROR|WARN' logs/deploy-{i}.log; tail -n 40 logs/deploy-{i}.log",
        )[i % 5]
        replies.append(
            {"action": "execute", "command": command, "reasoning": corpus.prose(rng, rng.randint(60, 220))}
        )
    replies.append({"action": "done", "message": corpus.prose(rng, 120)})
    return replies


def code(rng: random.Random, n_chars: int) -> str:
    """Python code from the corpus (its tool outputs are JSON, logs or code: drawn until code)."""
    while not (text := corpus.tool_output(rng, n_chars)).startswith("def "):
        pass
    return text


def inside(spans: list[tuple[float, float]], start: float, end: float) -> float:
    return sum(b - a for a, b in spans if start <= a < end)


async def prompt_and_overhead(rep: Report, iterations: int, output_kb: int, budget: int) -> None:
    tok = TiktokenTokenizer()
    with tempfile.TemporaryDirectory() as tmp:
        replies = workspace(Path(tmp), iterations, output_kb)
        async with open_store(f"sqlite:///{tmp}/agent.db") as store:
            model = TimedModel(ScriptedModel(replies))
            session = TimedSession(LocalSession(cwd=tmp))
            starts: list[float] = []

            def on_event(e: Event) -> None:
                if e.kind == "step_started" and e.step == "iteration":
                    starts.append(time.perf_counter())

            loop = AgentLoop(
                model,
                session,
                store,
                config=LoopConfig(max_iterations=iterations, budget=budget),
                on_event=on_event,
            )
            result = await loop.start("bench-agent", "deploy the orders service and verify it")
            starts.append(time.perf_counter())
            cp = await store.load("bench-agent")
            assert cp is not None
    assert str(result.status) == "COMPLETED", f"the run ended {result.status}"
    history = cp.state["command_history"]
    assert len(session.outputs) == len(history), "a command the session ran is not in the history"
    overhead, floor = [], []
    for a, b in zip(starts, starts[1:], strict=False):
        spent = inside(model.spans, a, b) + inside(session.spans, a, b)
        overhead.append(b - a - spent)
        floor.append(spent)
    sizes = loop.prompt_sizes
    rep.section(
        f"prompt and overhead: {iterations} iterations, ~{output_kb} KB per command, budget {budget:,}"
    )
    naive = 0
    for i, sent in enumerate(sizes, start=1):
        state = {
            "command_history": [
                {"iteration": h["iteration"], "command": h["command"], "success": h["success"], "stdout": out}
                for h, out in zip(history[: i - 1], session.outputs, strict=False)
            ]
        }
        naive = tok.count(SYSTEM_PROMPT) + tok.count(json.dumps(state, ensure_ascii=False))
        if i in (1, 2, 5) or i % 10 == 0 or i == len(sizes):
            rep.line(
                f"iteration {i}: prompt tokens",
                sent,
                note=f"naive {naive:,}, {sent / naive:.0%}; own time {overhead[i - 1] * 1e3:.1f} ms",
            )
    rep.target("largest prompt", max(sizes), goal=budget, unit="tokens")
    rep.target("last prompt / naive prompt", sizes[-1] / naive, goal=0.4)
    rep.line("floor: model + command per iteration, median", statistics.median(floor) * 1e3, "ms")
    rep.line("loop's own time per iteration, p95", percentile(overhead, 95) * 1e3, "ms")
    copies = [t for i, t in enumerate(overhead, start=1) if i % 5 == 0 and i < len(overhead)]
    reads = [t for i, t in enumerate(overhead, start=1) if i % 5 and i < len(overhead)]
    rep.line(
        f"own time, read iterations ({output_kb} KB output), median", statistics.median(reads) * 1e3, "ms"
    )
    if copies:
        rep.line("own time, copy iterations (side effect, 2 checkpoints)",
                 statistics.median(copies) * 1e3, "ms")  # fmt: skip
    rep.target(
        "loop's own time per iteration (median)", statistics.median(overhead) * 1e3, goal=20, unit="ms"
    )


async def storage(rep: Report, iterations: int) -> None:
    """Stored, written and file bytes of a run against its final state (see the module doc)."""
    rng = random.Random(SEED + 1)
    with tempfile.TemporaryDirectory() as tmp:
        replies = corpus.reading_agent(rng, Path(tmp) / "outputs", iterations, "read every output")
        db = Path(tmp) / "agent.db"
        async with open_store(f"sqlite:///{db}") as store:
            written: dict[str, int] = {}
            backend = store.backend
            append = backend.append

            async def counting(w: Any) -> Any:  # every payload handed to the database
                written[w.kind] = written.get(w.kind, 0) + len(w.payload)
                return await append(w)

            backend.append = counting  # type: ignore[method-assign]
            result = await AgentLoop(
                ScriptedModel(replies),
                LocalSession(cwd=tmp),
                store,
                config=LoopConfig(max_iterations=iterations, budget=8_000),
            ).start("bench-storage", "read every output")
            cp = await store.load("bench-storage")
            assert cp is not None
            stored, before = 0, None
            while page := await store.history("bench-storage", before=before, limit=1000):
                stored += sum(h.size for h in page)
                before = page[-1].version
        con = sqlite3.connect(db)
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
        file_bytes = sum(os.path.getsize(p) for p in db.parent.glob(db.name + "*"))
    assert str(result.status) == "COMPLETED", f"the storage run ended {result.status}"
    final = len(ormsgpack.packb(cp.state))
    total = sum(written.values())
    rep.section(f"storage: {iterations} iterations under an 8k budget")
    rep.line("final state, packed", final / 1e3, "KB")
    parts = ", ".join(f"{k} {v / 1e3:,.0f} KB" for k, v in sorted(written.items()))
    rep.line("written / final state", total / final, "x", note=f"{total / 1e3:,.0f} KB: {parts}")
    rep.target("stored / final state", stored / final, goal=1.3)
    rep.target("SQLite file / final state", file_bytes / final, goal=2.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 run: 12 iterations, 60 for storage")
    parser.add_argument("--runs", type=int, default=None, help="repetitions (default 3; 1 with --quick)")
    parser.add_argument("--iterations", type=int, default=None, help="default 30; 12 with --quick")
    parser.add_argument("--output-kb", type=int, default=12, help="output of each command")
    parser.add_argument("--budget", type=int, default=24_000, help="the prompt's token budget")
    parser.add_argument(
        "--storage-iterations", type=int, default=None, help="default 200; 60 with --quick; 0 skips"
    )
    args = parser.parse_args()
    logging.getLogger("tether").setLevel(logging.ERROR)  # the loop's notes on compression, the summary's size
    iterations = args.iterations or (12 if args.quick else 30)
    storage_iterations = (
        args.storage_iterations if args.storage_iterations is not None else (60 if args.quick else 200)
    )
    rep = Report("bench_agent", "the agent loop's prompt size, its own time per iteration, its run's storage")
    for _ in rep.runs(args.runs or (1 if args.quick else 3)):
        asyncio.run(prompt_and_overhead(rep, iterations, args.output_kb, args.budget))
        if storage_iterations:
            asyncio.run(storage(rep, storage_iterations))
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
