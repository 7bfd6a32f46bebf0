"""Schemathesis fuzzes every operation of the OpenAPI document: no answer is a server error.

Runs against a real uvicorn on loopback, on SQLite and on PostgreSQL, a few examples per
operation to stay short. The event streams are left out: a valid request never ends.

Random run ids only ever reach the 404 branch, so most cases are pointed at a real run
made for that case: paused (with a context window near 75%), waiting for a failure
decision, failed (a replan that gave up), or completed. Run ids the fuzzer sends in
bodies get a prefix of this session, so the runs it makes can be removed afterwards.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from tests.server.flows import context_flow, failing_flow, plan_flow
from tests.stores.conftest import require_url
from tether.server import ServerSettings, create_app

schema = schemathesis.openapi.from_dict(create_app(ServerSettings(), tokens=[]).openapi())

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,150}$")
KINDS = ("paused", "pending", "failed", "completed", None)
"""What each case's run is, in turn (None: the fuzzer's own id)."""
_turn = itertools.cycle(KINDS)
SEEN: Counter[tuple[str | None, int]] = Counter()
"""(kind of run, status) of every answer to an operation on a run."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _give_up(report: Any, ctx: Any) -> None:
    return None  # a replanner with nothing better: the run is marked FAILED


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    import uvicorn

    path: Path = tmp_path_factory.mktemp("fuzz")
    url = require_url(str(request.param), path)
    prefix = f"fz{uuid.uuid4().hex[:8]}-"
    app = create_app(
        ServerSettings(store_url=url),
        tokens=[],
        workflows=[plan_flow(), failing_flow(), context_flow()],
        replanners={"failing": _give_up},
    )
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=10, headers={"X-Tether-Client": "fuzz"}) as client:
            yield {"base": base, "prefix": prefix, "client": client}
    finally:
        server.should_exit = True
        thread.join(10)
        asyncio.run(_remove(url, prefix))


async def _remove(url: str, prefix: str) -> None:
    from tether.stores import open_store

    async with open_store(url) as store:
        offset = 0
        while True:
            batch = await store.list_runs(limit=500, offset=offset)
            for info in batch:
                if info.run_id.startswith(prefix):
                    await store.delete(info.run_id)
            if len(batch) < 500:
                return
            offset += 500


def _wait(client: httpx.Client, run_id: str, want: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        r = client.get(f"/api/runs/{run_id}/snapshot", headers={"Accept-Encoding": "identity"})
        if r.status_code == 200 and r.json()["status"] == want:
            return
        assert time.monotonic() < deadline, f"{run_id} never reached {want}: {r.text[:300]}"
        time.sleep(0.05)


def seed(client: httpx.Client, prefix: str, kind: str) -> str:
    """A new run in the state ``kind`` names, made through the API."""
    rid = f"{prefix}{kind}-{uuid.uuid4().hex[:8]}"
    workflow = {"paused": "context", "completed": "plan"}.get(kind, "failing")
    assert client.post("/api/runs", json={"workflow": workflow, "runId": rid}).status_code == 202
    _wait(client, rid, "COMPLETED" if kind == "completed" else "PAUSED")
    if kind == "failed":
        r = client.post(f"/api/runs/{rid}/failure/decision", json={"decision": "replan"})
        assert r.status_code == 202, r.text
        _wait(client, rid, "FAILED")
    return rid


def _prefixed(body: Any, prefix: str) -> None:
    if isinstance(body, dict):
        for key in ("runId", "newRunId"):
            value = body.get(key)
            if isinstance(value, str) and RUN_ID.match(value):
                body[key] = prefix + value


@schema.exclude(tag="events").parametrize()
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_operation_answers_with_a_server_error(case, server):
    """Generated requests, valid and not, never get a 5xx or a traceback; most of those
    on one run address a real run in one of four states."""
    _prefixed(case.body, server["prefix"])
    kind = None
    if case.path_parameters and "run_id" in case.path_parameters:
        kind = next(_turn)
        if kind is not None:
            case.path_parameters["run_id"] = seed(server["client"], server["prefix"], kind)
            if "version" in case.path_parameters:
                case.path_parameters["version"] = 1
    response = case.call_and_validate(
        base_url=server["base"], checks=[not_a_server_error], timeout=10, headers={"X-Tether-Client": "fuzz"}
    )
    assert "Traceback" not in response.text
    if case.path_parameters and "run_id" in case.path_parameters:
        SEEN[(kind, response.status_code)] += 1


def test_the_fuzzing_reached_real_runs():
    """The fuzz above got past the run lookup: successes and refusals on seeded runs of
    every kind, not only 404s."""
    if not SEEN:
        pytest.skip("the fuzz test did not run in this session")
    for kind in KINDS[:-1]:
        statuses = {status for (k, status), _n in SEEN.items() if k == kind}
        assert statuses - {404}, f"{kind} runs only ever answered 404"
    assert any(200 <= status < 300 for (k, status) in SEEN if k is not None)
    assert any(status in (409, 412) for (k, status) in SEEN if k is not None)
