"""Every API route against the real app on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

from tests.server.conftest import live, new_id, serve
from tests.server.flows import GATE
from tether.runtime import runtime_reducers
from tether.state import ExecutionContext, RunStatus
from tether.state.reserved import runtime_state


async def paused_run(app: Any, run_id: str, **state: Any) -> int:
    """A PAUSED run with two versions, written straight to the store."""
    store = app.state.store
    ctx = ExecutionContext(
        run_id, {"messages": ["hello"], "goal": "ship", **state}, reducers=runtime_reducers()
    )
    await store.commit(ctx, node_id="plan", status=RunStatus.RUNNING, metadata={"node_name": "Plan it"})
    ctx.merge({"messages": ["world"], "plan_output": "a plan"})
    ctx.mark_executed("plan")
    return await store.commit(ctx, node_id="plan", status=RunStatus.PAUSED, metadata={"node_name": "Plan it"})


async def wait_status(client: Any, run_id: str, want: str, timeout: float = 10.0) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        snap = (await client.get(f"/api/runs/{run_id}/snapshot")).json()
        if snap.get("status") == want and not snap.get("executing"):
            return snap
        assert asyncio.get_running_loop().time() < deadline, f"run stayed {snap.get('status')}, wanted {want}"
        await asyncio.sleep(0.02)


async def test_snapshot_has_the_seed_shape_and_snake_case(api):
    """The snapshot carries conversationId … timestamp; ?keys=snake renames them."""
    client, app = api
    rid = new_id()
    await paused_run(app, rid)
    snap = (await client.get(f"/api/runs/{rid}/snapshot")).json()
    assert snap["conversationId"] == rid
    assert snap["currentNodeId"] == "plan" and snap["currentNodeName"] == "Plan it"
    assert snap["status"] == "PAUSED"
    assert snap["stateData"]["messages"] == ["hello", "world"]
    assert isinstance(snap["executionHistory"], list) and isinstance(snap["timestamp"], int)
    snake = (await client.get(f"/api/runs/{rid}/snapshot?keys=snake")).json()
    assert snake["run_id"] == rid and snake["state_data"] == snap["stateData"]
    assert snake["current_node_id"] == "plan" and "conversationId" not in snake


async def test_update_merges_through_reducers_only_while_paused(api):
    """PATCH appends messages and overwrites the rest while PAUSED; else 409 and nothing changes."""
    client, app = api
    rid = new_id()
    await paused_run(app, rid)
    r = await client.patch(
        f"/api/runs/{rid}/snapshot",
        json={"nodeId": "plan", "stateData": {"messages": ["fixed"], "goal": "ship v2"}},
    )
    assert r.status_code == 200, r.text
    state = (await client.get(f"/api/runs/{rid}/snapshot")).json()["stateData"]
    assert state["messages"] == ["hello", "world", "fixed"] and state["goal"] == "ship v2"

    await app.state.store.set_status(rid, "RUNNING")
    before = await app.state.store.load(rid)
    r = await client.patch(f"/api/runs/{rid}/snapshot", json={"nodeId": "plan", "stateData": {"goal": "x"}})
    assert r.status_code == 409
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["type"].endswith("/run-not-paused") and "PAUSED" in r.json()["detail"]
    after = await app.state.store.load(rid)
    assert after.version == before.version and after.state == before.state


async def test_unknown_run_is_a_404_problem_on_every_run_route(api):
    """No route answers an unknown run with anything but 404 problem details."""
    client, _ = api
    rid = new_id("ghost")
    calls = [
        ("GET", f"/api/runs/{rid}/snapshot", None),
        ("PATCH", f"/api/runs/{rid}/snapshot", {"nodeId": "a", "stateData": {}}),
        ("POST", f"/api/runs/{rid}/pause", None),
        ("POST", f"/api/runs/{rid}/cancel", None),
        ("POST", f"/api/runs/{rid}/resume", None),
        ("GET", f"/api/runs/{rid}/checkpoints", None),
        ("GET", f"/api/runs/{rid}/checkpoints/1", None),
        ("GET", f"/api/runs/{rid}/diff?from=1", None),
        ("POST", f"/api/runs/{rid}/checkpoints/1/fork", {"newRunId": new_id()}),
        ("POST", f"/api/runs/{rid}/checkpoints/1/rollback", None),
        ("GET", f"/api/runs/{rid}/context", None),
        ("POST", f"/api/runs/{rid}/context/compress", {"level": "standard"}),
        ("GET", f"/api/runs/{rid}/failure", None),
        ("POST", f"/api/runs/{rid}/failure/decision", {"decision": "skip"}),
        ("GET", f"/api/runs/{rid}/events", None),
    ]
    for method, path, body in calls:
        r = await client.request(method, path, json=body)
        assert r.status_code == 404, (method, path, r.status_code, r.text)
        assert r.json()["status"] == 404 and r.json()["type"].endswith("/run-not-found"), path


async def test_list_filters_by_status_and_time_and_pages(api):
    """Status and updatedAfter filters apply, and pages do not overlap. The pages are taken
    within the time this test's runs were written: a shared server's store holds other
    tests' runs, and one written meanwhile would move the pages' offsets."""
    client, app = api
    tag = new_id("list")
    ids = [f"{tag}-{i}" for i in range(5)]
    start = dt.datetime.now(dt.UTC) - dt.timedelta(milliseconds=1)
    for rid in ids:
        await paused_run(app, rid)
    await app.state.store.set_status(ids[0], "CANCELLED")
    window = {
        "updatedAfter": start.isoformat(),
        "updatedBefore": (dt.datetime.now(dt.UTC) + dt.timedelta(milliseconds=1)).isoformat(),
    }
    seen: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = (
            await client.get("/api/runs", params={"status": "PAUSED", "limit": 2, "offset": offset, **window})
        ).json()
        seen += [r["runId"] for r in page["items"] if r["runId"].startswith(tag)]
        assert len(page["items"]) <= 2
        offset = page["nextOffset"]
    assert sorted(seen) == sorted(ids[1:])
    cancelled = (await client.get("/api/runs", params={"status": "CANCELLED", "limit": 500})).json()["items"]
    assert ids[0] in [r["runId"] for r in cancelled]
    future = (
        await client.get("/api/runs", params={"status": "PAUSED", "updatedAfter": "2999-01-01T00:00:00Z"})
    ).json()
    assert future["items"] == []
    bad = await client.get("/api/runs", params={"status": "NOPE"})
    assert bad.status_code == 422 and bad.json()["type"].endswith("/validation-error")


async def test_checkpoints_list_get_diff_fork_rollback(api):
    """History newest first; a diff shows appends as appends; fork copies; rollback restores."""
    client, app = api
    rid = new_id()
    await paused_run(app, rid)
    lines = (await client.get(f"/api/runs/{rid}/checkpoints")).json()["items"]
    assert [c["version"] for c in lines] == [2, 1]
    one = (await client.get(f"/api/runs/{rid}/checkpoints/1")).json()
    assert one["stateData"]["messages"] == ["hello"]
    d = (await client.get(f"/api/runs/{rid}/diff", params={"from": 1, "to": 2})).json()
    assert d["changed"]["messages"] == {"op": "append", "appended": ["world"]}
    assert "plan_output" in d["added"] and d["removed"] == []
    fork_id = new_id("fork")
    r = await client.post(f"/api/runs/{rid}/checkpoints/1/fork", json={"newRunId": fork_id})
    assert r.status_code == 201, r.text
    forked = (await client.get(f"/api/runs/{fork_id}/snapshot")).json()
    assert forked["stateData"]["messages"] == ["hello"]
    r = await client.post(f"/api/runs/{rid}/checkpoints/1/rollback")
    assert r.status_code == 200 and r.json()["version"] == 3
    assert (await client.get(f"/api/runs/{rid}/snapshot")).json()["stateData"]["messages"] == ["hello"]
    missing = await client.get(f"/api/runs/{rid}/checkpoints/99")
    assert missing.status_code == 404


async def test_run_started_by_the_server_pauses_and_resumes(api):
    """A run executes in a server task; pause stops it after the current step; resume finishes it."""
    client, app = api
    rid = new_id("plan")
    GATE[rid] = asyncio.Event()
    try:
        r = await client.post("/api/runs", json={"workflow": "plan", "runId": rid})
        assert r.status_code == 202, r.text
        for _ in range(200):
            snap = (
                (await client.get(f"/api/runs/{rid}/snapshot")).json()
                if (await client.get(f"/api/runs/{rid}/snapshot")).status_code == 200
                else {}
            )
            if snap.get("currentNodeId") == "plan":
                break
            await asyncio.sleep(0.02)
        assert (await client.post(f"/api/runs/{rid}/resume")).status_code == 409  # already executing
        r = await client.post(f"/api/runs/{rid}/pause")
        assert r.status_code == 202 and r.json()["status"] == "PAUSING"
        GATE[rid].set()
        snap = await wait_status(client, rid, "PAUSED")
        assert snap["currentNodeId"] == "wait"
        assert (await client.post(f"/api/runs/{rid}/resume")).status_code == 202
        snap = await wait_status(client, rid, "COMPLETED")
        assert [h["node"] for h in snap["executionHistory"]] == ["plan", "wait", "build", "ship"]
        assert (await client.post(f"/api/runs/{rid}/resume")).status_code == 409
    finally:
        GATE.pop(rid, None)


async def test_cancel_of_an_idle_run_and_conflicts(api):
    """Cancel records CANCELLED; a cancelled run cannot be paused or resumed."""
    client, app = api
    rid = new_id()
    await paused_run(app, rid)
    assert (await client.post(f"/api/runs/{rid}/cancel")).json()["status"] == "CANCELLED"
    assert (await client.post(f"/api/runs/{rid}/pause")).status_code == 409
    r = await client.post(f"/api/runs/{rid}/resume")
    assert r.status_code == 409 and r.json()["type"].endswith("/wrong-run-status")


async def test_failure_report_and_skip_decision_continue_the_run(api):
    """A failed step leaves a report and options; skip makes the run finish."""
    client, app = api
    rid = new_id("fail")
    await client.post("/api/runs", json={"workflow": "failing", "runId": rid})
    await wait_status(client, rid, "PAUSED")
    f = (await client.get(f"/api/runs/{rid}/failure")).json()
    assert f["pending"] and f["report"]["item_id"] == "fetch" and f["report"]["kind"] == "data"
    assert "Select the dataset" in f["text"] and "test-data" in f["text"]
    assert [o["decision"] for o in f["options"]] == ["retry", "skip", "takeover", "abort"]
    bad = await client.post(f"/api/runs/{rid}/failure/decision", json={"decision": "replan"})
    assert bad.status_code == 409 and bad.json()["type"].endswith("/replan-unavailable")
    assert "no replanner is registered for workflow 'failing'" in bad.json()["detail"]
    assert (await client.get(f"/api/runs/{rid}/snapshot")).json()["status"] == "PAUSED"
    r = await client.post(f"/api/runs/{rid}/failure/decision", json={"decision": "skip"})
    assert r.status_code == 202
    snap = await wait_status(client, rid, "COMPLETED")
    assert runtime_state(snap["stateData"])["todo"]["fetch"]["status"] == "skipped"
    assert snap["stateData"]["report_output"] == "report"
    again = await client.post(f"/api/runs/{rid}/failure/decision", json={"decision": "skip"})
    assert again.status_code == 409


async def test_context_usage_and_compress_preview_then_apply(api):
    """Usage by layer at ~75%; a preview changes nothing; applying while PAUSED lowers usage."""
    client, app = api
    rid = new_id("ctx")
    await client.post("/api/runs", json={"workflow": "context", "runId": rid})
    await wait_status(client, rid, "PAUSED")
    usage = (await client.get(f"/api/runs/{rid}/context")).json()
    assert usage["hasWindow"] and 0.70 < usage["ratio"] < 0.85 and usage["level"] == "warn"
    assert usage["thresholds"] == {"warn": 0.7, "standard": 0.85, "deep": 0.9}
    assert sum(layer["tokens"] for layer in usage["layers"]) <= usage["tokens"]
    assert any(i["kind"] == "goal" and i["pinned"] for layer in usage["layers"] for i in layer["items"])
    preview = (await client.post(f"/api/runs/{rid}/context/compress", json={"level": "standard"})).json()
    assert not preview["applied"] and preview["afterTokens"] < preview["beforeTokens"]
    assert preview["summarized"] or preview["dropped"]
    assert (await client.get(f"/api/runs/{rid}/context")).json()["tokens"] == usage["tokens"]
    stale = await client.post(
        f"/api/runs/{rid}/context/compress", json={"level": "standard", "apply": True, "expectedVersion": 999}
    )
    assert stale.status_code == 412
    done = await client.post(f"/api/runs/{rid}/context/compress", json={"level": "standard", "apply": True})
    assert done.status_code == 200 and done.json()["applied"]
    after = (await client.get(f"/api/runs/{rid}/context")).json()
    assert after["tokens"] == done.json()["afterTokens"] or after["tokens"] < usage["tokens"]
    assert after["tokens"] < usage["tokens"]
    await app.state.store.set_status(rid, "RUNNING")
    r = await client.post(f"/api/runs/{rid}/context/compress", json={"level": "deep", "apply": True})
    assert r.status_code == 409


async def test_events_stream_replays_from_last_event_id(store_url):
    """A run's events arrive over SSE; reconnecting with Last-Event-ID replays only later ones."""
    import httpx

    async with live(store_url) as (base, app), httpx.AsyncClient(base_url=base, timeout=10) as client:
        await _events_roundtrip(client)


