"""A run the server drives (resumed through the API, not by the loop's owner) streams its
model replies: ``model_delta`` events on the API's SSE and on the dashboard's run page."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from playwright.async_api import expect

from tests.observe.test_dashboard_prompts import browser  # noqa: F401  (a fixture)
from tests.server.conftest import new_id
from tether.agent import AgentLoop
from tether.agent.config import loop_reducers
from tether.models import ScriptedModel
from tether.server import ServerSettings, create_app
from tether.state import RunStatus
from tether.stores import open_store
from tether.tools import LocalSession

pytestmark = pytest.mark.slow

QUESTION = {"action": "ask_user", "question": "Which port?", "options": ["80", "8080"]}
DONE = {"action": "done", "message": "Deployed on port 8080; the health check answered 200. " * 3}


@asynccontextmanager
async def served_loop(tmp_path: Any, model: ScriptedModel) -> AsyncIterator[tuple[str, AgentLoop, Any]]:
    """uvicorn serving an app that has the loop's workflow registered (the loop itself has
    no ``on_event``: only the server can publish what it streams)."""
    import uvicorn

    async with open_store(f"sqlite:///{tmp_path}/srv.db") as store:
        loop = AgentLoop(model, LocalSession(cwd=tmp_path), store)
        reducers = loop_reducers()
        app = create_app(
            ServerSettings(),
            store=store,
            tokens=(),
            workflows=[loop.workflow()],
            reducers=reducers,
            recover=False,
        )
        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="warning", lifespan="on", timeout_graceful_shutdown=1
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started:
            assert not task.done(), "uvicorn did not start"
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}", loop, store
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, 10)


async def paused_on_question(loop: AgentLoop, store: Any, rid: str) -> None:
    paused = await loop.start(rid, "deploy the app")
    assert paused.status is RunStatus.PAUSED
    await store.update_state(rid, {"answer": "8080"})


async def wait_status(client: httpx.AsyncClient, rid: str, status: str) -> dict[str, Any]:
    for _ in range(500):
        snap = (await client.get(f"/api/runs/{rid}/snapshot")).json()
        if snap["status"] == status and not snap.get("executing"):
            return snap
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {rid} did not reach {status}: {snap['status']}")


async def test_a_run_resumed_through_the_api_streams_model_deltas_on_sse(tmp_path):
    """The pieces arrive on /api/runs/{id}/events in order, before the run completes, and
    put together they are the reply the model gave."""
    model = ScriptedModel([QUESTION, DONE], stream_chunk=8, stream_delay=0.01)
    async with served_loop(tmp_path, model) as (base, loop, store):
        rid = new_id("srv-stream")
        await paused_on_question(loop, store, rid)
        async with httpx.AsyncClient(
            base_url=base, timeout=30, headers={"X-Tether-Client": "test"}
        ) as client:
            pieces: list[dict[str, Any]] = []
            async with client.stream("GET", f"/api/runs/{rid}/events") as resp:
                assert resp.status_code == 200
                resumed = await client.post(f"/api/runs/{rid}/resume")
                assert resumed.status_code == 202, resumed.text
                kind = None
                async for line in resp.aiter_lines():
                    if line.startswith("event: "):
                        kind = line[7:]
                    elif line.startswith("data: ") and kind == "model_delta":
                        pieces.append(json.loads(line[6:])["detail"])
                    elif line.startswith("data: ") and kind in ("completed", "failed", "paused"):
                        break
            assert kind == "completed"
            assert [p["seq"] for p in pieces] == list(range(1, len(pieces) + 1))
            assert len(pieces) > 3
            assert json.loads("".join(p["text"] for p in pieces)) == DONE
            snap = await wait_status(client, rid, "COMPLETED")
            assert snap["status"] == "COMPLETED"


async def test_dashboard_shows_a_server_driven_reply_while_it_streams(tmp_path, browser):  # noqa: F811
    """The run page shows part of the reply while the server-driven run is still calling
    the model, then hides the stream once the call is recorded."""
    model = ScriptedModel([QUESTION, DONE], stream_chunk=4, stream_delay=0.03)
    async with served_loop(tmp_path, model) as (base, loop, store):
        rid = new_id("srv-ui")
        await paused_on_question(loop, store, rid)
        page = await browser.new_page(viewport={"width": 1366, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        await page.goto(f"{base}/ui/runs/{rid}")
        await expect(page.locator("#prompt-count")).to_have_text("1 call")
        await page.wait_for_timeout(300)  # the page's event stream is connected
        async with httpx.AsyncClient(
            base_url=base, timeout=30, headers={"X-Tether-Client": "test"}
        ) as client:
            assert (await client.post(f"/api/runs/{rid}/resume")).status_code == 202
            stream = page.get_by_test_id("model-stream")
            await stream.wait_for(state="visible", timeout=5_000)
            partial = await page.locator("#model-stream-text").inner_text()
            snap = (await client.get(f"/api/runs/{rid}/snapshot")).json()
            assert snap["status"] != "COMPLETED", "the reply was complete before the page showed any of it"
            assert 0 < len(partial) < len(json.dumps(DONE))
            await wait_status(client, rid, "COMPLETED")
        await expect(page.locator("#prompt-count")).to_have_text("2 calls")
        await expect(stream).to_be_hidden()
        await page.close()
        assert errors == []
