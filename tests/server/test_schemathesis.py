"""Schemathesis fuzzes every operation of the OpenAPI document: no answer is a server error.

Runs against a real uvicorn on loopback (SQLite), a few examples per operation to stay
short. The event streams are left out: a valid request never ends.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from tests.server.flows import context_flow, failing_flow, plan_flow
from tether.server import ServerSettings, create_app

schema = schemathesis.openapi.from_dict(create_app(ServerSettings(), tokens=[]).openapi())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import uvicorn

    path: Path = tmp_path_factory.mktemp("fuzz") / "fuzz.db"
    app = create_app(
        ServerSettings(store_url=f"sqlite:///{path}"),
        tokens=[],
        workflows=[plan_flow(), failing_flow(), context_flow()],
    )
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


@schema.exclude(tag="events").parametrize()
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_operation_answers_with_a_server_error(case, base_url):
    """Generated requests, valid and not, never get a 5xx or a traceback."""
    response = case.call_and_validate(base_url=base_url, checks=[not_a_server_error], timeout=10)
    assert "Traceback" not in response.text
