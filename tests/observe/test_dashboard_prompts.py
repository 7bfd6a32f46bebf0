"""The run page's model calls in headless Chromium: a reply streams in while the scripted
model writes it slowly, then the call shows with its layers and its diff."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from playwright.async_api import expect

from tests.server.conftest import new_id
from tests.server.test_dashboard import CHROMIUM, FLAGS, shot
from tests.stores.conftest import IN_CI
from tether.agent import AgentLoop
from tether.models import ScriptedModel
from tether.server import ServerSettings, create_app
from tether.state import RunStatus
from tether.stores import open_store
from tether.tools import LocalSession

pytestmark = pytest.mark.slow

QUESTION = {"action": "ask_user", "question": "Which port?", "options": ["80", "8080"]}
DONE = {
    "action": "done",
    "message": "Deployed on port 8080; the health check answered 200 and the logs show no errors. " * 3,
}


@asynccontextmanager
async def live_app(url: str, loop_for: Any) -> AsyncIterator[tuple[str, Any, Any]]:
    """The app behind uvicorn on a free port, with an agent loop publishing into its events."""
    import uvicorn

    async with open_store(url) as store:
        app = create_app(ServerSettings(), store=store, tokens=())
        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="warning", lifespan="on", timeout_graceful_shutdown=1
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started:
            assert not task.done(), "uvicorn did not start"
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        loop = loop_for(store, app.state.events.publish)
        try:
            yield f"http://127.0.0.1:{port}", app, loop
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, 10)


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    if not os.path.exists(CHROMIUM):
        if IN_CI:
            pytest.fail("CI=true but /usr/bin/chromium is missing (scripts/browser installs it)")
        pytest.skip("install Debian's chromium (scripts/browser) to run the dashboard tests")
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            yield b
        finally:
            await b.close()


async def test_reply_streams_on_the_page_then_the_call_shows_its_prompt(tmp_path, browser):
    """Partial text appears while the model writes; afterwards the call lists layers and the diff."""
    model = ScriptedModel([QUESTION, DONE], stream_chunk=4, stream_delay=0.02)

    def make(store: Any, publish: Any) -> AgentLoop:
        return AgentLoop(model, LocalSession(cwd=tmp_path), store, on_event=publish)

    async with live_app(f"sqlite:///{tmp_path}/ui.db", make) as (base, _app, loop):
        rid = new_id("ui-prompt")
        paused = await loop.start(rid, "deploy the app")
        assert paused.status is RunStatus.PAUSED
        page = await browser.new_page(viewport={"width": 1366, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        await page.goto(f"{base}/ui/runs/{rid}")
        await expect(page.locator("#prompt-count")).to_have_text("1 call")
        await page.wait_for_timeout(300)  # the page's event stream is connected

        answering = asyncio.create_task(loop.answer(rid, "8080"))
        stream = page.get_by_test_id("model-stream")
        await stream.wait_for(state="visible", timeout=5_000)
        partial = await page.locator("#model-stream-text").inner_text()
        assert not answering.done(), "the reply was complete before the page showed any of it"
        assert 0 < len(partial) < len(json.dumps(DONE))
        await page.screenshot(path=shot("model-streaming"), full_page=True)
        result = await answering
        assert result.status is RunStatus.COMPLETED

        await expect(page.locator("#prompt-count")).to_have_text("2 calls")
        await expect(stream).to_be_hidden()
        await page.locator("summary", has_text="Each call").click()
        await page.locator('#prompt-calls tr[data-iteration="2"]').click()
        diff = page.get_by_test_id("prompt-diff")
        await expect(diff).to_contain_text("answer-1")  # the user's answer entered the prompt
        await expect(page.get_by_test_id("prompt-layers")).to_contain_text("System")
        await expect(page.get_by_test_id("prompt-reply")).to_contain_text("Deployed on port 8080")
        await page.screenshot(path=shot("model-call"), full_page=True)
        await page.close()
        assert errors == []
