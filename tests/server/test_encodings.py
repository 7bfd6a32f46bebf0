"""Snapshot bodies in zstd, gzip or as they are: negotiation, ETags, the background build."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
import zstandard

from tests.server.conftest import new_id
from tests.server.test_api import paused_run
from tether.server import deps
from tether.server.api_runs import negotiate
from tether.server.deps import SnapshotCache

BROWSER = "gzip, deflate, br, zstd"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("", ["identity"]),
        (BROWSER, ["zstd", "gzip", "identity"]),
        ("gzip", ["gzip", "identity"]),
        ("zstd", ["zstd", "identity"]),
        ("br", ["identity"]),
        ("gzip;q=1, zstd;q=0.5", ["gzip", "zstd", "identity"]),
        ("zstd;q=0, gzip", ["gzip", "identity"]),
        ("zstd;q=0.0, gzip;q=0.000", ["identity"]),
        ("gzip;q=0, identity", ["identity"]),
        ("*", ["zstd", "gzip", "identity"]),
        ("*;q=0, gzip", ["gzip"]),
        ("zstd, identity;q=0", ["zstd"]),
        ("ZSTD ; Q=0.8 , Gzip", ["gzip", "zstd", "identity"]),
        ("gzip;q=abc, zstd", ["zstd", "identity"]),
    ],
)
def test_accept_encoding_is_negotiated_by_q_then_by_body_size(header: str, expected: list[str]) -> None:
    assert negotiate(header) == expected


async def raw_get(client: Any, url: str, headers: dict[str, str]) -> tuple[Any, bytes]:
    """The response and its body as sent (not decoded by the client)."""
    async with client.stream("GET", url, headers=headers) as resp:
        raw = b"".join([chunk async for chunk in resp.aiter_raw()])
    return resp, raw


def decoded(coding: str, raw: bytes) -> Any:
    if coding == "zstd":
        return json.loads(zstandard.ZstdDecompressor().decompressobj().decompress(raw))
    if coding == "gzip":
        return json.loads(gzip.decompress(raw))
    return json.loads(raw)


def gated(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, list[int]]:
    """The zstd build waits for the returned event (a slow high-level build, on demand)."""
    gate, calls = threading.Event(), []
    real: Callable[[bytes], bytes] = deps.PACKERS["zstd"]

    def slow(body: bytes) -> bytes:
        calls.append(len(body))
        gate.wait(10)
        return real(body)

    monkeypatch.setitem(deps.PACKERS, "zstd", slow)
    return gate, calls


async def until_zstd(client: Any, url: str) -> Any:
    for _ in range(200):
        resp = await client.get(url, headers={"Accept-Encoding": BROWSER})
        if resp.headers.get("content-encoding") == "zstd":
            return resp
        await asyncio.sleep(0.05)
    raise AssertionError("the zstd body was never served")


async def test_every_encoding_decodes_to_the_same_json_with_its_own_etag_and_any_gives_304(api):
    client, app = api
    rid = new_id("enc")
    await paused_run(app, rid, notes=[f"note {i} " * 20 for i in range(300)])
    url = f"/api/runs/{rid}/snapshot"
    await until_zstd(client, url)
    seen: dict[str, tuple[Any, str, int]] = {}
    for header, coding in (("identity", "identity"), ("gzip", "gzip"), (BROWSER, "zstd"), ("", "identity")):
        resp, raw = await raw_get(client, url, {"Accept-Encoding": header})
        assert resp.status_code == 200 and resp.headers.get("content-encoding", "identity") == coding
        assert resp.headers["vary"] == "Accept-Encoding"
        seen[coding] = (decoded(coding, raw), resp.headers["etag"], len(raw))
    assert seen["zstd"][0] == seen["gzip"][0] == seen["identity"][0]
    assert seen["zstd"][0]["stateData"]["notes"][299].startswith("note 299")
    assert len({tag for _, tag, _ in seen.values()}) == 3
    assert seen["zstd"][2] < seen["gzip"][2] < seen["identity"][2] / 3
    for _, tag, _ in seen.values():
        for header in ("identity", "gzip", BROWSER):  # a tag from one encoding holds for all
            again = await client.get(url, headers={"If-None-Match": f"W/{tag}", "Accept-Encoding": header})
            assert again.status_code == 304 and again.headers["etag"] == tag, (tag, header)
    await client.patch(url, json={"nodeId": "plan", "stateData": {"goal": "changed"}})
    fresh = await client.get(url, headers={"If-None-Match": seen["zstd"][1], "Accept-Encoding": BROWSER})
    assert fresh.status_code == 200 and fresh.json()["stateData"]["goal"] == "changed"


async def test_gzip_is_served_while_the_zstd_build_runs_and_zstd_once_it_is_ready(api, monkeypatch):
    """A slow build never holds a request: gzip (or the plain body for a client without
    gzip) until the zstd body is made, built once however many ask."""
    gate, calls = gated(monkeypatch)
    client, app = api
    rid = new_id("enc")
    await paused_run(app, rid, notes=[f"note {i} " * 20 for i in range(300)])
    url = f"/api/runs/{rid}/snapshot"
    try:
        answers = await asyncio.wait_for(
            asyncio.gather(*(raw_get(client, url, {"Accept-Encoding": BROWSER}) for _ in range(10))), 5
        )
        assert {r.headers["content-encoding"] for r, _ in answers} == {"gzip"}
        only_zstd, raw = await raw_get(client, url, {"Accept-Encoding": "zstd"})
        assert "content-encoding" not in only_zstd.headers
        assert decoded("identity", raw) == decoded("gzip", answers[0][1])
        assert len(calls) == 1
    finally:
        gate.set()
    resp = await until_zstd(client, url)
    assert resp.json()["stateData"]["goal"] == "ship" and len(calls) == 1


async def test_one_slow_build_at_a_time_for_the_whole_server(api, monkeypatch):
    """A second run asking while the first run's build runs gets gzip and no build of its
    own; it gets one on a later request once the first is done."""
    gate, calls = gated(monkeypatch)
    client, app = api
    first, second = new_id("enc"), new_id("enc")
    for rid in (first, second):
        await paused_run(app, rid, notes=[f"{rid} {i} " * 20 for i in range(100)])
    try:
        for rid in (first, second):
            resp = await client.get(f"/api/runs/{rid}/snapshot", headers={"Accept-Encoding": BROWSER})
            assert resp.headers["content-encoding"] == "gzip"
        assert len(calls) == 1
    finally:
        gate.set()
    await until_zstd(client, f"/api/runs/{first}/snapshot")
    resp = await until_zstd(client, f"/api/runs/{second}/snapshot")
    assert resp.json()["conversationId"] == second and len(calls) == 2


async def test_a_failed_zstd_build_falls_back_and_is_tried_again(api, monkeypatch):
    client, app = api
    rid = new_id("enc")
    await paused_run(app, rid, notes=[f"note {i} " * 20 for i in range(100)])
    url = f"/api/runs/{rid}/snapshot"
    real = deps.PACKERS["zstd"]
    failures = [1]

    def flaky(body: bytes) -> bytes:
        if failures:
            failures.pop()
            raise MemoryError("no room")
        return real(body)

    monkeypatch.setitem(deps.PACKERS, "zstd", flaky)
    assert (await client.get(url, headers={"Accept-Encoding": BROWSER})).headers["content-encoding"] == "gzip"
    resp = await until_zstd(client, url)
    assert resp.json()["conversationId"] == rid and not failures


async def test_the_cache_bound_counts_the_zstd_bodies():
    """A zstd body made after its entry was kept counts: the cache trims when it lands; an
    entry the cache does not keep gets no slow build (nobody could reuse it)."""
    bodies = {run: json.dumps({"run": run, "rows": list(range(3000))}).encode() for run in "ab"}
    packed = deps.PACKERS["zstd"](bodies["a"])
    bound = len(bodies["a"]) + len(bodies["b"]) + len(packed) // 2
    cache = SnapshotCache(max_bytes=bound)

    async def body(run: str) -> tuple[bytes, bool]:
        return bodies[run], True

    entry = await cache.fetch("a", 1, "v", lambda: body("a"))
    await cache.fetch("b", 1, "v", lambda: body("b"))
    assert cache.size == len(bodies["a"]) + len(bodies["b"]) <= bound
    assert cache.packed_if_ready("a", 1, "v", entry, "zstd") is None and entry.building("zstd")
    made = await entry.packed("zstd")
    await asyncio.sleep(0)  # the build's done callback, which trims
    assert zstandard.ZstdDecompressor().decompress(made) == bodies["a"]
    assert entry.size == len(bodies["a"]) + len(made)
    assert cache.size <= bound and [k[0] for k in cache._items] == ["b"]
    unkept = await cache.fetch("c", 1, "v", _big)
    assert cache.packed_if_ready("c", 1, "v", unkept, "zstd") is None and not unkept.building("zstd")
    assert cache.size <= bound


async def _big() -> tuple[bytes, bool]:
    return b"y" * 30_000, True
