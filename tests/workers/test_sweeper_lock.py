"""The sweeper's lock: one holder per queue across the fleet, released when its holder goes."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.workers.conftest import ROOT, broker_url
from tether.state import RunStatus
from tether.stores import open_store
from tether.workers.sweeper import BrokerLock


@pytest.mark.parametrize("kind", ["amqp", "redis"])
def test_one_holder_at_a_time_and_the_next_takes_over_on_release(kind: str) -> None:
    url = broker_url(kind)
    name = f"tether.sweeper.test-{uuid.uuid4().hex[:8]}"
    first, second = BrokerLock(url, name, ttl=5), BrokerLock(url, name, ttl=5)
    try:
        assert first.acquire() and first.acquire()  # kept by its holder
        assert not second.acquire()
        first.release()
        assert second.acquire()
        assert not first.acquire()
    finally:
        first.release()
        second.release()


async def test_submit_with_the_broker_down_says_so_and_keeps_the_run(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/t.db"
    cmd = [sys.executable, "-c", "from tether.cli.app import main; main()", "submit", "five"]
    cmd += ["--store", store, "--broker", "redis://127.0.0.1:1/0", "--run-id", "cli-offline"]
    out = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""}
    )
    assert out.returncode == 1
    assert "error: run 'cli-offline' is stored but its message could not be sent" in out.stderr
    assert "Traceback" not in out.stderr
    async with open_store(store) as opened:  # the run waits, PENDING, for the sweeper
        info = await opened.get_run("cli-offline")
    assert info is not None and info.status is RunStatus.PENDING