async def _events_roundtrip(client: Any) -> None:
    rid = new_id("ev")
    await client.post("/api/runs", json={"workflow": "failing", "runId": rid})
    await wait_status(client, rid, "PAUSED")
    first = await read_events(
        client, f"/api/runs/{rid}/events", headers={"Last-Event-ID": "0"}, until="paused"
    )
    kinds = [k for _, k, _ in first]
    assert kinds[:2] == ["run_started", "step_started"] and "step_failed" in kinds
    mid = first[2][0]
    again = await read_events(
        client, f"/api/runs/{rid}/events", headers={"Last-Event-ID": str(mid)}, until="paused"
    )
    assert [i for i, _, _ in again] == [i for i, _, _ in first if i > mid]


async def read_events(
    client: Any, path: str, *, headers: dict[str, str], until: str
) -> list[tuple[int, str, Any]]:
    import json

    got: list[tuple[int, str, Any]] = []
    async with client.stream("GET", path, headers=headers) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        block: dict[str, str] = {}
        async for line in resp.aiter_lines():
            if line == "":
                if "id" in block:
                    got.append((int(block["id"]), block["event"], json.loads(block["data"])))
                    if block["event"] == until:
                        return got
                block = {}
                continue
            key, _, value = line.partition(": ")
            block[key] = value
    return got


