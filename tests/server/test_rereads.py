"""Reads a dashboard repeats after every event (context usage, the failure report) are
made once per run version, however many clients ask."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.server.conftest import new_id
from tests.server.test_api import paused_run, wait_status


def count_loads(app: Any) -> list[int]:
    """Counts the store's checkpoint loads from here on (the test undoes nothing: the app dies with it)."""
    store = app.state.store
    real = store.load
    calls = [0]

    async def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return await real(*args, **kwargs)

    store.load = counted
    return calls


async def test_context_usage_is_made_once_per_version(api):
    client, app = api
    rid = new_id()
    await paused_run(app, rid)
    loads = count_loads(app)
    url = f"/api/runs/{rid}/context"
    answers = await asyncio.gather(*(client.get(url) for _ in range(10)))
    assert {r.status_code for r in answers} == {200}
    assert len({r.content for r in answers}) == 1 and loads[0] == 1
    first = answers[0].json()
    r = await client.patch(f"/api/runs/{rid}/snapshot", json={"nodeId": "work", "stateData": {"goal": "x"}})
    assert r.status_code == 200
    again = (await client.get(url)).json()
    assert again["version"] == first["version"] + 1 and loads[0] == 2
    assert (await client.get(f"/api/runs/{new_id()}/context")).status_code == 404


async def test_the_failure_report_is_made_once_per_version_and_follows_the_decision(api):
    client, app = api
    rid = new_id()
    await client.post("/api/runs", json={"workflow": "failing", "runId": rid})
    await wait_status(client, rid, "PAUSED")
    loads = count_loads(app)
    url = f"/api/runs/{rid}/failure"
    answers = await asyncio.gather(*(client.get(url) for _ in range(10)))
    assert len({r.content for r in answers}) == 1 and loads[0] == 1
    report = answers[0].json()
    assert report["pending"] and "skip" in [o["decision"] for o in report["options"]]
    r = await client.post(f"/api/runs/{rid}/failure/decision", json={"decision": "skip"})
    assert r.status_code == 202
    await wait_status(client, rid, "COMPLETED")
    after = (await client.get(url)).json()
    assert not after["pending"] and after["options"] == []
    assert (await client.get(f"/api/runs/{new_id()}/failure")).status_code == 404
