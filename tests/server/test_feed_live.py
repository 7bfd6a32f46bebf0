"""Runs executed by another process (``tether run``) seen live: on the event stream of a
real ``tether serve`` process, on the dashboard in Chromium without a reload, with their
holder in ``tether runs``, ``/api/runs`` and ``/api/workers``."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import expect

from tests.server.conftest import live, new_id, serve
from tests.server.test_dashboard import browser  # noqa: F401  (the fixture)
from tests.stores.conftest import ROOT, require_url

pytestmark = pytest.mark.slow

HOST = socket.gethostname()


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    found = require_url(str(request.param), tmp_path)
    if request.param != "redis":
        yield found
        return
    import redis

    prefix = f"{new_id('feed')}:"
    yield f"{found}?prefix={prefix}"
    admin = redis.Redis.from_url(found)
    try:
        for key in admin.scan_iter(match=f"{prefix}*", count=500):
            admin.delete(key)
    finally:
        admin.close()


@asynccontextmanager
async def cli_run(url: str, run_id: str, delay: float) -> AsyncIterator[asyncio.subprocess.Process]:
    """``tether run`` of :func:`steps` in its own process; waits for it to end."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tether.cli.app", "run", "tests.server.test_feed_flows:steps",
        "--store", url, "--run-id", run_id, "--plain", "--input", json.dumps({"delay": delay}),
        cwd=ROOT, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        yield proc
    finally:
        _, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def tether_serve(url: str) -> Iterator[str]:
    """A real ``tether serve`` process on a free loopback port (no tokens: loopback)."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.app", "serve", "--store", url, "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/api/runs", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, "tether serve exited"
            assert time.monotonic() < deadline, "tether serve did not start"
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
        assert b"Traceback" not in err, err.decode()


async def _checkpoints(resp: httpx.Response, run_id: str) -> AsyncIterator[dict[str, Any]]:
    block: dict[str, str] = {}
    async for line in resp.aiter_lines():
        if line:
            key, _, value = line.partition(": ")
            block[key] = value
            continue
        if block.get("event") == "checkpoint":
            event = json.loads(block["data"])
            if event["runId"] == run_id:
                yield event
        block = {}


async def test_event_stream_of_tether_serve_reports_a_cli_run_up_to_completed(url):
    """`tether serve` runs nothing itself; `tether run` executes a run in another process:
    the server's stream sends each version it sees, ending with the COMPLETED one."""
    run_id = new_id("sse")
    with tether_serve(url) as base:
        async with (
            httpx.AsyncClient(base_url=base, timeout=30) as client,
            client.stream("GET", "/api/events") as resp,
        ):
            assert resp.status_code == 200
            seen: list[tuple[int, str]] = []
            async with cli_run(url, run_id, 0.3), asyncio.timeout(90):
                async for event in _checkpoints(resp, run_id):
                    seen.append((event["detail"]["version"], event["detail"]["status"]))
                    if event["detail"]["status"] == "COMPLETED":
                        break
            final = (await client.get(f"/api/runs/{run_id}/snapshot")).json()
    versions = [v for v, _ in seen]
    assert versions == sorted(versions) and len(set(versions)) >= 2, seen
    assert seen[-1] == (final["version"], "COMPLETED") and final["status"] == "COMPLETED"
    assert seen[0][1] == "RUNNING"


@pytest.fixture(params=["sqlite", "postgresql"])
def ui_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return require_url(str(request.param), tmp_path)


async def test_dashboard_shows_a_cli_run_move_to_completed_without_a_reload(ui_url, browser):  # noqa: F811
    """The runs page, a run's page and the workers page, open before `tether run` starts in
    another process: the run appears, shows its holder, and reaches COMPLETED, with no reload."""
    run_id = new_id("ui-feed")
    async with live(ui_url) as (base, _app):
        runs = await browser.new_page()
        errors: list[str] = []
        runs.on("pageerror", lambda e: errors.append(str(e)))
        await runs.goto(f"{base}/ui/runs")
        await expect(runs.locator("#live")).to_have_text("● live")
        await runs.evaluate("window.noReload = true")
        workers = await browser.new_page()
        await workers.goto(f"{base}/ui/workers")
        await expect(workers.locator("#live")).to_have_text("● live")
        async with cli_run(ui_url, run_id, 3.0) as proc:
            row = runs.locator(f'tr[data-run="{run_id}"]')
            await expect(row.locator(".badge")).to_have_text("RUNNING", timeout=60_000)  # a slow start
            held = workers.locator(f'tr[data-worker="{HOST}:{proc.pid}"][data-run="{run_id}"]')
            await expect(held).to_have_count(1, timeout=8_000)
            holder = row.locator("td[data-holder]")
            await expect(holder).to_have_attribute("data-holder", f"{HOST}:{proc.pid}", timeout=8_000)
            one = await browser.new_page()
            await one.goto(f"{base}/ui/runs/{run_id}")
            await expect(one.locator("#status")).to_have_text("RUNNING")
            await expect(one.locator("#live")).to_have_text("● live")
            await one.evaluate("window.noReload = true")
        await expect(row.locator(".badge")).to_have_text("COMPLETED", timeout=10_000)
        await expect(holder).to_have_attribute("data-holder", "")
        await expect(one.locator("#status")).to_have_text("COMPLETED", timeout=10_000)
        final = await _app.state.store.get_run(run_id)
        await expect(one.locator("body")).to_have_attribute("data-version", str(final.version))
        await expect(held).to_have_count(0, timeout=10_000)
        assert await runs.evaluate("window.noReload") is True
        assert await one.evaluate("window.noReload") is True
        assert errors == []
        for page in (runs, workers, one):
            await page.close()  # their event streams end before the server stops


async def test_tether_runs_and_the_api_show_the_holder_of_a_cli_run(tmp_path):
    """While `tether run` executes a run, `tether runs`, /api/runs and /api/workers name
    its process (host and pid) and how fresh its lease is; once done, nobody holds it."""
    url = require_url("sqlite", tmp_path)
    run_id = new_id("held")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}

    def tether_runs(*extra: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "tether.cli.app", "runs", "--store", url, *extra],
            cwd=ROOT, env={**env, "COLUMNS": "200"}, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    async with serve(url) as (client, _app), cli_run(url, run_id, 3.0) as proc:
        deadline = time.monotonic() + 60
        while True:
            listed = {r["run_id"]: r for r in json.loads(tether_runs("--json"))}
            if run_id in listed and listed[run_id]["holder"]:
                break
            assert time.monotonic() < deadline, listed
            await asyncio.sleep(0.1)
        holder = listed[run_id]["holder"]
        assert (holder["host"], holder["pid"]) == (HOST, proc.pid)
        assert 0 <= holder["age"] < 60 and holder["expires_in"] > 0
        table = tether_runs()
        assert "held by" in table and f"{HOST}:{proc.pid}" in table
        api = (await client.get("/api/runs")).json()["items"]
        mine = next(r for r in api if r["runId"] == run_id)
        assert mine["status"] == "RUNNING" and mine["holder"]["pid"] == proc.pid
        assert mine["holder"]["host"] == HOST and mine["holder"]["expiresIn"] > 0
        workers = (await client.get("/api/workers")).json()["items"]
        worker = next(w for w in workers if w["pid"] == proc.pid)
        assert worker["host"] == HOST and [r["runId"] for r in worker["runs"]] == [run_id]
    listed = {r["run_id"]: r for r in json.loads(tether_runs("--json"))}
    assert listed[run_id]["status"] == "COMPLETED" and listed[run_id]["holder"] is None
    assert "held by" not in tether_runs()
