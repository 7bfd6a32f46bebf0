"""The sweeper's lock: one holder per queue across the fleet, released when its holder goes."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

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


def test_a_sweeper_whose_store_is_away_at_start_sweeps_once_it_is_back(private_redis: Any) -> None:
    """The worker's sweeper thread opened its store once: a store away when the worker
    started killed the thread, and no run lost its message was ever enqueued by it again."""
    import asyncio

    from tether.workers import Dispatcher, store_pending
    from tether.workers.sweeper import SweeperThread

    queue = f"sweep-test-{uuid.uuid4().hex[:8]}"

    async def lost() -> str:  # a run stored PENDING whose message never went out
        async with open_store(private_redis.url) as store:
            return await store_pending(store, "five", {"label": "x"}, queue=queue)

    run_id = asyncio.run(lost())
    private_redis.kill()  # its append-only file keeps the run
    dispatcher = Dispatcher.from_url(broker_url("amqp"), queue=queue)
    sweeper = SweeperThread(private_redis.url, {}, dispatcher, interval=0.3, grace=0)
    try:
        sweeper.start()
        time.sleep(1.0)  # a few attempts on a store that is not there
        private_redis.start()
        deadline = time.monotonic() + 20
        while dispatcher.waiting(queue) == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert dispatcher.waiting(queue) >= 1, f"run {run_id} was not enqueued once the store was back"
    finally:
        sweeper.stop()
        with dispatcher.app.connection_for_write() as conn:
            conn.default_channel.queue_delete(queue)
        dispatcher.close()


def test_tether_worker_whose_store_is_away_exits_saying_so_before_it_takes_a_message(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "from tether.cli.app import main; main()", "worker"]
    cmd += ["--store", "postgresql://127.0.0.1:1/test", "--broker", "amqp://guest:guest@127.0.0.1:1//"]
    started = time.monotonic()
    out = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""}
    )
    assert out.returncode == 1, out.stderr
    assert "error: postgresql: connection failed" in out.stderr and "Traceback" not in out.stderr
    assert "ready" not in out.stderr and time.monotonic() - started < 60
