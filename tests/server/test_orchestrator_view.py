"""The dashboard's orchestrator view in headless Chromium: a real orchestration (pytest run by
TEST, the bug fixed by DEV in the sub-loop) shows its plan, reports, sub-loop and milestones;
the API under it answers other runs with ``orchestration: false``."""

from __future__ import annotations

import httpx
import pytest
from playwright.async_api import expect

from tests.server.conftest import live, new_id
from tests.server.test_dashboard import SHOTS, browser  # noqa: F401 (the fixture)
from tether.orchestrator import Orchestrator, ScriptedMain
from tether.orchestrator.demo import demo_runners, make_sample_repo, rule_main
from tether.state import RunStatus
from tether.stores import open_store

pytestmark = pytest.mark.slow


async def orchestrate(url: str, repo, run_id: str) -> None:
    async with open_store(url) as store:
        orch = Orchestrator(repo, store, main=ScriptedMain(rule_main), runners=demo_runners())
        result = await orch.start(
            run_id, "make the tests pass", dev_plan=[{"id": "t1", "title": "fix median"}]
        )
    assert result.status is RunStatus.COMPLETED


async def test_the_orchestrator_view_shows_plan_reports_subloop_and_milestones(sqlite_url, tmp_path, browser):  # noqa: F811
    rid = new_id("ui-orch")
    await orchestrate(sqlite_url, make_sample_repo(tmp_path / "project"), rid)
    async with live(sqlite_url) as (base, _app), httpx.AsyncClient(base_url=base, timeout=10) as client:
        page = await browser.new_page(viewport={"width": 1366, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        await page.goto(f"{base}/ui/runs/{rid}")
        view = page.get_by_test_id("orchestrator")
        await view.wait_for(state="visible")
        await expect(page.locator("[data-plan='t1']")).to_have_attribute("data-status", "DONE")
        test = page.locator("[data-report='TEST']")
        await expect(test).to_have_attribute("data-verdict", "PASS")
        await expect(page.locator("[data-report='FINISH_REVIEW']")).to_have_attribute("data-verdict", "PASS")
        subloop = page.get_by_test_id("orch-subloop")
        await expect(subloop).to_contain_text("result: success, final TEST PASS, 1 round(s)")
        await expect(subloop).to_contain_text("exit: TEST PASS")
        await expect(page.get_by_test_id("orch-milestones")).to_contain_text("FINISH attempt #1")
        await expect(page.get_by_test_id("orch-status")).to_contain_text("last stage FINISH_CHECK")

        assert await page.get_by_test_id("orch-report-text").count() == 0  # full text on demand only
        await test.get_by_role("button", name="Full report").click()
        full = test.get_by_test_id("orch-report-text")
        await expect(full).to_contain_text("结论：PASS")
        await expect(full).to_contain_text("passed")
        SHOTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SHOTS / "orchestrator-view.png"), full_page=True)
        await test.get_by_role("button", name="Hide report").click()
        await expect(full).to_have_count(0)
        assert errors == []

        other = new_id("ui-plain")
        await client.post("/api/runs", json={"workflow": "plan", "runId": other})
        assert (await client.get(f"/api/runs/{other}/orchestrator")).json() == {"orchestration": False}
        missing = await client.get(f"/api/runs/{rid}/orchestrator/reports/nobody")
        assert missing.status_code == 404 and missing.json()["title"] == "Report not found"
        shown = (await client.get(f"/api/runs/{rid}/orchestrator/reports/dev")).json()
        assert shown["role"] == "DEV" and "iteration:" in shown["text"]
