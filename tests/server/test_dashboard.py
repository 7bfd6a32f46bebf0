"""The dashboard in headless Chromium (Debian's, driven by Playwright): the context warning,
the compress dialog, the failure recovery panel, on SQLite and PostgreSQL. Screenshots go
to .artifacts/screenshots/."""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import expect

from tests.server.conftest import live, new_id
from tests.server.test_api import wait_status
from tests.stores.conftest import IN_CI

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SHOTS = Path(__file__).resolve().parents[2] / ".artifacts" / "screenshots"

pytestmark = pytest.mark.slow
EMOJI = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf\u2b00-\u2bff\ufe0f]")
"""Pictographs that render as empty boxes without an emoji font (● ▶ ✓ are ordinary glyphs)."""


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    if not os.path.exists(CHROMIUM):
        if IN_CI:
            pytest.fail("CI=true but /usr/bin/chromium is missing (scripts/browser installs it)")
        pytest.skip("install Debian's chromium (scripts/browser) to run the dashboard tests")
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            yield b
        finally:
            await b.close()


@pytest.fixture
async def served(store_url: str) -> AsyncIterator[tuple[str, Any, httpx.AsyncClient]]:
    """The dashboard on SQLite and on PostgreSQL (CI fails when the server is missing)."""
    BACKEND["name"] = store_url.split(":", 1)[0]
    async with (
        live(store_url) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=10) as client,
    ):
        yield base, app, client


BACKEND = {"name": "sqlite"}
"""The store of the test running now: each backend keeps its own screenshots."""


def shot(name: str) -> str:
    SHOTS.mkdir(parents=True, exist_ok=True)
    return str(SHOTS / f"{name}-{BACKEND['name']}.png")


