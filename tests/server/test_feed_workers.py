"""Holders and workers from leases written as runners on other hosts write them: grouped
by process, dead leases shown as INTERRUPTED with no holder, the bounded read."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.server.conftest import new_id, serve
from tether.runtime import runtime_reducers
from tether.runtime.holders import live_workers
from tether.state import ExecutionContext, RunStatus
from tether.state.reserved import runtime_update
from tether.stores import CheckpointStore, open_store


def lease(host: str, pid: int, *, expires_in: float, renewed_ago: float = 2.0) -> dict[str, Any]:
    now = time.time()
    return {
        "owner": f"{host}:{pid}:abcd1234",
        "host": host,
        "pid": pid,
        "expires_at": now + expires_in,
        "renewed_at": now - renewed_ago,
    }


async def held(store: CheckpointStore, run_id: str, the_lease: dict[str, Any] | None) -> None:
    ctx = ExecutionContext(run_id, {"goal": "x"}, reducers=runtime_reducers())
    ctx.merge(runtime_update(lease=the_lease))
    await store.commit(ctx, node_id="build", status=RunStatus.RUNNING)


async def test_workers_group_live_leases_by_process_and_dead_ones_read_interrupted(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/t.db"
    a1, a2, b1, dead = (new_id(p) for p in ("a1", "a2", "b1", "dead"))
    async with open_store(url) as store:
        await held(store, a1, lease("host-a", 4242, expires_in=300))
        await held(store, a2, lease("host-a", 4242, expires_in=200, renewed_ago=30))
        await held(store, b1, lease("host-b", 77, expires_in=300))
        await held(store, dead, lease("host-b", 78, expires_in=-5))  # it stopped renewing
    async with serve(url) as (client, _app):
        body = (await client.get("/api/workers")).json()
        assert body["complete"] is True
        by_pid = {(w["host"], w["pid"]): w for w in body["items"]}
        assert set(by_pid) == {("host-a", 4242), ("host-b", 77)}
        runs_a = {r["runId"]: r for r in by_pid["host-a", 4242]["runs"]}
        assert set(runs_a) == {a1, a2} and by_pid["host-a", 4242]["owners"] == ["host-a:4242:abcd1234"]
        assert 29 <= runs_a[a2]["age"] < 60 and 100 < runs_a[a2]["expiresIn"] <= 200
        assert runs_a[a1]["version"] == 1 and runs_a[a1]["nodeId"] == "build"

        items = {r["runId"]: r for r in (await client.get("/api/runs")).json()["items"]}
        assert items[b1]["status"] == "RUNNING" and items[b1]["holder"]["host"] == "host-b"
        assert items[b1]["holder"]["pid"] == 77 and items[b1]["holder"]["expiresIn"] > 200
        assert items[dead]["status"] == "INTERRUPTED" and items[dead]["holder"] is None


async def test_the_workers_read_is_bounded_and_says_so(tmp_path: Path):
    """Past its limit the read stops and says it is incomplete; runs not updated within the
    horizon are not read at all (their leases would have been renewed since)."""
    url = f"sqlite:///{tmp_path}/t.db"
    async with open_store(url) as store:
        ids = [new_id("w") for _ in range(3)]
        for i, run_id in enumerate(ids):
            await held(store, run_id, lease("host-c", 100 + i, expires_in=300))
        cut = await live_workers(store, limit=2)
        assert cut.complete is False and len(cut.workers) == 2
        whole = await live_workers(store, limit=3)
        assert whole.complete is True and {w.pid for w in whole.workers} == {100, 101, 102}
        stale = await live_workers(store, within=0.0)
        assert stale.complete is True and stale.workers == []
