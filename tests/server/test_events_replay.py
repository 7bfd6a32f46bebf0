"""Last-Event-ID across a server restart: what the client missed comes from the store."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tether.runtime import runtime_reducers
from tether.state import ExecutionContext, RunStatus
from tether.stores import open_store


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def serving(url: str, *workflows: str) -> Iterator[str]:
    """A real `tether serve` process on ``url``; terminated (a restart) on exit."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    extra = [arg for target in workflows for arg in ("--workflow", target)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.app", "serve", "--store", url, "--port", str(port), *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{base}/api/runs?limit=1", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None, "tether serve did not start"
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=20)


async def _events(
    base: str, run_id: str | None, last: int | None, until: Any, then: Any = None
) -> list[dict[str, Any]]:
    """Read a run's stream (every run's when ``run_id`` is None) until ``until(event)``;
    ``then()`` runs once it is connected."""
    headers = {} if last is None else {"Last-Event-ID": str(last)}
    path = "/api/events" if run_id is None else f"/api/runs/{run_id}/events"
    got: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(base_url=base, timeout=20) as client,
        client.stream("GET", path, headers=headers) as resp,
    ):
        assert resp.status_code == 200
        if then is not None:
            await then(client)
        block: dict[str, str] = {}
        async for line in resp.aiter_lines():
            if line:
                key, _, value = line.partition(": ")
                block[key] = value
                continue
            if "id" in block:
                event = {"id": int(block["id"]), "event": block["event"], **json.loads(block["data"])}
                got.append(event)
                if until(event):
                    return got
            block = {}
    raise AssertionError(f"stream ended without the awaited event: {got}")


def _own(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Without the change feed's live ``checkpoint`` events (they come whenever its poll
    sees the version, before or after the route's own event)."""
    return [e for e in events if e["detail"].get("source") != "feed"]


async def _patch(base: str, run_id: str, goal: str) -> int:
    async with httpx.AsyncClient(base_url=base, timeout=20) as client:
        r = await client.patch(
            f"/api/runs/{run_id}/snapshot", json={"nodeId": "plan", "stateData": {"goal": goal}}
        )
        assert r.status_code == 200, r.text
        version: int = r.json()["version"]
        return version


def _updated(event: dict[str, Any]) -> bool:
    return bool(event["event"] == "state_updated")


async def test_last_event_id_after_a_restart_replays_only_the_missed_events(tmp_path: Path):
    """Server A sends u1 live; u2 happens with nobody listening; A stops; server B makes u3.
    Reconnecting to B with u1's id gives u2 (from the store) then u3, nothing before."""
    url = f"sqlite:///{tmp_path}/tether.db"
    rid = "replay-run"
    async with open_store(url) as store:
        ctx = ExecutionContext(rid, {"goal": "start"}, reducers=runtime_reducers())
        await store.commit(ctx, node_id="plan", status=RunStatus.PAUSED)

    with serving(url) as base:
        v1: list[int] = []

        async def first_update(_: httpx.AsyncClient) -> None:
            v1.append(await _patch(base, rid, "u1"))

        live = await _events(base, rid, None, _updated, first_update)
        seen = live[-1]["id"]
        v2 = await _patch(base, rid, "u2")

    with serving(url) as base:
        v3 = await _patch(base, rid, "u3")
        missed = _own(await _events(base, rid, seen, _updated))
        assert [e["id"] for e in missed] == sorted({e["id"] for e in missed})
        assert all(e["id"] > seen for e in missed)
        assert [(e["event"], e["detail"].get("version")) for e in missed] == [
            ("checkpoint", v2),
            ("state_updated", None),
        ]
        assert v1[0] < v2 < v3
        everything = _own(await _events(base, None, seen, _updated))
        assert [(e["event"], e["runId"]) for e in everything] == [("checkpoint", rid), ("state_updated", rid)]

        # and from the last id received: nothing old again, only what comes next
        async def fourth_update(_: httpx.AsyncClient) -> None:
            await asyncio.sleep(0.2)
            await _patch(base, rid, "u4")

        after = _own(await _events(base, rid, missed[-1]["id"], _updated, fourth_update))
        assert [e["event"] for e in after] == ["state_updated"] and after[0]["id"] > missed[-1]["id"]


async def test_decisions_and_versions_made_while_disconnected_replay_from_the_run_record(tmp_path: Path):
    """A failed step, then a skip decided with nobody listening, then a restart: the
    reconnecting client gets the decision from the run's event log and the versions that
    followed, in time order, then the run's status."""
    url = f"sqlite:///{tmp_path}/tether.db"
    flows = "tests.server.flows:failing_flow"
    rid = "replay-decision"
    with serving(url, flows) as base:
        async with httpx.AsyncClient(base_url=base, timeout=20) as client:
            assert (
                await client.post("/api/runs", json={"workflow": "failing", "runId": rid})
            ).status_code == 202
        live = await _events(base, rid, 1, lambda e: e["event"] == "paused")
        seen = live[-1]["id"]
        async with httpx.AsyncClient(base_url=base, timeout=20) as client:
            r = await client.post(f"/api/runs/{rid}/failure/decision", json={"decision": "skip"})
            assert r.status_code == 202
            for _ in range(200):
                if (await client.get(f"/api/runs/{rid}/snapshot")).json()["status"] == "COMPLETED":
                    break
                await asyncio.sleep(0.05)
    with serving(url, flows) as base:
        missed = await _events(
            base, rid, seen, lambda e: e["event"] == "checkpoint" and e["detail"]["status"] == "COMPLETED"
        )
    kinds = [e["event"] for e in missed]
    assert "decision" in kinds and kinds.index("decision") < len(kinds) - 1  # the COMPLETED version last
    decision = missed[kinds.index("decision")]
    assert decision["detail"] == {"decision": "skip"} and decision["step"] == "fetch"
    assert all(e["id"] > seen for e in missed) and [e["id"] for e in missed] == sorted(
        {e["id"] for e in missed}
    )
    assert not any(e["event"] == "step_failed" for e in missed)  # before the id the client sent
