"""Bearer tokens, scopes, namespaces, limits and what error responses never contain."""

from __future__ import annotations

import pytest

from tests.server.conftest import bearer, new_id, serve
from tests.server.test_api import paused_run
from tether.errors import ConfigError
from tether.server import ServerSettings, hash_token, new_token
from tether.server.config import is_loopback, parse_tokens


async def test_no_token_is_401_and_unknown_token_is_401(secured):
    """Every API route needs a token once tokens are configured."""
    client, app = secured
    rid = new_id()
    await paused_run(app, rid)
    r = await client.get(f"/api/runs/{rid}/snapshot")
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    assert (await client.get("/api/runs", headers={"Authorization": "Bearer nope"})).status_code == 401
    assert (await client.get(f"/api/runs/{rid}/snapshot", headers=bearer("reader"))).status_code == 200


async def test_read_scope_cannot_operate_and_operate_can(secured):
    """read gets 403 on changes (and nothing changes); operate may change a paused run."""
    client, app = secured
    rid = new_id()
    version = await paused_run(app, rid)
    body = {"nodeId": "plan", "stateData": {"goal": "x"}}
    for path, payload in [
        (f"/api/runs/{rid}/pause", None),
        (f"/api/runs/{rid}/resume", None),
        (f"/api/runs/{rid}/checkpoints/1/rollback", None),
    ]:
        r = await client.post(path, json=payload, headers=bearer("reader"))
        assert r.status_code == 403, path
        assert "operate" in r.json()["detail"]
    r = await client.patch(f"/api/runs/{rid}/snapshot", json=body, headers=bearer("reader"))
    assert r.status_code == 403
    assert (await app.state.store.get_run(rid)).version == version
    r = await client.patch(f"/api/runs/{rid}/snapshot", json=body, headers=bearer("operator"))
    assert r.status_code == 200


async def test_namespace_token_never_sees_other_runs(secured):
    """A team-a token lists, reads and changes only team-a:… runs; others are 404."""
    client, app = secured
    mine, theirs = f"team-a:{new_id()}", f"team-b:{new_id()}"
    await paused_run(app, mine)
    await paused_run(app, theirs)
    team = bearer("team")
    listed = {r["runId"] for r in (await client.get("/api/runs?limit=500", headers=team)).json()["items"]}
    assert mine in listed and theirs not in listed
    assert all(r.startswith("team-a:") for r in listed)
    assert (await client.get(f"/api/runs/{mine}/snapshot", headers=team)).status_code == 200
    for method, path, body in [
        ("GET", f"/api/runs/{theirs}/snapshot", None),
        ("PATCH", f"/api/runs/{theirs}/snapshot", {"nodeId": "a", "stateData": {"goal": "stolen"}}),
        ("POST", f"/api/runs/{theirs}/cancel", None),
        ("GET", f"/api/runs/{theirs}/checkpoints", None),
        ("POST", f"/api/runs/{mine}/checkpoints/1/fork", {"newRunId": f"team-b:{new_id()}"}),
    ]:
        r = await client.request(method, path, json=body, headers=team)
        assert r.status_code == 404, (method, path, r.text)
    assert (await app.state.store.snapshot(theirs)).state["goal"] == "ship"
    assert (await app.state.store.get_status(theirs)) == "PAUSED"
    admin = (await client.get("/api/runs?limit=500", headers=bearer("admin"))).json()["items"]
    assert theirs in {r["runId"] for r in admin}


async def test_oversized_and_malformed_bodies_are_clear_problems(sqlite_url):
    """413 past the limit (declared or streamed), 422 for bad JSON or shapes; no traceback."""
    async with serve(sqlite_url, max_body_bytes=1_000) as (client, app):
        rid = new_id()
        await paused_run(app, rid)
        big = {"nodeId": "plan", "stateData": {"blob": "x" * 5_000}}
        r = await client.patch(f"/api/runs/{rid}/snapshot", json=big)
        assert r.status_code == 413 and r.json()["type"].endswith("/body-too-large")

        async def chunks():
            for _ in range(10):
                yield b"x" * 500

        r = await client.patch(
            f"/api/runs/{rid}/snapshot", content=chunks(), headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 413
        for content in [b"{not json", b'{"nodeId": "plan"}', b'{"nodeId": "plan", "stateData": [1]}', b"[]"]:
            r = await client.patch(
                f"/api/runs/{rid}/snapshot", content=content, headers={"Content-Type": "application/json"}
            )
            assert r.status_code == 422, content
            assert r.headers["content-type"] == "application/problem+json"
            assert "Traceback" not in r.text and 'File "' not in r.text


def test_token_entries_are_hashes_with_scope_and_namespace(tmp_path):
    """A token file holds hashes; a plain token or an unknown scope is refused with the line."""
    token, entry = new_token("operate", "team-a", "ci")
    assert token not in entry and hash_token(token) in entry
    path = tmp_path / "tokens"
    path.write_text(f"# team tokens\n{entry}\n")
    (parsed,) = ServerSettings(api_tokens_file=str(path)).tokens()
    assert parsed.scope == "operate" and parsed.namespace == "team-a" and parsed.owns("team-a:x")
    assert not parsed.owns("team-ab:x") and parsed.allows("read") and not parsed.allows("admin")
    with pytest.raises(ConfigError, match="entry 1.*sha256"):
        parse_tokens("plain-secret scope=read", source="env")
    with pytest.raises(ConfigError, match="scope must be one of"):
        parse_tokens(f"{hash_token('a')} scope=root", source="env")
    with pytest.raises(ConfigError, match="cannot read the token file"):
        ServerSettings(api_tokens_file=str(tmp_path / "missing")).tokens()


def test_loopback_detection():
    """Only loopback addresses count as private to this machine."""
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.2") and not is_loopback("example.com")


async def test_cors_only_when_configured(sqlite_url):
    """No CORS headers by default; the configured origin gets them."""
    async with serve(sqlite_url) as (client, _):
        r = await client.get("/api/runs", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in r.headers
    async with serve(sqlite_url, cors_origins="https://ops.example") as (client, _):
        r = await client.get("/api/runs", headers={"Origin": "https://ops.example"})
        assert r.headers["access-control-allow-origin"] == "https://ops.example"
        assert "etag" in r.headers["access-control-expose-headers"].lower()  # a delta reader keeps it
        pre = await client.options(
            "/api/runs",
            headers={
                "Origin": "https://ops.example",
                "Access-Control-Request-Method": "GET",
                "Access-Control-Request-Headers": "if-none-match, a-im",
            },
        )
        assert pre.status_code == 200 and "a-im" in pre.headers["access-control-allow-headers"].lower()
        r = await client.get("/api/runs", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in r.headers
