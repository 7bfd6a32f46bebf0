"""The HTTP service under load on loopback, against the store's own reads in the same run.

    .venv/bin/python benchmarks/bench_server.py [--clients 50] [--reads 6] [--subscribers 100]

`tether serve` runs as its own process on a SQLite file; the clients run here (httpx).

1. Snapshot of a run whose state is 10 MB, read by 50 concurrent clients: p50/p95 of
   the request time (response fully received), first with every request asking for the
   body, then with If-None-Match (a dashboard re-polling an unchanged run). Baseline:
   ``store.snapshot()`` in this process, one at a time. Seed target: < 50 ms.
2. Update (PATCH a small state change into a PAUSED run) on a small run and on the
   10 MB run, against ``store.update_state`` in this process.
3. Server-sent events fanned out to 100 subscribers of /api/events: the delay from an
   event's timestamp to its arrival at each subscriber, p50/p95 over all deliveries.
4. The server's resident memory idle, then after listing 1,000 runs page by page.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import orjson

from tether.runtime import runtime_reducers
from tether.state import ExecutionContext, RunStatus
from tether.stores import open_store


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def ms(v: float) -> str:
    return f"{v * 1000:.1f} ms"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def seed(url: str) -> tuple[str, str]:
    """A 10 MB PAUSED run, a small PAUSED run and 1,000 small runs."""
    big, small = f"big-{uuid.uuid4().hex[:6]}", f"small-{uuid.uuid4().hex[:6]}"
    reg = runtime_reducers()
    async with open_store(url) as store:
        messages = [{"role": "tool", "content": "x" * 1000, "n": i} for i in range(10_000)]
        ctx = ExecutionContext(big, {"messages": messages, "goal": "ship"}, reducers=reg)
        await store.commit(ctx, node_id="work", status=RunStatus.PAUSED)
        ctx = ExecutionContext(small, {"messages": ["hi"], "goal": "ship"}, reducers=reg)
        await store.commit(ctx, node_id="work", status=RunStatus.PAUSED)
        for i in range(1_000):
            await store.commit(
                ExecutionContext(f"many-{i:04d}", {"goal": f"run {i}"}, reducers=reg),
                status=RunStatus.COMPLETED,
            )
    return big, small


async def baseline_reads(url: str, run_id: str, n: int) -> list[float]:
    async with open_store(url) as store:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            snap = await store.snapshot(run_id)
            orjson.dumps(snap.state)  # what the server must do too: encode it
            out.append(time.perf_counter() - t)
        return out


async def baseline_updates(url: str, run_id: str, n: int) -> list[float]:
    async with open_store(url) as store:
        out = []
        for i in range(n):
            t = time.perf_counter()
            await store.update_state(run_id, {"goal": f"base {i}"}, reducers=runtime_reducers())
            out.append(time.perf_counter() - t)
        return out


async def concurrent_reads(base: str, run_id: str, clients: int, reads: int, etag: bool) -> list[float]:
    path = f"{base}/api/runs/{run_id}/snapshot"
    times: list[float] = []
    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        first = await http.get(path)
        assert first.status_code == 200, first.text
        headers = {"If-None-Match": first.headers["etag"]} if etag else {}

        async def client() -> None:
            for _ in range(reads):
                t = time.perf_counter()
                r = await http.get(path, headers=headers)
                await r.aread()
                assert r.status_code == (304 if etag else 200), r.status_code
                times.append(time.perf_counter() - t)

        await asyncio.gather(*(client() for _ in range(clients)))
    return times


async def api_updates(base: str, run_id: str, n: int) -> list[float]:
    out = []
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        for i in range(n):
            t = time.perf_counter()
            r = await http.patch(
                f"/api/runs/{run_id}/snapshot", json={"nodeId": "work", "stateData": {"goal": str(i)}}
            )
            assert r.status_code == 200, r.text
            out.append(time.perf_counter() - t)
    return out


async def fan_out(base: str, run_id: str, subscribers: int, events: int) -> list[float]:
    import datetime as dt

    delays: list[float] = []
    ready = asyncio.Event()
    connected = 0

    async def subscriber(http: httpx.AsyncClient) -> None:
        nonlocal connected
        got = 0
        async with http.stream("GET", f"{base}/api/events") as resp:
            connected += 1
            if connected == subscribers:
                ready.set()
            async for line in resp.aiter_lines():
                if line.startswith("data: "):
                    data = orjson.loads(line[6:])
                    if data["kind"] != "state_updated":
                        continue
                    sent = dt.datetime.fromisoformat(data["ts"]).timestamp()
                    delays.append(time.time() - sent)
                    got += 1
                    if got == events:
                        return

    limits = httpx.Limits(max_connections=subscribers + 5)
    async with httpx.AsyncClient(timeout=60, limits=limits) as http:
        tasks = [asyncio.create_task(subscriber(http)) for _ in range(subscribers)]
        await asyncio.wait_for(ready.wait(), 60)
        await asyncio.sleep(0.5)
        for i in range(events):
            r = await http.patch(
                f"{base}/api/runs/{run_id}/snapshot", json={"nodeId": "work", "stateData": {"goal": f"e{i}"}}
            )
            assert r.status_code == 200
            await asyncio.sleep(0.05)
        await asyncio.wait_for(asyncio.gather(*tasks), 120)
    return delays


async def list_all(base: str) -> int:
    n = 0
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        offset: int | None = 0
        while offset is not None:
            page = (await http.get("/api/runs", params={"limit": 500, "offset": offset})).json()
            n += len(page["items"])
            offset = page["nextOffset"]
    return n


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--reads", type=int, default=6)
    ap.add_argument("--subscribers", type=int, default=100)
    ap.add_argument("--events", type=int, default=20)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-server-")
    url = f"sqlite:///{tmp}/server.db"
    big, small = await seed(url)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.app", "serve", "--store", url, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                httpx.get(f"{base}/api/runs?limit=1", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        idle = rss_kib(proc.pid)
        print(f"load: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (other work shares this machine)")

        print("\n1. snapshot of a 10 MB run")
        base_reads = await baseline_reads(url, big, 10)
        b50 = statistics.median(base_reads)
        print(f"   store.snapshot + encode, one at a time: p50 {ms(b50)}  p95 {ms(pct(base_reads, 95))}")
        for clients, reads, etag in (
            (1, 10, False),
            (1, 10, True),
            (args.clients, args.reads, False),
            (args.clients, args.reads, True),
        ):
            times = await concurrent_reads(base, big, clients, reads, etag)
            label = "If-None-Match (304)" if etag else "full body"
            p50, p95 = statistics.median(times), pct(times, 95)
            print(
                f"   API, {clients} client(s), {label}: p50 {ms(p50)}  p95 {ms(p95)}  "
                f"(p50 {p50 / b50:.2f}x the store read)  n={len(times)}"
            )
        small_times = await concurrent_reads(base, small, args.clients, args.reads, False)
        print(
            f"   API, {args.clients} clients, small run: p50 {ms(statistics.median(small_times))}  p95 {ms(pct(small_times, 95))}"
        )

        print("\n2. update while PAUSED")
        for name, rid in (("small", small), ("10 MB", big)):
            b = await baseline_updates(url, rid, 10)
            a = await api_updates(base, rid, 10)
            print(
                f"   {name}: API p50 {ms(statistics.median(a))} p95 {ms(pct(a, 95))}; store.update_state p50 "
                f"{ms(statistics.median(b))}  ({statistics.median(a) / statistics.median(b):.2f}x)"
            )

        print(f"\n3. events fanned out to {args.subscribers} subscribers")
        delays = await fan_out(base, small, args.subscribers, args.events)
        print(
            f"   delivery delay over {len(delays)} deliveries: p50 {ms(statistics.median(delays))}  "
            f"p95 {ms(pct(delays, 95))}  max {ms(max(delays))}"
        )

        print("\n4. server memory")
        before_list = rss_kib(proc.pid)
        listed = 0
        for _ in range(3):
            listed = await list_all(base)
        after = rss_kib(proc.pid)
        print(
            f"   RSS idle {idle / 1024:.1f} MiB; before listing {before_list / 1024:.1f} MiB (after 1-3); "
            f"after listing {listed} runs 3 times {after / 1024:.1f} MiB (+{(after - before_list) / 1024:.1f} MiB)"
        )
    finally:
        proc.terminate()
        proc.wait(timeout=20)


if __name__ == "__main__":
    asyncio.run(main())
