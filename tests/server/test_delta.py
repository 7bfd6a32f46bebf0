"""Delta reads of a snapshot (RFC 3229): ``If-None-Match`` naming an older version with
``A-IM: tether-diff`` answers ``226 IM Used`` with only what changed."""

from __future__ import annotations

import asyncio
import copy
import gzip
import json
from typing import Any

import pytest
import zstandard

from tests.server.conftest import bearer, new_id
from tests.server.test_api import paused_run
from tests.server.test_encodings import BROWSER, raw_get, until_zstd
from tether.server.api_runs import delta_base, wants_delta
from tether.server.diff import diff_states

DELTA = {"A-IM": "tether-diff"}


def apply_change(old: Any, change: dict[str, Any]) -> Any:
    """What a client does with one patch: the dashboard's rules, in Python."""
    if change["op"] == "append":
        return [*old, *change["appended"]]
    if change["op"] == "merge":
        new = {k: v for k, v in old.items() if k not in change["removed"]}
        new.update(change["added"])
        new.update({k: c["after"] for k, c in change["changed"].items()})
        return new
    return change["after"]


def apply_delta(snap: dict[str, Any], delta: dict[str, Any], keys: str = "camel") -> dict[str, Any]:
    state_key, history_key = (
        ("stateData", "executionHistory") if keys == "camel" else ("state_data", "execution_history")
    )
    patch = delta[state_key]
    state = {k: v for k, v in snap[state_key].items() if k not in patch["removed"]}
    state.update(patch["added"])
    for key, change in patch["changed"].items():
        state[key] = apply_change(state[key], change)
    out = {k: v for k, v in delta.items() if k not in ("fromVersion", "from_version")}
    out[state_key] = state
    out[history_key] = apply_change(snap[history_key], delta[history_key])
    return out


async def step(client: Any, rid: str, state: dict[str, Any]) -> None:
    r = await client.patch(f"/api/runs/{rid}/snapshot", json={"nodeId": "work", "stateData": state})
    assert r.status_code == 200, r.text


async def test_a_client_holding_an_older_version_gets_only_what_changed(api):
    """One appended message comes as an append; the patched snapshot equals a full read."""
    client, app = api
    rid = new_id()
    await paused_run(app, rid, notes={"a": 1, "b": 2}, big=["x" * 100] * 200)
    url = f"/api/runs/{rid}/snapshot"
    first = await client.get(url)
    held, tag = first.json(), first.headers["etag"]
    await step(client, rid, {"messages": ["a new one"], "goal": "ship it", "notes": {"a": 1, "c": 3}})

    resp = await client.get(url, headers={"If-None-Match": tag, **DELTA})
    assert resp.status_code == 226
    assert resp.headers["im"] == "tether-diff"
    assert resp.headers["delta-base"] == tag
    assert "no-store" in resp.headers["cache-control"]
    delta = resp.json()
    assert delta["fromVersion"] == held["version"] and delta["version"] == held["version"] + 1
    changed = delta["stateData"]["changed"]
    assert changed["messages"] == {"op": "append", "appended": ["a new one"]}
    assert changed["goal"] == {"op": "set", "after": "ship it"}  # a patch: no old values
    assert changed["notes"] == {"op": "merge", "added": {"c": 3}, "removed": ["b"], "changed": {}}
    assert "big" not in changed and len(resp.content) < len(first.content) / 5

    full = await client.get(url, headers={"Accept-Encoding": "identity"})
    assert apply_delta(held, delta) == full.json()
    assert resp.headers["etag"] == full.headers["etag"]  # the tag of what the client now holds
    again = await client.get(url, headers={"If-None-Match": resp.headers["etag"], **DELTA})
    assert again.status_code == 304


async def test_delta_over_several_versions_and_in_snake_case(api):
    client, app = api
    rid = new_id()
    await paused_run(app, rid)
    url = f"/api/runs/{rid}/snapshot?keys=snake"
    first = await client.get(url)
    held = first.json()
    for i in range(3):
        await step(client, rid, {"messages": [f"m{i}"]})
    resp = await client.get(url, headers={"If-None-Match": first.headers["etag"], **DELTA})
    assert resp.status_code == 226
    delta = resp.json()
    assert delta["from_version"] == held["version"] and delta["version"] == held["version"] + 3
    assert delta["state_data"]["changed"]["messages"]["appended"] == ["m0", "m1", "m2"]
    assert apply_delta(held, delta, "snake") == (await client.get(url)).json()


