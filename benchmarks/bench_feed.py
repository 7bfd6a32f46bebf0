"""The change feed's delay: from a commit in another process to the event on a subscribed client.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_feed.py            # 3 runs x 40 commits
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_feed.py --quick    # 1 run x 10 commits

This process opens the store and subscribes to its feed (``open_feed``: PostgreSQL
LISTEN/NOTIFY, Redis pub/sub, polling on SQLite, MySQL and tiered). A writer process
commits versions of one run (a ~1 KB chat message appended each time) at random gaps
(0.15-0.45 s, so commits never line up with the polls) and prints the wall-clock time at
which each commit returned. The delay of a version is the time from its commit's return
to the first change this process receives at that version or a later one (a poll that
sees two commits at once reports the later one: the client re-reads and has both).
Same host, same clock; a notification may overtake the writer's own reply (Redis
publishes inside the write script): that delay counts as 0. Servers come from TETHER_TEST_<NAME>_URL (as the tests); a
backend without one is skipped.

On PostgreSQL, also the cost of the notify trigger on a commit: the same small commits
with and without it, interleaved, in two private schemas (dropped afterwards).

Then the same through a ``tether serve`` process: from the commit to its ``checkpoint``
event on an ``/api/events`` stream read here (the live view's whole path; ``--no-sse``
skips it).

Goals: p95 <= 1 s on SQLite and MySQL (polled every 0.25 s), <= 200 ms on PostgreSQL and
Redis (notified).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from harness import Report, ainterleave, corpus, median, percentile

from tether.state import ExecutionContext
from tether.stores import open_store
from tether.stores.base import CheckpointStore
from tether.stores.feed import Feed, open_feed

GOAL_MS = {"sqlite": 1000.0, "mysql": 1000.0, "tiered": 1000.0, "postgresql": 200.0, "redis": 200.0}

WRITER = """
import asyncio, json, random, sys, time
from tether.state import ExecutionContext
from tether.stores import open_store
async def main(url, run_id, n, seed, messages):
    rng = random.Random(seed)
    async with open_store(url) as s:
        ctx = ExecutionContext(run_id, {"messages": []})
        await s.commit(ctx)
        print("ready", flush=True)
        sys.stdin.readline()  # the feed is subscribed
        for i in range(n):
            await asyncio.sleep(rng.uniform(0.15, 0.45))
            ctx.merge({"messages": [messages[i % len(messages)]]})
            version = await s.commit(ctx)
            print(version, time.time(), flush=True)
asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])))
"""


def urls(tmp: str) -> dict[str, str]:
    found = {"sqlite": f"sqlite:///{tmp}/feed.db"}
    for name in ("postgresql", "redis", "mysql", "tiered"):
        url = os.environ.get(f"TETHER_TEST_{name.upper()}_URL")
        if url:
            found[name] = url
    return found


def with_prefix(url: str, prefix: str) -> str:
    if not url.startswith("redis"):
        return url
    return f"{url}{'&' if '?' in url else '?'}prefix={prefix}"


async def write(url: str, run_id: str, commits: int, seed: int, arrived: dict[int, float]) -> list[float]:
    """Run the writer process; the delay of each of its commits to ``arrived`` (version ->
    wall-clock arrival, filled by the listener meanwhile)."""
    messages = [json.dumps(m) for m in corpus.messages(seed, 64 * 1024)][:64]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRITER, url, run_id, str(commits), str(seed), json.dumps(messages),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    assert (await proc.stdout.readline()).strip() == b"ready"
    proc.stdin.write(b"go\n")
    await proc.stdin.drain()
    committed: dict[int, float] = {}
    for _ in range(commits):
        version, at = (await proc.stdout.readline()).split()
        committed[int(version)] = float(at)
    await proc.wait()
    last = max(committed)
    deadline = time.monotonic() + 10
    while max(arrived, default=0) < last and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    delays = []
    for version, at in committed.items():
        seen = [t for v, t in arrived.items() if v >= version]
        delays.append(max(0.0, min(seen) - at) if seen else float("nan"))
    return delays


async def measure(url: str, commits: int, seed: int) -> tuple[list[float], str, float, float]:
    """Delays (seconds) of ``commits`` commits made by another process to this process's
    feed; the feed's kind and interval."""
    run_id = f"bench-feed-{uuid.uuid4().hex[:10]}"
    async with open_store(url) as store, open_feed(store) as feed:
        arrived: dict[int, float] = {}

        async def listen() -> None:
            async for change in feed:
                if change.run_id == run_id:
                    arrived.setdefault(change.version, time.time())

        task = asyncio.create_task(listen())
        delays = await write(url, run_id, commits, seed, arrived)
        task.cancel()
        poll = await poll_cost(store)
        await store.delete(run_id)
    return delays, feed.kind, feed.interval, poll


async def poll_cost(store: CheckpointStore) -> float:
    """Median seconds of one poll (a listening feed makes one after each reconnect) right
    after the writes: the runs updated in the last ``SLACK`` seconds are read again."""
    feed = Feed(store)
    await feed.scan()
    times = []
    for _ in range(30):
        t0 = time.perf_counter()
        await feed.scan()
        times.append(time.perf_counter() - t0)
    return median(times)


