"""The dashboard's compress dialog (headless Debian chromium): phase compression of an
agent-shaped window, with the summary text the API returns shown before Confirm."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.async_api import expect

from tests.server.conftest import live, new_id
from tests.server.test_api import wait_status
from tests.server.test_dashboard import browser  # noqa: F401 - the fixture
from tether.context import ContextWindow
from tether.context.sessions import generate_session
from tether.runtime import Step, StepContext, Workflow

pytestmark = pytest.mark.slow


def _agent_window(sc: StepContext) -> dict[str, Any]:
    """A window stored as an agent run stores it (meta + a log of changes), in phases."""
    session = generate_session("deployment", seed=4, operations=40)
    window = ContextWindow("gpt-4", budget=60_000)
    window.start_journal()
    for item in session.items(output_tokens=600):
        if item.kind in ("tool_call", "tool_result", "decision"):
            number = int(item.id.split("-")[1]) - 1
            window.phase = str(session.ops[number].phase + 1)
        window.add(item)
    return {"context_meta": window.meta_state(), "context_log": window.take_journal()}


def _flow() -> Workflow:
    def finish(sc: StepContext) -> dict[str, Any]:
        return {}

    return Workflow(
        [Step(id="fill", fn=_agent_window, pause_after=True), Step(id="finish", fn=finish)], name="agentctx"
    )


async def test_phase_compression_previews_its_summary_then_applies(tmp_path: Any, browser: Any) -> None:  # noqa: F811
    sqlite_url = f"sqlite:///{tmp_path}/tether.db"
    async with (
        live(sqlite_url, workflows=[_flow()]) as (base, _app),
        httpx.AsyncClient(base_url=base, timeout=10) as client,
    ):
        rid = new_id("ui-phase")
        await client.post("/api/runs", json={"workflow": "agentctx", "runId": rid})
        await wait_status(client, rid, "PAUSED")
        usage = (await client.get(f"/api/runs/{rid}/context")).json()
        assert usage["phases"] == ["1", "2", "3", "4", "5"]
        page = await browser.new_page(viewport={"width": 1366, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        await page.goto(f"{base}/ui/runs/{rid}")
        await page.locator("#open-compress-2").click()
        dialog = page.get_by_test_id("compress-dialog")
        await dialog.wait_for(state="visible")
        await page.select_option("#compress-level", "phase")
        await expect(page.locator("#compress-phase")).to_be_visible()
        await page.select_option("#compress-phase", "2")
        await page.locator("#compress-preview").click()
        summary = page.get_by_test_id("compress-summary-text")
        await expect(summary).to_be_visible()
        shown = await summary.inner_text()
        assert shown.startswith("✅ phase 2 (") and "items)" in shown, shown
        await expect(page.locator("#compress-confirm")).to_be_enabled()
        # nothing changed yet: the preview only
        assert (await client.get(f"/api/runs/{rid}/context")).json()["phases"] == usage["phases"]
        await page.locator("#compress-confirm").click()
        await dialog.wait_for(state="hidden")
        after = (await client.get(f"/api/runs/{rid}/context")).json()
        assert "2" in after["phases"]  # the phase line itself carries the phase
        assert after["tokens"] < usage["tokens"]
        snap = (await client.get(f"/api/runs/{rid}/snapshot")).json()["stateData"]
        window = ContextWindow.from_log(snap["context_meta"], snap["context_log"])
        line = window.get("phase-summary:2")
        assert line is not None and line.content == shown
        assert not any(i.phase == "2" and i.kind == "tool_result" for i in window.items())
        # and a phase that is not in the window is refused with a clear message
        bad = await client.post(f"/api/runs/{rid}/context/compress", json={"level": "phase", "phase": "9"})
        assert bad.status_code >= 400 and "phases" in bad.text
        assert errors == []