async def test_without_a_usable_base_the_answer_is_the_full_body(api):
    """No A-IM, another key style, an unknown or newer version, a foreign tag: 200 in full."""
    client, app = api
    rid = new_id()
    version = await paused_run(app, rid)
    url = f"/api/runs/{rid}/snapshot"
    old_tag = (await client.get(url)).headers["etag"]
    await step(client, rid, {"messages": ["later"]})
    full = (await client.get(url)).json()
    newer = '"999-' + old_tag.strip('"').split("-", 1)[1] + '"'
    for headers in (
        {"If-None-Match": old_tag},  # no A-IM
        {"If-None-Match": old_tag, "A-IM": "vcdiff"},
        {"If-None-Match": old_tag, "A-IM": "tether-diff;q=0"},
        {"If-None-Match": old_tag.replace("camel", "snake"), **DELTA},
        {"If-None-Match": newer, **DELTA},  # not older than now
        {"If-None-Match": '"not-a-tag"', **DELTA},
        {"If-None-Match": "", **DELTA},
        DELTA,
    ):
        resp = await client.get(url, headers=headers)
        assert resp.status_code == 200, headers
        assert resp.json() == full and "im" not in resp.headers
    # a version the store no longer has: the full body too
    await app.state.store.prune(rid, keep=1)
    gone = await client.get(url, headers={"If-None-Match": old_tag, **DELTA})
    assert gone.status_code == 200 and gone.json() == full
    assert version >= 1 and await app.state.store.load(rid, version) is None


async def test_a_run_created_again_under_the_same_id_matches_none_of_the_old_tags(api):
    """Deleted and started again, a run counts its versions from 1 again: a tag of the old
    run gives neither a 304 nor a delta, and no body cached for the old run is served."""
    client, app = api
    rid = new_id()
    await paused_run(app, rid, who="first")
    url = f"/api/runs/{rid}/snapshot"
    old = await client.get(url)
    await client.get(f"/api/runs/{rid}/context")  # cached per version too
    assert (await app.state.store.delete(rid)) is True
    await paused_run(app, rid, who="second")
    again = await client.get(url, headers={"If-None-Match": old.headers["etag"]})
    assert again.status_code == 200 and again.json()["stateData"]["who"] == "second"
    assert again.json()["version"] == old.json()["version"]  # same version number, new run
    assert again.headers["etag"] != old.headers["etag"]
    delta = await client.get(url, headers={"If-None-Match": old.headers["etag"], **DELTA})
    assert delta.status_code == 200 and delta.json() == again.json()


async def test_delta_bodies_are_compressed_and_built_once(api):
    """A large delta goes gzip or zstd as the client allows; every reader gets the same bytes."""
    client, app = api
    rid = new_id()
    await paused_run(app, rid)
    url = f"/api/runs/{rid}/snapshot"
    first = await client.get(url)
    held, tag = first.json(), first.headers["etag"]
    rows = [{"row": i, "text": f"line {i} of a long tool output"} for i in range(2000)]
    await step(client, rid, {"messages": rows})
    loads = 0
    store = app.state.store
    real = store.load

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal loads
        loads += 1
        return await real(*args, **kwargs)

    store.load = counted
    try:
        resp, raw = await raw_get(client, url, {"If-None-Match": tag, "Accept-Encoding": "gzip", **DELTA})
        assert resp.status_code == 226 and resp.headers["content-encoding"] == "gzip"
        delta = json.loads(gzip.decompress(raw))
        assert delta["stateData"]["changed"]["messages"]["appended"] == rows
        for _ in range(3):
            again, raw_again = await raw_get(
                client, url, {"If-None-Match": tag, "Accept-Encoding": "gzip", **DELTA}
            )
            assert again.status_code == 226 and raw_again == raw
        assert loads == 1
    finally:
        store.load = real
    zst = await until_zstd(client, url)  # the full body's zstd build, then the delta's
    assert zst.status_code == 200
    for _ in range(200):
        resp, raw = await raw_get(client, url, {"If-None-Match": tag, "Accept-Encoding": BROWSER, **DELTA})
        if resp.headers.get("content-encoding") == "zstd":
            break
        await asyncio.sleep(0.02)
    assert resp.status_code == 226 and resp.headers["content-encoding"] == "zstd"
    delta = json.loads(zstandard.ZstdDecompressor().decompressobj().decompress(raw))
    assert apply_delta(held, delta) == (await client.get(url)).json()