async def test_warning_then_compress_through_the_dialog_drops_the_bar(served, browser):
    """A run near 75%: the warning shows; preview and confirm in the dialog (by keyboard); the bar drops."""
    base, _app, client = served
    rid = new_id("ui-ctx")
    await client.post("/api/runs", json={"workflow": "context", "runId": rid})
    await wait_status(client, rid, "PAUSED")
    page = await browser.new_page(viewport={"width": 1366, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    await page.goto(f"{base}/ui/runs/{rid}")
    warning = page.get_by_test_id("context-warning")
    await warning.wait_for(state="visible")
    assert "% full" in await warning.inner_text()
    bar = page.locator("#context-bar")
    before = float(await bar.get_attribute("data-ratio"))
    assert 0.70 < before < 0.85
    assert await bar.locator(".mark").count() == 3
    await page.screenshot(path=shot("context-warning"), full_page=True)

    await page.focus("#open-compress")
    await page.keyboard.press("Enter")
    dialog = page.get_by_test_id("compress-dialog")
    await dialog.wait_for(state="visible")
    await page.keyboard.press("Tab")  # from the level to Preview
    await page.keyboard.press("Enter")
    summary = page.locator("#compress-summary")
    await expect(summary).to_contain_text("→")
    assert "folded" in await summary.inner_text()
    await page.screenshot(path=shot("compress-dialog"), full_page=True)
    await page.focus("#compress-confirm")
    await page.keyboard.press("Enter")
    await dialog.wait_for(state="hidden")
    await expect(warning).to_be_hidden()
    after = float(await bar.get_attribute("data-ratio"))
    assert after < 0.70 and await warning.is_hidden()
    await page.screenshot(path=shot("after-compress"), full_page=True)
    usage = (await client.get(f"/api/runs/{rid}/context")).json()
    assert usage["ratio"] == pytest.approx(after)
    # the page re-read the run as a delta over the version it held, and patched it right
    reads = (await page.evaluate("document.body.dataset.snapshotReads")).split()
    assert reads[0] == "200" and "226" in reads, reads
    now = (await client.get(f"/api/runs/{rid}/snapshot")).json()
    await expect(page.locator("body")).to_have_attribute("data-version", str(now["version"]))
    assert json.loads(await page.locator("#state-view").text_content() or "") == now["stateData"]
    assert errors == []


async def test_failed_step_skip_in_the_recovery_panel_continues_the_run(served, browser):
    """A failed step shows the report and four actions; Skip makes the run finish."""
    base, _app, client = served
    rid = new_id("ui-fail")
    await client.post("/api/runs", json={"workflow": "failing", "runId": rid})
    await wait_status(client, rid, "PAUSED")
    page = await browser.new_page(viewport={"width": 1366, "height": 900})
    await page.goto(f"{base}/ui/runs/{rid}")
    panel = page.get_by_test_id("failure-recovery")
    await panel.wait_for(state="visible")
    text = await panel.inner_text()
    assert "Select the dataset" in text and "test-data" in text
    buttons = panel.locator("button[data-decision]")
    assert await buttons.count() == 5
    assert await panel.locator("button[data-decision=replan]").is_disabled()  # no re-planner configured
    editable = await page.locator("#state-edit").is_enabled()
    assert editable  # paused: the state editor is on
    # buttons only where they act: Resume would do nothing on a run that waits for a decision
    assert await page.locator("#resume").is_disabled()
    assert "waits for a decision" in (await page.locator("#resume").get_attribute("title") or "")
    assert await page.locator("#open-compress").is_disabled()  # no context window in this run
    assert not EMOJI.search(await page.locator("#failure-text").inner_text())  # no emoji font needed
    listed = next(r for r in (await client.get("/api/runs")).json()["items"] if r["runId"] == rid)
    assert listed["waitsFor"] == "decision"
    runs = await browser.new_page()
    await runs.goto(f"{base}/ui/runs")
    why = runs.locator(f"tr[data-run='{rid}'] td[data-reason]")
    await expect(why).to_have_text("waits for a decision")
    await runs.close()
    await page.screenshot(path=shot("failure-recovery"), full_page=True)
    await panel.locator("button[data-decision=skip]").click()
    await expect(page.locator("#status")).to_have_class("badge COMPLETED")
    await panel.wait_for(state="hidden")
    assert await page.locator("[data-todo=fetch]").get_attribute("data-status") == "skipped"
    assert await page.locator("[data-todo=report]").get_attribute("data-status") == "done"
    assert await page.locator("#state-edit").is_disabled()  # finished: no edits
    for button in ("#pause", "#resume", "#cancel", "#open-compress", "#open-compress-2"):
        assert await page.locator(button).is_disabled(), button  # nothing left to act on
    await page.screenshot(path=shot("after-skip"), full_page=True)
    await page.goto(f"{base}/ui/runs")
    row = page.locator(f"tr[data-run='{rid}']")
    await row.wait_for()
    assert "COMPLETED" in await row.inner_text()
    names = await page.evaluate(
        "[langGraphThread('lg:2:t10:'), langGraphThread('lg:2:t116:agent:1|search:2'), "
        "langGraphThread('lg#0123456789abcdef'), langGraphThread('deploy-1')]"
    )
    assert names == [
        "LangGraph thread t1",  # thread "t1", root namespace: the parts are length-prefixed
        "LangGraph thread t1 › agent › search",
        "LangGraph thread 01234567…",
        None,
    ]


async def test_takeover_in_the_recovery_panel_needs_a_note_and_continues(served, browser):
    """ "I did it by hand": the note is asked for, then recorded; the step counts as done."""
    base, _app, client = served
    rid = new_id("ui-takeover")
    await client.post("/api/runs", json={"workflow": "failing", "runId": rid})
    await wait_status(client, rid, "PAUSED")
    page = await browser.new_page(viewport={"width": 1366, "height": 900})
    alerts: list[str] = []

    async def on_dialog(d):
        alerts.append(d.message)
        await d.dismiss()

    page.on("dialog", on_dialog)
    await page.goto(f"{base}/ui/runs/{rid}")
    panel = page.get_by_test_id("failure-recovery")
    await panel.wait_for(state="visible")
    await panel.locator("button[data-decision=takeover]").click()
    await expect(page.locator("#status")).to_have_class("badge PAUSED")
    assert alerts and "what you did by hand" in alerts[0]
    await page.get_by_test_id("failure-note").fill("copied test-data from the backup")
    await panel.locator("button[data-decision=takeover]").click()
    await expect(page.locator("#status")).to_have_class("badge COMPLETED")
    assert await page.locator("[data-todo=fetch]").get_attribute("data-status") == "done"
    snap = (await client.get(f"/api/runs/{rid}/snapshot")).json()
    taken = [h for h in snap["executionHistory"] if h.get("status") == "takeover"]
    assert [h["note"] for h in taken] == ["copied test-data from the backup"]


async def test_a_langgraph_thread_shows_as_a_thread_that_tether_does_not_drive(served, browser, store_url):
    """A graph on TetherSaver stores its threads as runs that stay RUNNING: the dashboard
    names the thread, shows THREAD instead of that status, offers no pause, resume, cancel,
    edit, fork or rollback (the graph runs and rewinds it), and hides the saver's index runs."""
    from tests.integrations._lg_graph import build
    from tether.integrations.langgraph import TetherSaver

    base, _app, client = served
    thread = new_id("ui-graph")
    async with TetherSaver.from_url(store_url) as saver:
        graph = build(turns=2, pause_at=99).compile(checkpointer=saver)
        await graph.ainvoke({"messages": []}, {"configurable": {"thread_id": thread}})
    rid = f"lg:{len(thread)}:{thread}0:"
    assert (await client.get(f"/api/runs/{rid}/snapshot")).json()["status"] == "RUNNING"
    page = await browser.new_page(viewport={"width": 1366, "height": 900})
    await page.goto(f"{base}/ui/runs/{rid}")
    await expect(page.locator("#status")).to_have_class("badge THREAD")
    await expect(page.locator("#run-id")).to_have_text(f"LangGraph thread {thread}")
    for button in ("#pause", "#resume", "#cancel", "#save-state", "#open-compress"):
        assert await page.locator(button).is_disabled(), button
    assert "LangGraph thread" in (await page.locator("#resume").get_attribute("title") or "")
    await expect(page.locator("#timeline button", has_text="diff").first).to_be_visible()
    assert await page.locator("#timeline button", has_text="roll back").count() == 0
    index = f"lgt:{len(thread)}:{thread}"  # the saver's list of this thread's namespaces
    assert (await client.get(f"/api/runs/{index}/snapshot")).status_code == 200
    await page.goto(f"{base}/ui/runs")
    hidden = await page.evaluate(
        f"[langGraphIndex({index!r}), langGraphIndex({rid!r}), langGraphIndex('lgr#ab')]"
    )
    assert hidden == [True, False, True]  # index runs are left out of the list, threads are not