async def measure_sse(url: str, commits: int, seed: int) -> list[float]:
    """The same through ``tether serve`` (another process): commit to the ``checkpoint``
    event on an ``/api/events`` stream read here."""
    import httpx

    run_id = f"bench-sse-{uuid.uuid4().hex[:10]}"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    server = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.app", "serve", "--store", url, "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=60) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if (await client.get("/api/runs?limit=1")).status_code == 200:
                        break
                except httpx.HTTPError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise
                    await asyncio.sleep(0.2)
            arrived: dict[int, float] = {}
            async with client.stream("GET", "/api/events") as resp:

                async def listen() -> None:
                    async for line in resp.aiter_lines():
                        if line.startswith("data: ") and run_id in line:
                            data = json.loads(line[6:])
                            if data["kind"] == "checkpoint" and data["runId"] == run_id:
                                arrived.setdefault(data["detail"]["version"], time.time())

                task = asyncio.create_task(listen())
                delays = await write(url, run_id, commits, seed, arrived)
                task.cancel()
            await client.delete(f"/api/runs/{run_id}")
    finally:
        server.terminate()
        server.wait(15)
    return delays


async def trigger_cost(url: str, rounds: int) -> tuple[float, float]:
    """Median seconds of one small commit on PostgreSQL without and with the feed's notify
    trigger: two private schemas, same tables, commits interleaved."""
    import psycopg

    tag = uuid.uuid4().hex[:8]
    plain, notified = f"feedbench_plain_{tag}", f"feedbench_notify_{tag}"
    with psycopg.connect(url, autocommit=True) as admin:
        for schema in (plain, notified):
            admin.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in url else "?"
    try:
        async with (
            open_store(f"{url}{sep}options=-csearch_path%3D{plain}") as a,
            open_store(f"{url}{sep}options=-csearch_path%3D{notified}") as b,
        ):
            async with open_feed(b) as feed:  # installs the trigger in its schema
                assert feed.kind == "listen"
            ctxs = {name: ExecutionContext(f"bench-{name}", {"messages": []}) for name in ("plain", "notify")}
            stores = {"plain": a, "notify": b}
            messages = [json.dumps(m) for m in corpus.messages(7, 32 * 1024)]

            def commit(name: str) -> Any:
                async def go() -> None:
                    ctx = ctxs[name]
                    ctx.merge({"messages": [messages[len(ctx.get("messages")) % len(messages)]]})
                    await stores[name].commit(ctx)

                return go

            times = await ainterleave({"plain": commit("plain"), "notify": commit("notify")}, rounds=rounds)
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            for schema in (plain, notified):
                admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return median(times["plain"]), median(times["notify"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 run of 10 commits per store")
    parser.add_argument("--no-sse", action="store_true", help="skip the path through tether serve")
    parser.add_argument("--only", help="comma-separated stores (sqlite,postgresql,redis,mysql,tiered)")
    args = parser.parse_args()
    runs, commits = (1, 10) if args.quick else (3, 40)
    rep = Report("bench_feed", "delay from a commit in another process to the change on a subscribed feed")
    prefix = f"bench-feed-{uuid.uuid4().hex[:8]}:"
    with tempfile.TemporaryDirectory() as tmp:
        chosen = urls(tmp)
        if args.only:
            chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
        for run in rep.runs(runs):
            for name, url in chosen.items():
                delays, kind, interval, poll = Report.run_async(
                    measure(with_prefix(url, prefix), commits, seed=run)
                )
                ms = [d * 1e3 for d in delays]
                rep.section(
                    f"{name}: {kind}, {'poll interval' if kind == 'poll' else 'keep-alive check every'} {interval:g} s"
                )
                rep.line(f"{name} commits", len(ms))
                rep.line(f"{name} delay p50", median(ms), "ms")
                rep.line(f"{name} delay max", max(ms), "ms")
                rep.line(f"{name} one poll (or resync) query", poll * 1e3, "ms")
                rep.target(f"{name} delay p95", percentile(ms, 95), goal=GOAL_MS[name], unit="ms")
                if name == "postgresql":
                    bare, with_trigger = Report.run_async(trigger_cost(url, 60 if args.quick else 300))
                    rep.line("postgresql commit without the notify trigger p50", bare * 1e3, "ms")
                    rep.line("postgresql commit with the notify trigger p50", with_trigger * 1e3, "ms")
                    rep.line("postgresql trigger cost / commit", with_trigger / bare, "x")
                if args.no_sse:
                    continue
                ms = [
                    d * 1e3
                    for d in Report.run_async(measure_sse(with_prefix(url, prefix), commits, seed=run))
                ]
                rep.line(f"{name} through tether serve: delay p50", median(ms), "ms")
                rep.target(
                    f"{name} through tether serve: delay p95",
                    percentile(ms, 95),
                    goal=GOAL_MS[name],
                    unit="ms",
                )
    return rep.finish()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(main())
