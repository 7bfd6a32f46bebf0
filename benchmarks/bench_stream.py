"""First streamed token on the dashboard after the model sends it (goal: p95 <= 200 ms).

A server-driven agent run (resumed through the API, so the server's executor publishes the
reply's pieces) calls a scripted model that streams each reply slowly (8 characters every
20 ms). Headless Chromium (the system's ``chromium`` through Playwright) has the run's
dashboard page open; a MutationObserver on the streaming box notes when each piece is in
the page. The model wrapper notes when each piece left the model. The two clocks are the
same wall clock; their offset is measured (round trip to the page, Cristian's method) and
printed with its uncertainty.

Per model call the first piece's latency is the target; every piece's latency is a line.

Run: ``PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_stream.py`` (``--quick``:
10 calls and one run instead of 30 calls and three runs).
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Any

from harness import Report, corpus, percentile

QUICK = "--quick" in sys.argv
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
OBSERVER = """
() => {
  window.__seen = [];
  const box = document.getElementById("model-stream-text");
  new MutationObserver(() => {
    window.__seen.push([performance.timeOrigin + performance.now(), box.textContent.length]);
  }).observe(box, { childList: true, characterData: true, subtree: true });
}
"""


class StampedModel:
    """A scripted model whose every streamed piece is time-stamped as it leaves the model."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model = inner.model
        self.provider_name = "scripted"
        self.sent: list[tuple[float, int, int]] = []
        """(wall-clock seconds, call number, characters of the reply so far) per piece."""
        self.calls = 0

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        json_mode: bool = False,
        max_tokens: int | None = None,
        temperature: float | None = None,
        schema: Any = None,
        on_delta: Any = None,
    ) -> Any:
        self.calls += 1
        call, size = self.calls, [0]

        def stamp(text: str) -> None:
            size[0] += len(text)
            self.sent.append((time.time(), call, size[0]))
            if on_delta is not None:
                on_delta(text)

        return await self.inner.complete(
            messages, json_mode=json_mode, schema=schema, on_delta=stamp if on_delta is not None else None
        )


def replies(calls: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = [{"action": "ask_user", "question": "Which port?", "options": ["80", "8080"]}]
    for i in range(calls - 1):
        out.append({"action": "execute", "command": f"echo step-{i}", "reasoning": corpus.prose(rng, 60)})
    out.append({"action": "done", "message": corpus.prose(rng, 80)})
    return out


async def measure(calls: int, seed: int) -> dict[str, Any]:
    import httpx
    import uvicorn
    from playwright.async_api import async_playwright

    from tether.agent import AgentLoop, LoopConfig
    from tether.agent.config import loop_reducers
    from tether.models import ScriptedModel
    from tether.server import ServerSettings, create_app
    from tether.stores import open_store
    from tether.tools import LocalSession

    model = StampedModel(ScriptedModel(replies(calls, seed), stream_chunk=8, stream_delay=0.02))
    with tempfile.TemporaryDirectory() as tmp:
        async with open_store(f"sqlite:///{tmp}/s.db") as store:
            loop = AgentLoop(model, LocalSession(cwd=tmp), store, config=LoopConfig(max_iterations=calls + 5))
            reducers = loop_reducers()
            app = create_app(
                ServerSettings(),
                store=store,
                tokens=(),
                workflows=[loop.workflow()],
                reducers=reducers,
                recover=False,
            )
            server = uvicorn.Server(
                uvicorn.Config(
                    app, host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=1
                )
            )
            task = asyncio.create_task(server.serve())
            while not server.started:
                await asyncio.sleep(0.01)
            port = server.servers[0].sockets[0].getsockname()[1]
            base = f"http://127.0.0.1:{port}"
            rid = f"bench-stream-{seed}"
            await loop.start(rid, "deploy the app")  # pauses on the question (call 1, not measured)
            await store.update_state(rid, {"answer": "8080"})
            first_measured = model.calls + 1
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
                page = await browser.new_page()
                await page.goto(f"{base}/ui/runs/{rid}")
                await page.wait_for_selector("#prompt-count")
                await page.wait_for_timeout(500)  # the page's event stream is connected
                await page.evaluate(OBSERVER)
                offsets = []
                for _ in range(10):
                    t0 = time.time()
                    t_page = await page.evaluate("performance.timeOrigin + performance.now()") / 1e3
                    t1 = time.time()
                    offsets.append((t1 - t0, t_page - (t0 + t1) / 2))
                rtt, offset = min(offsets)
                async with httpx.AsyncClient(base_url=base, headers={"X-Tether-Client": "bench"}) as client:
                    assert (await client.post(f"/api/runs/{rid}/resume")).status_code == 202
                    while True:
                        snap = (await client.get(f"/api/runs/{rid}/snapshot")).json()
                        if snap["status"] != "RUNNING" and not snap.get("executing"):
                            break
                        await asyncio.sleep(0.1)
                await page.wait_for_timeout(300)
                seen = await page.evaluate("window.__seen")
                await browser.close()
            server.should_exit = True
            await task
    sent = [s for s in model.sent if s[1] >= first_measured]
    # the k-th piece sent is the k-th change of the box: the cumulative sizes must agree
    pairs = list(zip(sent, seen, strict=False))
    mismatched = sum(1 for (_, _, n), (_, m) in pairs if n != m)
    every = [(t_seen / 1e3 - offset) - t_sent for (t_sent, _, _), (t_seen, _) in pairs]
    firsts: list[float] = []
    seen_call: set[int] = set()
    for lat, ((_, call, _), _) in zip(every, pairs, strict=True):
        if call not in seen_call:
            seen_call.add(call)
            firsts.append(lat)
    return {
        "status": snap["status"],
        "pieces_sent": len(sent),
        "pieces_seen": len(seen),
        "mismatched": mismatched,
        "every": every,
        "first": firsts,
        "rtt": rtt,
    }


def main() -> int:
    rep = Report("bench_stream", "first streamed token on the dashboard after the model sends it")
    if not os.path.exists(CHROMIUM):
        print(f"# {CHROMIUM} is missing: install Debian's chromium to run this benchmark")
        return rep.finish()
    calls = 10 if QUICK else 30
    for run in rep.runs(1 if QUICK else 3):
        rep.section(f"server-driven run, {calls} model calls streaming 8 characters every 20 ms")
        out = asyncio.run(measure(calls, seed=run))
        rep.line("run ended", 0 if out["status"] == "COMPLETED" else 1, "", note=out["status"])
        rep.line("pieces sent / seen on the page", out["pieces_sent"], "", note=f"seen {out['pieces_seen']}")
        rep.line("pieces whose size did not match (must be 0)", out["mismatched"])
        rep.line("clock offset uncertainty (half the page round trip)", out["rtt"] / 2 * 1e3, "ms")
        rep.line("every piece p50", statistics.median(out["every"]) * 1e3, "ms")
        rep.line("every piece p95", percentile(out["every"], 95) * 1e3, "ms")
        rep.line("first piece per call p50", statistics.median(out["first"]) * 1e3, "ms")
        rep.target("first piece per call p95", percentile(out["first"], 95) * 1e3, goal=200, unit="ms")
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
