"""The dashboard, open before anything starts, sees a run executed by ``tether run`` in
another process and a run executed by a ``tether worker`` move to COMPLETED, without a
reload (headless Chromium; the page follows the store's change feed).

The store is Redis under a prefix of this test's own: the runs page lists the 50 latest
runs, and on a database other suites write to at the same time two runs of this test could
be pushed off it."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

from tests.server.conftest import live
from tests.server.test_dashboard import browser  # noqa: F401  (the fixture)
from tests.server.test_feed_live import cli_run
from tests.workers.conftest import broker_url, opened, store_url
from tether.workers import submit

pytestmark = pytest.mark.slow


async def test_the_runs_page_shows_a_cli_run_and_a_worker_run_reach_completed_without_a_reload(
    browser: Any,  # noqa: F811
    fleet_factory: Any,
    dispatchers: Any,
    tmp_path: Path,
) -> None:
    import redis

    prefix = f"fleet-ui-{uuid.uuid4().hex[:8]}:"
    store_at, broker_at = f"{store_url('redis')}?prefix={prefix}", broker_url("amqp")
    try:
        await _watch(browser, fleet_factory, dispatchers, store_at, broker_at)
    finally:
        admin = redis.Redis.from_url(store_url("redis"))
        try:
            for key in admin.scan_iter(match=f"{prefix}*", count=500):
                admin.delete(key)
        finally:
            admin.close()


async def _watch(chromium: Any, fleet_factory: Any, dispatchers: Any, store_at: str, broker_at: str) -> None:
    fleet = fleet_factory(store_at, broker_at)
    fleet.start(1, "--sweep-interval", "0")
    cli_id = f"ui-cli-{uuid.uuid4().hex[:8]}"
    async with live(store_at) as (base, _app), opened(store_at) as store:
        page = await chromium.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        await page.goto(f"{base}/ui/runs")
        await expect(page.locator("#live")).to_have_text("● live")
        await page.evaluate("window.noReload = true")  # a reload would drop it
        inputs = {"label": "ui", "delay": 0.6}
        worker_id = await submit(store, dispatchers(broker_at), "five", inputs)
        async with cli_run(store_at, cli_id, 1.0):
            cli_row = page.locator(f'tr[data-run="{cli_id}"] .badge')
            worker_row = page.locator(f'tr[data-run="{worker_id}"] .badge')
            await expect(worker_row).to_have_text("RUNNING", timeout=30_000)
            await expect(cli_row).to_have_text("RUNNING", timeout=30_000)
        await expect(cli_row).to_have_text("COMPLETED", timeout=10_000)
        await expect(worker_row).to_have_text("COMPLETED", timeout=20_000)
        assert await page.evaluate("window.noReload") is True
        assert errors == []
        await page.close()  # its event stream ends before the server stops