async def test_snapshot_etag_gives_304_until_the_run_changes(api):
    """A repeated read with If-None-Match is 304; an update or status change gives new data."""
    client, app = api
    rid = new_id()
    await paused_run(app, rid)
    first = await client.get(f"/api/runs/{rid}/snapshot")
    tag = first.headers["etag"]
    assert (await client.get(f"/api/runs/{rid}/snapshot", headers={"If-None-Match": tag})).status_code == 304
    await client.patch(f"/api/runs/{rid}/snapshot", json={"nodeId": "plan", "stateData": {"goal": "new"}})
    fresh = await client.get(f"/api/runs/{rid}/snapshot", headers={"If-None-Match": tag})
    assert fresh.status_code == 200 and fresh.json()["stateData"]["goal"] == "new"
    await app.state.store.set_status(rid, "CANCELLED")
    again = await client.get(f"/api/runs/{rid}/snapshot", headers={"If-None-Match": fresh.headers["etag"]})
    assert again.status_code == 200 and again.json()["status"] == "CANCELLED"


async def test_a_running_run_whose_process_died_is_listed_as_interrupted(api):
    """RUNNING in the store with a dead holder's lease shows as INTERRUPTED in the list."""
    client, app = api
    rid = new_id("dead")
    store = app.state.store
    lease = {"owner": "gone", "host": "elsewhere", "pid": 1, "expires_at": 0}
    await store.commit(ExecutionContext(rid, {"_lease": lease}), status=RunStatus.RUNNING)
    items = (await client.get("/api/runs", params={"limit": 500})).json()["items"]
    assert next(r for r in items if r["runId"] == rid)["status"] == "INTERRUPTED"


