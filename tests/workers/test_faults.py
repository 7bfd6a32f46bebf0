"""Faults around the workers, not in them: the broker restarted mid-run, the store's
connection cut in the middle of a commit, a commit whose reply is lost, the same run
submitted twice at once, a broker whose redelivery window is far shorter than a step,
and a worker stopped (SIGSTOP) past its lease and woken again.

As in test_fleet: every run ends COMPLETED, each step recorded done exactly once, the
final state equal to a single-process run's, no lease left held; and the trace the steps
write when they start shows that no step ran twice.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.workers.conftest import (
    STEPS,
    broker_url,
    check_once,
    opened,
    starts,
    store_url,
    wait_status,
    wait_trace,
)
from tether.errors import RunExists
from tether.state import RunStatus
from tether.workers import submit

pytestmark = pytest.mark.slow

FAST = ["--lease", "3", "--sweep-interval", "0.5", "--sweep-grace", "1"]
ENDED = {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.PAUSED}


def _inputs(trace: Path, **extra: Any) -> dict[str, Any]:
    return {"label": uuid.uuid4().hex[:6], "trace": str(trace), "delay": 0.05, **extra}


async def test_a_broker_restart_mid_run_loses_no_run_and_repeats_no_step(
    private_redis: Any, fleet_factory: Any, dispatchers: Any, tmp_path: Path, queue: str
) -> None:
    """The broker (a Redis of this test's own, appendfsync always) is killed -9 while two
    runs execute and two wait in the queue, and started again on the same port a second
    later: the running runs go on, the waiting ones are delivered after the restart."""
    store_at = store_url("postgresql")
    trace = tmp_path / "trace.log"
    async with opened(store_at) as store:
        fleet = fleet_factory(store_at, private_redis.url)
        fleet.start(1, *FAST, "--concurrency", "2")
        dispatcher = dispatchers(private_redis.url)
        runs = {}
        for _ in range(4):
            inputs = _inputs(trace, delay=0.15)
            runs[await submit(store, dispatcher, "five", inputs)] = inputs
        first = next(iter(runs))
        await wait_trace(trace, first, "s2")
        private_redis.kill()  # mid-run: two runs executing, two messages waiting
        await asyncio.sleep(1.0)  # the broker stays down for a second
        private_redis.start()
        for run_id, inputs in runs.items():
            assert await wait_status(store, run_id, ENDED, timeout=60) is RunStatus.COMPLETED
            assert starts(trace, run_id) == dict.fromkeys(STEPS, 1)
            await check_once(store, run_id, inputs)
        assert "Connection to broker lost" in fleet.logs()  # the restart was seen


@pytest.mark.parametrize(("backend", "broker"), [("postgresql", "amqp"), ("redis", "redis")])
async def test_a_commit_cut_or_its_reply_lost_is_stored_once(
    backend: str, broker: str, fault_proxy: Any, fleet_factory: Any, dispatchers: Any, tmp_path: Path
) -> None:
    """The worker reaches its store through a proxy that breaks the commit of step s3 of a
    run: ``cut`` closes the connection when half the write has reached the server (not
    stored); ``lose_reply`` lets the server do it and drops the reply (stored, and the
    worker cannot tell). Either way the store's retry stores the step once, and the run
    goes on without running anything again."""
    direct, broker_at = store_url(backend), broker_url(broker)
    proxy = fault_proxy(backend)
    trace = tmp_path / "trace.log"
    async with opened(direct) as store:
        fleet = fleet_factory(proxy.url(direct), broker_at)
        fleet.start(1, *FAST)
        dispatcher = dispatchers(broker_at)
        for mode in ("cut", "lose_reply"):
            inputs = _inputs(trace, delay_s3=0.3)
            run_id = await submit(store, dispatcher, "five", inputs)
            await wait_trace(trace, run_id, "s3")
            proxy.arm(mode)  # the next checkpoint write is s3's
            assert await asyncio.to_thread(proxy.fired.wait, 30), f"{mode}: no write went through"
            assert await wait_status(store, run_id, ENDED) is RunStatus.COMPLETED
            assert starts(trace, run_id) == dict.fromkeys(STEPS, 1)  # nothing ran again
            await check_once(store, run_id, inputs)
            # lose_reply: the server did the write before its reply was dropped
            done = [b"UPDATE 1"] if backend == "postgresql" else [b"*"]
            assert proxy.swallowed == (done if mode == "lose_reply" else [])
        # both writes failed where the worker saw them, and were retried
        assert fleet.logs().count("retry 1/") == 2, fleet.logs()[-3000:]


async def test_the_same_run_submitted_twice_at_once_executes_once(
    fleet_factory: Any, dispatchers: Any, tmp_path: Path, queue: str
) -> None:
    """Two submitters store the same run id at the same moment while two more copies of its
    message are sent (a client retrying): one submit wins, the other gets RunExists, and
    the idle workers that receive a message execute the run once between them."""
    store_at, broker_at = store_url("redis"), broker_url("redis")
    trace = tmp_path / "trace.log"
    run_id = f"twice-{uuid.uuid4().hex[:8]}"
    inputs = _inputs(trace)
    fleet = fleet_factory(store_at, broker_at)
    fleet.start(2, *FAST, "--concurrency", "2")

    async def submitter() -> str | RunExists:
        async with opened(store_at) as own:
            dispatcher = dispatchers(broker_at)
            try:
                return await submit(own, dispatcher, "five", inputs, run_id=run_id)
            except RunExists as exc:
                return exc

    resender = dispatchers(broker_at)
    outs = await asyncio.gather(submitter(), submitter(), resender.enqueue(run_id), resender.enqueue(run_id))
    assert sorted(type(o).__name__ for o in outs[:2]) == ["RunExists", "str"]
    async with opened(store_at) as store:
        assert await wait_status(store, run_id, ENDED) is RunStatus.COMPLETED
        assert starts(trace, run_id) == dict.fromkeys(STEPS, 1)
        await check_once(store, run_id, inputs)


async def test_a_step_far_longer_than_the_brokers_redelivery_window_runs_once(
    private_redis: Any, fleet_factory: Any, dispatchers: Any, tmp_path: Path, queue: str
) -> None:
    """The 2-hour step under a 1-hour visibility timeout, scaled down: the broker re-delivers
    any message unacknowledged for 1 s, and step s2 lasts 4 s (two leases: the heartbeat
    keeps it). The broker does re-deliver; the copy finds the lease alive and is dropped."""
    store_at = store_url("postgresql")
    trace = tmp_path / "trace.log"
    impatient = {"visibility_timeout": 1, "unacked_restore_interval": 0.3, "unacked_restore_throttle": 1}
    async with opened(store_at) as store:
        fleet = fleet_factory(store_at, private_redis.url, {"FLEET_TRANSPORT_OPTIONS": json.dumps(impatient)})
        # two threads: the broker's copy reaches the one not executing the run
        fleet.start(1, "--concurrency", "2", "--lease", "2", "--sweep-interval", "0.5", "--sweep-grace", "1")
        dispatcher = dispatchers(private_redis.url)
        inputs = _inputs(trace, delay_s2=4)
        run_id = await submit(store, dispatcher, "five", inputs)
        assert await wait_status(store, run_id, ENDED) is RunStatus.COMPLETED
        assert starts(trace, run_id) == dict.fromkeys(STEPS, 1)
        await check_once(store, run_id, inputs)
        assert "message dropped: another worker holds its lease" in fleet.logs()  # it did re-deliver


async def test_a_worker_stopped_past_its_lease_writes_nothing_when_it_wakes(
    fleet_factory: Any, dispatchers: Any, tmp_path: Path, queue: str
) -> None:
    """SIGSTOP of the worker inside step s3 (a long GC, a partition): its heartbeat stops,
    the lease runs out, the sweeper hands the run to the other worker, which completes it.
    SIGCONT: the stopped worker finishes its s3, its commit is refused (LeaseLost), it drops
    the run and the store is not changed by it at all."""
    import os
    import signal

    store_at, broker_at = store_url("postgresql"), broker_url("amqp")
    trace = tmp_path / "trace.log"
    async with opened(store_at) as store:
        fleet = fleet_factory(store_at, broker_at)
        fleet.start(2, "--lease", "2", "--sweep-interval", "0.5", "--sweep-grace", "1")
        inputs = _inputs(trace, delay_s3=0.5)
        run_id = await submit(store, dispatchers(broker_at), "five", inputs)
        _rid, _step, _t, pid = await wait_trace(trace, run_id, "s3")
        os.kill(int(pid), signal.SIGSTOP)
        try:
            assert await wait_status(store, run_id, ENDED) is RunStatus.COMPLETED
            final = await store.get_run(run_id)
        finally:
            os.kill(int(pid), signal.SIGCONT)
        stopped = next(p for p in fleet.procs if p.pid == int(pid))
        deadline = asyncio.get_running_loop().time() + 30
        while "lost its lease" not in Path(stopped.log).read_text(errors="replace"):
            assert asyncio.get_running_loop().time() < deadline, "the woken worker never noticed"
            await asyncio.sleep(0.1)
        after = await store.get_run(run_id)
        assert final is not None and after is not None
        assert (after.version, after.status) == (final.version, RunStatus.COMPLETED)  # nothing written
        counts = starts(trace, run_id)
        assert counts["s3"] == 2 and all(counts[s] == 1 for s in STEPS if s != "s3")
        await check_once(store, run_id, inputs)