async def test_a_new_status_alone_is_a_delta_with_no_state_changes(api):
    client, app = api
    rid = new_id()
    await paused_run(app, rid)
    url = f"/api/runs/{rid}/snapshot"
    first = await client.get(url)
    held = first.json()
    await step(client, rid, {"goal": "ship"})  # the same value: a new version, nothing changed
    resp = await client.get(url, headers={"If-None-Match": first.headers["etag"], **DELTA})
    assert resp.status_code == 226
    delta = resp.json()
    assert delta["stateData"] == {"added": {}, "removed": [], "changed": {}}
    assert delta["executionHistory"] == {"op": "append", "appended": []}
    assert apply_delta(held, delta) == (await client.get(url)).json()


async def test_delta_needs_a_token_and_the_run_s_namespace(secured):
    """A delta read is a snapshot read: 401 without a token, 404 for another namespace's run."""
    client, app = secured
    rid = f"team-b:{new_id()}"
    await paused_run(app, rid)
    url = f"/api/runs/{rid}/snapshot"
    tag = (await client.get(url, headers=bearer("reader"))).headers["etag"]
    await step_as(client, rid, {"messages": ["more"]}, bearer("operator"))
    assert (await client.get(url, headers={"If-None-Match": tag, **DELTA})).status_code == 401
    hidden = await client.get(url, headers={"If-None-Match": tag, **DELTA, **bearer("team")})
    assert hidden.status_code == 404 and hidden.headers["content-type"] == "application/problem+json"
    seen = await client.get(url, headers={"If-None-Match": tag, **DELTA, **bearer("reader")})
    assert seen.status_code == 226


async def step_as(client: Any, rid: str, state: dict[str, Any], headers: dict[str, str]) -> None:
    r = await client.patch(
        f"/api/runs/{rid}/snapshot", json={"nodeId": "work", "stateData": state}, headers=headers
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, False),
        ("tether-diff", True),
        ("vcdiff, Tether-Diff", True),
        ("tether-diff;q=0", False),
        ("tether-diff; q=0.5", True),
        ("tether-diff;q=0.000", False),
        ("tether-diff;q=x", False),
        ("gzip", False),
    ],
)
def test_a_im_names_the_diff(header: str | None, expected: bool) -> None:
    assert wants_delta(header) is expected


def test_the_delta_base_is_the_newest_older_version_of_the_same_key_style() -> None:
    tags = (
        '"3-PAUSED-0-camel-b1", W/"5-RUNNING-1-camel-b1-zst", "6-PAUSED-0-snake-b1-gz", '
        '"7-PAUSED-0-camel-b0", "9-PAUSED-0-camel-b1", junk'
    )
    assert delta_base(tags, "camel", 8, "b1") == 5
    assert delta_base(tags, "snake", 8, "b1") == 6
    assert delta_base(tags, "camel", 8, "b0") == 7  # only the tags of the same run count
    assert delta_base(tags, "camel", 3, "b1") is None
    assert delta_base(None, "camel", 8, "b1") is None
    assert delta_base('"99999999999999999999999-PAUSED-0-camel-b1"', "camel", 8, "b1") is None


def test_the_patch_form_of_the_diff_leaves_the_old_values_out() -> None:
    before = {"l": [1, 2], "d": {"k": 1, "j": 2}, "s": "a", "gone": 1}
    after = {"l": [1, 2, 3], "d": {"k": 2, "j": 2}, "s": "b", "new": 1}
    patch = diff_states(copy.deepcopy(before), after, with_before=False)
    assert patch == {
        "added": {"new": 1},
        "removed": ["gone"],
        "changed": {
            "d": {"op": "merge", "added": {}, "removed": [], "changed": {"k": {"after": 2}}},
            "l": {"op": "append", "appended": [3]},
            "s": {"op": "set", "after": "b"},
        },
    }
    review = diff_states(before, after)
    assert review["changed"]["s"] == {"op": "set", "before": "a", "after": "b"}