async def test_snapshot_is_gzipped_for_clients_that_accept_it_and_tags_match_across_encodings(api):
    """gzip only when asked; the body is the same JSON; either ETag gives 304 for the version."""

    client, app = api
    rid = new_id()
    await paused_run(app, rid, notes=[f"note {i} " * 20 for i in range(200)])
    url = f"/api/runs/{rid}/snapshot"
    plain = await client.get(url, headers={"Accept-Encoding": "identity"})
    packed = await client.get(url, headers={"Accept-Encoding": "gzip"})
    refused = await client.get(url, headers={"Accept-Encoding": "gzip;q=0, identity"})
    assert "content-encoding" not in plain.headers and "content-encoding" not in refused.headers
    assert packed.headers["content-encoding"] == "gzip" and packed.headers["vary"] == "Accept-Encoding"
    assert int(packed.headers["content-length"]) < len(plain.content) / 3
    assert packed.json() == plain.json()
    assert packed.headers["etag"] != plain.headers["etag"]
    for tag in (plain.headers["etag"], packed.headers["etag"], f"W/{packed.headers['etag']}"):
        again = await client.get(url, headers={"If-None-Match": tag, "Accept-Encoding": "gzip"})
        assert again.status_code == 304, tag


async def test_snapshot_cache_builds_each_version_once_and_drops_older_versions(api, monkeypatch):
    """Concurrent first reads of a version decode it once; a new version evicts the old."""
    import asyncio

    client, app = api
    rid = new_id()
    await paused_run(app, rid)
    store = app.state.store
    calls = 0
    real = store.snapshot

    async def counted(run_id: str) -> Any:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)  # keep the first read in flight while the others arrive
        return await real(run_id)

    monkeypatch.setattr(store, "snapshot", counted)
    url = f"/api/runs/{rid}/snapshot"
    bodies = await asyncio.gather(*(client.get(url) for _ in range(20)))
    assert {r.status_code for r in bodies} == {200} and len({r.content for r in bodies}) == 1
    assert calls == 1
    await client.patch(url, json={"nodeId": "plan", "stateData": {"goal": "v2"}})
    assert (await client.get(url)).json()["stateData"]["goal"] == "v2"
    assert calls == 2
    kept = [key for key in app.state.snapshots._items if key[0] == rid]
    assert len(kept) == 1 and kept[0][1] == (await store.get_run(rid)).version


