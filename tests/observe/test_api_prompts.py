"""The prompts API: calls with layers and tokens, the exact messages, the diff, a replay."""

from __future__ import annotations

import httpx

from tests.observe.test_prompt_records import long_run
from tether.server import ServerSettings, create_app


async def client_for(store):
    app = create_app(ServerSettings(), store=store, tokens=(), dashboard=False)
    transport = httpx.ASGITransport(app=app)
    return app, httpx.AsyncClient(
        transport=transport, base_url="http://127.0.0.1", headers={"X-Tether-Client": "tests"}
    )


async def test_prompts_api_lists_shows_diffs_and_replays(store, tmp_path):
    """Each route answers from the stored records; a replay leaves the run unchanged."""
    model, result = await long_run(store, tmp_path, 6)
    rid = result.run_id
    app, client = await client_for(store)
    async with app.router.lifespan_context(app), client:
        listed = (await client.get(f"/api/runs/{rid}/prompts")).json()
        assert [c["iteration"] for c in listed["calls"]] == list(range(1, 8))
        assert listed["calls"][0]["layers"]["System"] > 0 and listed["calls"][0]["tokens"] > 0

        one = (await client.get(f"/api/runs/{rid}/prompts/4")).json()
        assert one["messages"] == model.calls[3]
        assert [i["id"] for i in one["items"]][:2] == ["system", "goal"]

        diff = (await client.get(f"/api/runs/{rid}/prompts/4/diff")).json()
        assert diff["before"] == 3 and {"call-3", "result-3"} <= {e["id"] for e in diff["entered"]}
        far = (await client.get(f"/api/runs/{rid}/prompts/4/diff", params={"against": 1})).json()
        three = {f"{kind}-{i}" for kind in ("call", "result") for i in (1, 2, 3)}
        assert {e["id"] for e in far["entered"]} == three | {"instant-checkpoint"}  # call 1 had none

        version = (await store.get_run(rid)).version
        edited = [*one["messages"][:2], {"role": "user", "content": "Just say done."}]
        r = await client.post(
            f"/api/runs/{rid}/prompts/4/replay",
            json={"messages": edited, "reply": {"action": "done", "message": "edited"}},
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["edited"] is True and "edited" in body["newReply"] and "seq 3" in body["oldReply"]
        assert (await store.get_run(rid)).version == version  # the run is untouched

        no_model = await client.post(f"/api/runs/{rid}/prompts/4/replay", json={})
        assert no_model.status_code == 400 and "replay model" in no_model.text
        missing = await client.get(f"/api/runs/{rid}/prompts/99")
        assert missing.status_code == 422 and "iteration 99" in missing.text
        assert (await client.get("/api/runs/nope/prompts")).status_code == 404
