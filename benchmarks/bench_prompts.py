"""Prompt records, streaming and ``tether eval``: what seeing what the agent saw costs.

1. Stored bytes of the prompt records per call against the new content of that call
   (the messages that were not in the previous prompt, plus the reply): goal <= 2x.
2. Rebuilding the prompt of call 500 of a 1,000-call run from its records: goal <= 50 ms.
3. Each streamed piece seen by an SSE client of ``tether serve`` after the model sent it:
   goal p95 <= 200 ms. (On the dashboard itself, in Chromium: ``bench_stream.py``;
   ``tether eval`` on 100 runs of 1,000 operations: ``bench_eval.py``.)

Run: ``PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_prompts.py`` (``--quick``:
smaller sizes, one run).
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from typing import Any

from harness import Report, corpus, percentile

from tether.context import ContextWindow, Layer, new_item
from tether.context.records import PromptRecorder, rebuild

QUICK = "--quick" in sys.argv


def simulated_calls(n: int, seed: int) -> tuple[list[dict[str, Any]], list[int]]:
    """``n`` model calls of an agent-shaped window (commands with varied output, a refreshed
    reminder, compression when the budget is reached); the records and each call's new bytes."""
    rng = random.Random(seed)
    window = ContextWindow("gpt-4o", budget=24_000)
    window.add(new_item("system", corpus.prose(rng, 3_000), id="system", pinned=True))
    window.add(new_item("goal", "deploy the orders service to staging", id="goal", pinned=True))
    recorder = PromptRecorder()
    records: list[dict[str, Any]] = []
    new_bytes: list[int] = []
    previous: set[str] = set()
    for i in range(1, n + 1):
        window.upsert(
            new_item("reminder", f"Iteration {i} of {n}.", id="instant-iteration", layer=Layer.INSTANT)
        )
        if window.usage().ratio > 0.85:
            window.compress("standard")
        messages = window.to_messages("openai")
        meta = [
            {"id": it.id, "layer": int(it.layer), "kind": it.kind, "tokens": it.tokens}
            for it in window.items()
        ]
        reply = json.dumps(
            {"action": "execute", "command": f"make step-{i}", "reasoning": corpus.prose(rng, 120)}
        )
        record = recorder.record(
            "bench", records, messages, meta, iteration=i, reply=reply, tokens=window.usage().tokens
        )
        keys = [json.dumps(m, sort_keys=True) for m in messages]
        new_bytes.append(sum(len(k) for k in keys if k not in previous) + len(reply))
        previous = set(keys)
        records.append(json.loads(json.dumps(record)))  # as a store gives it back
        call = new_item("tool_call", reply, id=f"call-{i}", tool_call_id=f"it{i}")
        result = new_item(
            "tool_result",
            corpus.tool_output(rng, rng.randrange(300, 3_000)),
            id=f"result-{i}",
            tool_call_id=f"it{i}",
        )
        window.add(call)
        window.add(result)
    return records, new_bytes


async def from_store(records: list[dict[str, Any]], iteration: int) -> float:
    """Milliseconds to load a run's records from SQLite and rebuild one call (p50 of 5)."""
    from tether.agent.replay import load_records, pick_call
    from tether.state.model import Checkpoint
    from tether.stores import open_store

    times = []
    with tempfile.TemporaryDirectory() as tmp:
        async with open_store(f"sqlite:///{tmp}/p.db") as store:
            await store.save(
                Checkpoint(run_id="bench-prompt", node_id="iteration", state={"prompt_log": records})
            )
            for _ in range(5):
                t0 = time.perf_counter()
                pick_call(await load_records(store, "bench-prompt"), iteration)
                times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


async def stream_latency(deltas: int) -> list[float]:
    """Seconds from the model handing a piece to the loop to an SSE client reading it."""
    import httpx
    import uvicorn

    from tether.agent import AgentLoop
    from tether.models import ScriptedModel
    from tether.server import ServerSettings, create_app
    from tether.stores import open_store
    from tether.tools import LocalSession

    sent: dict[int, float] = {}
    seen: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with open_store(f"sqlite:///{tmp}/s.db") as store:
            app = create_app(ServerSettings(), store=store, tokens=(), dashboard=False)
            server = uvicorn.Server(
                uvicorn.Config(
                    app, host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=1
                )
            )
            task = asyncio.create_task(server.serve())
            while not server.started:
                await asyncio.sleep(0.01)
            port = server.servers[0].sockets[0].getsockname()[1]

            def publish(event: Any) -> None:
                if event.kind == "model_delta":
                    sent[int(event.detail["seq"])] = time.perf_counter()
                app.state.events.publish(event)

            text = json.dumps({"action": "done", "message": "x" * (8 * deltas)})
            model = ScriptedModel([text], stream_chunk=8, stream_delay=0.01)
            loop = AgentLoop(model, LocalSession(cwd=tmp), store, on_event=publish)
            async with (
                httpx.AsyncClient(timeout=30) as client,
                client.stream("GET", f"http://127.0.0.1:{port}/api/events") as resp,
            ):
                run = asyncio.create_task(loop.start("bench-stream", "stream"))
                kind = None
                async for line in resp.aiter_lines():
                    if line.startswith("event: "):
                        kind = line[7:]
                    elif line.startswith("data: ") and kind == "model_delta":
                        seq = json.loads(line[6:])["detail"]["seq"]
                        seen.append(time.perf_counter() - sent[seq])
                    elif kind in ("completed", "failed"):
                        break
                await run
            server.should_exit = True
            await task
    return seen


def main() -> int:
    rep = Report("bench_prompts", "prompt records per call, rebuild of one call, streaming latency")
    calls = 200 if QUICK else 1_000
    for _ in rep.runs(1 if QUICK else 3):
        rep.section(f"prompt records over {calls} calls")
        records, new = simulated_calls(calls, seed=rep.run)
        stored = [len(json.dumps(r)) for r in records]
        ratios = [s / n for s, n in zip(stored[1:], new[1:], strict=True) if n]
        full = sum(
            len(json.dumps(rebuild(records, i).messages)) for i in range(0, calls, max(1, calls // 20))
        )
        rep.line("stored per call p50", statistics.median(stored), "B")
        rep.line("full prompt per call (sampled mean)", full / len(range(0, calls, max(1, calls // 20))), "B")
        rep.line("stored / new content p50", statistics.median(ratios), "x")
        rep.target("stored / new content p95", percentile(ratios, 95), goal=2.0)

        rep.section(f"rebuild call {calls // 2} of {calls}")
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            rebuild(records, calls // 2 - 1)
            times.append(time.perf_counter() - t0)
        rep.target("rebuild p50", statistics.median(times) * 1e3, goal=50, unit="ms")
        rep.line("rebuild max of 5", max(times) * 1e3, "ms")
        stored_ms = asyncio.run(from_store(records, calls // 2))
        rep.line("from SQLite, as `tether prompt RUN --iteration N` (p50 of 5)", stored_ms, "ms")

        rep.section("first streamed piece at an SSE client")
        lat = asyncio.run(stream_latency(40 if QUICK else 200))
        rep.line("pieces", len(lat))
        rep.line("p50", statistics.median(lat) * 1e3, "ms")
        rep.target("every piece at the SSE client p95", percentile(lat, 95) * 1e3, goal=200, unit="ms")

    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