async def test_replan_decision_runs_the_new_steps_when_the_server_has_a_replanner(store_url):
    """With a replanner for the workflow, replan is offered and the run finishes on the new
    steps; the report's text offers it too."""
    from tests.server.flows import note
    from tether.runtime import Step

    seen: list[str] = []

    def replanner(report: Any, ctx: Any) -> list[Step]:
        seen.append(report.item_id)
        return [Step(id="fetch_cached", fn=note("fetch_cached")), Step(id="report", fn=note("report"))]

    async with serve(store_url, replanners={"failing": replanner}) as (client, app):
        rid = new_id("replan")
        await client.post("/api/runs", json={"workflow": "failing", "runId": rid})
        await wait_status(client, rid, "PAUSED")
        f = (await client.get(f"/api/runs/{rid}/failure")).json()
        assert [o["decision"] for o in f["options"]] == ["retry", "skip", "replan", "takeover", "abort"]
        assert "[replan]" in f["text"]
        r = await client.post(f"/api/runs/{rid}/failure/decision", json={"decision": "replan"})
        assert r.status_code == 202, r.text
        snap = await wait_status(client, rid, "COMPLETED")
        assert seen == ["fetch"]
        assert snap["stateData"]["fetch_cached_output"] == "fetch_cached"
        assert runtime_state(snap["stateData"])["todo"]["fetch_cached"]["status"] == "done"


async def test_snapshot_cache_stays_within_its_bound():
    """Least recently used entries go first, gzip bodies count, an oversized body is served
    but not kept."""
    from tether.server.deps import SnapshotCache

    cache = SnapshotCache(max_bytes=3000)

    async def body(n: int) -> tuple[bytes, bool]:
        return b"x" * n, True

    for run in ("a", "b", "c"):
        await cache.fetch(run, 1, "v", lambda: body(1000))
    assert cache.size == 3000
    cache.get("a", 1, "v")  # a is now the most recent
    entry = await cache.fetch("d", 1, "v", lambda: body(1000))
    assert {k[0] for k in cache._items} == {"a", "c", "d"}
    await entry.gzipped()
    cache.trim()
    assert cache.size <= 3000 and "c" not in {k[0] for k in cache._items}
    big = await cache.fetch("e", 1, "v", lambda: body(2000))
    assert len(big.body) == 2000 and cache.get("e", 1, "v") is None


async def test_takeover_decision_records_the_note_and_continues(api):
    """takeover: a person did the failed step by hand; the note is required, recorded in the
    event log and the history, and the run goes on from the next step."""
    client, app = api
    rid = new_id("takeover")
    await client.post("/api/runs", json={"workflow": "failing", "runId": rid})
    await wait_status(client, rid, "PAUSED")
    bare = await client.post(f"/api/runs/{rid}/failure/decision", json={"decision": "takeover"})
    assert bare.status_code in (400, 422) and "takeover needs a note" in bare.text
    note = "fetched the dataset by hand into /data/test-data"
    r = await client.post(f"/api/runs/{rid}/failure/decision", json={"decision": "takeover", "note": note})
    assert r.status_code == 202
    snap = await wait_status(client, rid, "COMPLETED")
    state = snap["stateData"]
    taken = [h for h in snap["executionHistory"] if h.get("status") == "takeover"]
    assert [(h["node"], h["note"]) for h in taken] == [("fetch", note)]
    log = runtime_state(state)["event_log"]
    assert any(e["kind"] == "takeover" and e["detail"]["note"] == note for e in log)
    assert runtime_state(state)["todo"]["fetch"]["status"] == "done"
