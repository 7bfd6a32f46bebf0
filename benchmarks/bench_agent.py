"""The agent loop's prompt size and own overhead on a scripted 30-iteration deployment.

    .venv/bin/python benchmarks/bench_agent.py [--iterations 30] [--output-kb 12]

A scripted model runs real, verbose commands (each prints ``--output-kb`` KB) in a
LocalSession, on the embedded SQLite store. For every iteration it prints:

* the prompt tokens tether sent (context window: trimmed outputs, compression at 85/90%),
* a naive prompt at the same iteration: system prompt + a "current state" JSON with
  every command and its full output (counted with the same tokenizer), and the ratio;
* the loop's own time per iteration: wall time of the iteration minus the command's and
  the model's time (prompt building, parsing, trimming, state update, checkpoint).

Targets (issue 5): prompt bounded below the budget and <= 40% of the naive prompt by the
last iteration; loop overhead <= 20 ms per iteration on SQLite.

Then a ``--storage-iterations`` run (200 by default, 0 skips it) of short ``seq`` commands
under an 8k budget prints what the run's checkpoints cost the store against the final
state's packed size: *stored* (the payload bytes the store keeps for the run at the end, from
``history()``), *written* (every payload the store was handed, segment seals included) and
the SQLite file's size. Target: stored <= 1.3x the final state.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from tether.agent import AgentLoop, LoopConfig
from tether.agent.loop import SYSTEM_PROMPT
from tether.context import TiktokenTokenizer
from tether.models import ScriptedModel
from tether.runtime import Event
from tether.state.serde import pack_plain
from tether.stores import open_store
from tether.tools import LocalSession


class TimedSession:
    """Wraps a session to subtract command time from the iteration time."""

    def __init__(self, inner: LocalSession) -> None:
        self.inner = inner
        self.cwd = inner.cwd
        self.spent: list[float] = []

    async def run(self, command: str, *, timeout: float | None = None, env: Any = None) -> Any:
        t = time.perf_counter()
        try:
            return await self.inner.run(command, timeout=timeout, env=env)
        finally:
            self.spent.append(time.perf_counter() - t)


class TimedModel:
    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner
        self.spent: list[float] = []

    async def complete(self, messages: list[dict[str, Any]], *, json_mode: bool = False) -> Any:
        t = time.perf_counter()
        try:
            return await self.inner.complete(messages, json_mode=json_mode)
        finally:
            self.spent.append(time.perf_counter() - t)


def script(iterations: int, output_kb: int) -> list[dict[str, Any]]:
    py = sys.executable
    replies: list[dict[str, Any]] = []
    for i in range(1, iterations):
        cmd = (
            f'{py} -c "import random; random.seed({i}); '
            f"print('\\n'.join('step {i} log line %d: ' % n + ''.join(random.choice('abcdefghij ') for _ in range(60)) "
            f'for n in range({output_kb * 1024 // 80})))"'
        )
        replies.append({"action": "execute", "command": cmd, "reasoning": f"build step {i}"})
    replies.append({"action": "done", "message": "deployed"})
    return replies


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--output-kb", type=int, default=12)
    parser.add_argument("--budget", type=int, default=24_000)
    parser.add_argument("--storage-iterations", type=int, default=200)
    args = parser.parse_args()
    tok = TiktokenTokenizer()
    with tempfile.TemporaryDirectory() as tmp:
        async with open_store(f"sqlite:///{tmp}/agent.db") as store:
            model = TimedModel(ScriptedModel(script(args.iterations, args.output_kb)))
            session = TimedSession(LocalSession(cwd=tmp))
            marks: dict[str, float] = {}
            spans: list[float] = []

            def on_event(e: Event) -> None:
                if e.kind == "step_started" and e.step:
                    marks[e.step] = time.perf_counter()
                elif e.kind == "step_done" and e.step in marks:
                    spans.append(time.perf_counter() - marks[e.step])

            config = LoopConfig(max_iterations=args.iterations, budget=args.budget)
            loop = AgentLoop(model, session, store, config=config, on_event=on_event)
            t0 = time.perf_counter()
            result = await loop.start("bench-agent", "deploy the sample service and verify it")
            total = time.perf_counter() - t0
            cp = await store.load("bench-agent")
            assert cp is not None
    history = cp.state["command_history"]
    print(
        f"# agent bench: python {sys.version.split()[0]}, {os.cpu_count()} cpus; {args.iterations} iterations, "
        f"~{args.output_kb} KB of output per command, budget {args.budget} tokens; status {result.status}"
    )
    print(f"{'iter':>4} {'tether prompt':>14} {'naive prompt':>13} {'ratio':>7} {'loop overhead':>14}")
    overheads = []
    for i, sent in enumerate(loop.prompt_sizes, start=1):
        naive_state = {
            "command_history": [
                {
                    "iteration": h["iteration"],
                    "command": h["command"],
                    "success": h["success"],
                    "stdout": _full_output(h, args.output_kb),
                }
                for h in history[: i - 1]
            ]
        }
        naive = tok.count(SYSTEM_PROMPT) + tok.count(json.dumps(naive_state, ensure_ascii=False))
        over = (
            spans[i - 1] - model.spent[i - 1] - (session.spent[i - 1] if i - 1 < len(session.spent) else 0.0)
        )
        overheads.append(over)
        if i in (1, 2, 5) or i % 5 == 0 or i == len(loop.prompt_sizes):
            print(f"{i:>4} {sent:>14,} {naive:>13,} {sent / naive:>6.0%} {over * 1000:>11.1f} ms")
    print(
        f"max prompt {max(loop.prompt_sizes):,} tokens (budget {args.budget:,}); "
        f"loop overhead median {statistics.median(overheads) * 1000:.1f} ms, "
        f"p95 {sorted(overheads)[int(len(overheads) * 0.95) - 1] * 1000:.1f} ms; total {total:.1f} s"
    )
    if args.storage_iterations:
        await storage(args.storage_iterations)


async def storage(iterations: int) -> None:
    """Stored and written bytes of a run against its final state (see the module doc)."""
    replies: list[dict[str, Any]] = [
        {"action": "execute", "command": f"seq {k * 1000} {k * 1000 + 120}", "reasoning": "next"}
        for k in range(iterations - 1)
    ]
    replies.append({"action": "done", "message": "counted"})
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "agent.db")
        async with open_store(f"sqlite:///{db}") as store:
            written: dict[str, int] = {}
            backend = store.backend
            append = backend.append

            async def counting(w: Any) -> Any:  # every payload handed to the database
                written[w.kind] = written.get(w.kind, 0) + len(w.payload)
                return await append(w)

            backend.append = counting  # type: ignore[method-assign]
            config = LoopConfig(max_iterations=iterations, budget=8_000)
            result = await AgentLoop(
                ScriptedModel(replies), LocalSession(cwd=tmp), store, config=config
            ).start("bench-storage", "count")
            cp = await store.load("bench-storage")
            assert cp is not None
            stored = sum(h.size for h in await store.history("bench-storage"))
        file_bytes = os.path.getsize(db)
    final = len(pack_plain({"state": cp.state}))
    total = sum(written.values())
    parts = ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in sorted(written.items()))
    print(
        f"# storage: {iterations} iterations, status {result.status}; final state {final / 1e6:.2f} MB packed"
    )
    print(
        f"stored/final {stored / final:.2f}x ({stored / 1e6:.2f} MB; target <= 1.3x); "
        f"written/final {total / final:.2f}x ({total / 1e6:.2f} MB: {parts}); "
        f"file/final {file_bytes / final:.2f}x ({file_bytes / 1e6:.2f} MB)"
    )


_OUTPUT_CACHE: dict[int, str] = {}


def _full_output(entry: dict[str, Any], output_kb: int) -> str:
    """The command's whole output, as the naive prompt would carry it (regenerated)."""
    i = int(entry["iteration"])
    if i not in _OUTPUT_CACHE:
        import random

        random.seed(i)
        _OUTPUT_CACHE[i] = "\n".join(
            f"step {i} log line {n}: " + "".join(random.choice("abcdefghij ") for _ in range(60))
            for n in range(output_kb * 1024 // 80)
        )
    return _OUTPUT_CACHE[i]


if __name__ == "__main__":
    asyncio.run(main())
