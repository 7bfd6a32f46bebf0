"""The snapshot fast path answers exactly as the route does, and only when the route would
have served the read: tokens, scopes, namespaces and the Host guard hold on it."""

from __future__ import annotations

import json
import random
from typing import Any

import httpx
import pytest

from tests.server.conftest import bearer, new_id, serve
from tests.server.test_api import paused_run
from tests.server.test_encodings import BROWSER, raw_get
from tether.server import fastpath
from tether.server.auth import COOKIE

SAME = ("etag", "content-encoding", "cache-control", "vary", "content-type", "im", "delta-base")


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The run ids the fast path served itself (not passed on to the route)."""
    served: list[str] = []
    real = fastpath.SnapshotFastPath._answer

    async def counting(self: Any, scope: Any, run_id: str, keys: str) -> Any:
        answer = await real(self, scope, run_id, keys)
        if answer is not None:
            served.append(run_id)
        return answer

    monkeypatch.setattr(fastpath.SnapshotFastPath, "_answer", counting)
    return served


async def test_the_fast_path_answers_byte_for_byte_as_the_route(sqlite_url, taken):
    """Full bodies in each coding, snake keys, 304 and the delta: the same status, headers
    and bytes whether the fast path or the route (an extra query parameter) answers."""
    async with serve(sqlite_url) as (client, app):
        rid = new_id("fast")
        await paused_run(app, rid, notes=[f"note {i} " * 20 for i in range(200)])
        url = f"/api/runs/{rid}/snapshot"
        held = (await client.get(url)).headers["etag"]
        await client.patch(url, json={"nodeId": "plan", "stateData": {"messages": ["one more"]}})
        cases: list[tuple[str, dict[str, str]]] = [
            ("", {"Accept-Encoding": "identity"}),
            ("", {"Accept-Encoding": "gzip"}),
            ("keys=snake", {"Accept-Encoding": "gzip"}),
            ("keys=camel", {"Accept-Encoding": "identity", "If-None-Match": held, "A-IM": "tether-diff"}),
        ]
        for query, headers in cases:
            taken.clear()
            fast, fast_raw = await raw_get(client, f"{url}?{query}", headers)
            assert taken == [rid], (query, headers)
            taken.clear()
            routed, routed_raw = await raw_get(client, f"{url}?{query}&via=route".lstrip("&"), headers)
            assert taken == []
            assert fast.status_code == routed.status_code in (200, 226)
            assert fast_raw == routed_raw
            assert {k: fast.headers.get(k) for k in SAME} == {k: routed.headers.get(k) for k in SAME}
            again = await client.get(f"{url}?{query}", headers={"If-None-Match": fast.headers["etag"]})
            assert again.status_code == 304 and again.headers["etag"] == fast.headers["etag"]
        taken.clear()
        assert (await client.get(f"/api/runs/{new_id('none')}/snapshot")).status_code == 404
        assert (await client.get(f"{url}?keys=kebab")).status_code == 422
        assert taken == []


async def test_tokens_scopes_and_namespaces_hold_on_the_fast_path(sqlite_url, taken):
    """No token, an unknown one or a Basic one: 401; another namespace's run: 404 as if it
    did not exist; a reader's bearer token (any case) or the dashboard's cookie: 200."""
    from tests.server.conftest import TOKENS

    async with serve(sqlite_url, tokens=list(TOKENS.values())) as (client, app):
        mine, theirs = f"team-a:{new_id()}", f"team-b:{new_id()}"
        await paused_run(app, mine)
        await paused_run(app, theirs)
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic dC1yZWFk"}):
            r = await client.get(f"/api/runs/{mine}/snapshot", headers=headers)
            assert r.status_code == 401 and r.headers["content-type"] == "application/problem+json"
            assert "stateData" not in r.text
        r = await client.get(f"/api/runs/{theirs}/snapshot", headers=bearer("team"))
        assert r.status_code == 404 and r.json()["type"].endswith("run-not-found")
        assert taken == []
        assert (await client.get(f"/api/runs/{mine}/snapshot", headers=bearer("team"))).status_code == 200
        lower = {"Authorization": "bearer t-read"}
        assert (await client.get(f"/api/runs/{theirs}/snapshot", headers=lower)).status_code == 200
        client.cookies.set(COOKIE, "t-read")
        assert (await client.get(f"/api/runs/{theirs}/snapshot")).status_code == 200
        assert taken == [mine, theirs, theirs]


async def test_the_host_guard_still_sees_fast_path_reads(sqlite_url, taken):
    """A rebinding page's Host is refused before the fast path is reached."""
    async with serve(sqlite_url) as (client, app):
        rid = new_id()
        await paused_run(app, rid)
        r = await client.get(f"/api/runs/{rid}/snapshot", headers={"Host": "evil.example"})
        assert r.status_code == 400 and "host" in r.json()["type"]
        assert taken == []


def big_notes(n_bytes: int) -> list[str]:
    """Varied text (a repeated character would make gzip's job trivial)."""
    rng = random.Random(7)
    words = [
        "deploy",
        "build",
        "retry",
        "timeout",
        "cache",
        "token",
        "prompt",
        "agent",
        "tool",
        "result",
        "summary",
    ]
    notes, size = [], 0
    while size < n_bytes:
        note = f"{len(notes)}: " + " ".join(rng.choices(words, k=rng.randint(5, 40)))
        notes.append(note)
        size += len(note) + 3
    return notes


async def test_a_large_body_goes_out_in_slices_and_arrives_whole(sqlite_url):
    """A 2 MB snapshot leaves as several body messages of at most the slice size, and a
    real uvicorn delivers it whole in every coding, with its Content-Length."""
    from tests.server.conftest import live
    from tether.server.deps import STREAM_CHUNK

    async with live(sqlite_url) as (base, app):
        rid = new_id("big")
        notes = big_notes(2_000_000)
        await paused_run(app, rid, notes=notes)
        path = f"/api/runs/{rid}/snapshot"
        sent: list[dict[str, Any]] = []
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"127.0.0.1"), (b"accept-encoding", b"identity")],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
            "state": {},
        }

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app(scope, receive, send)
        bodies = [m for m in sent if m["type"] == "http.response.body"]
        assert len(bodies) >= 4 and all(len(m["body"]) <= STREAM_CHUNK for m in bodies)
        assert [m.get("more_body", False) for m in bodies] == [True] * (len(bodies) - 1) + [False]
        whole = b"".join(bytes(m["body"]) for m in bodies)
        assert int(dict(sent[0]["headers"])[b"content-length"]) == len(whole)
        assert json.loads(whole)["stateData"]["notes"] == notes
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            for coding in ("identity", "gzip", BROWSER):
                r = await http.get(path, headers={"Accept-Encoding": coding})
                assert r.status_code == 200 and r.json()["stateData"]["notes"] == notes, coding
