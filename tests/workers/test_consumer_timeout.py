"""RabbitMQ's consumer timeout against a step longer than it, with real `tether worker`
processes on this machine's RabbitMQ.

RabbitMQ closes a channel whose oldest delivery stays unacknowledged past its consumer
timeout (30 min by default) and puts the message back in the queue. A worker holds its
message unacknowledged for as long as the run executes, so a long step meets it. From
RabbitMQ 3.11.15 the ``x-consumer-timeout`` queue argument tether declares lifts the
limit for tether's queues; before, only the server-wide ``consumer_timeout`` exists, and
the worker has to live with the channel being closed under a step: it reconnects, the step in
flight goes on, the copy RabbitMQ redelivers is dropped (the run's lease is alive, or the
run has finished by then), and the run completes with every step run once.

Scaled down: the server's ``consumer_timeout`` is two seconds while the workers open their
channels (a channel reads it once, when it opens; it is put back as soon as they are up,
so channels opened later, including the workers' own after reconnecting, have the
server's usual value), and ``channel_tick_interval`` (how often a channel compares its
oldest delivery's age with the timeout: a minute by default, re-read at every check) is a
quarter second for the test. Both are restored at the end, failed or not.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.workers.conftest import (
    STEPS,
    broker_url,
    check_once,
    missing,
    opened,
    starts,
    store_url,
    wait_trace,
)
from tether.state import RunStatus
from tether.state.reserved import runtime_get
from tether.workers import submit

pytestmark = pytest.mark.slow

TIMEOUT_MS = 2000
"""The consumer timeout the workers' channels get."""
TICK_MS = 250
"""How often the broker checks it during the test."""
STEP_S = 6.0
"""How long step s2 lasts: three consumer timeouts."""
CLOSED = "PRECONDITION_FAILED - delivery acknowledgement on channel"
"""What RabbitMQ says when it closes a channel for the consumer timeout."""


class RabbitEnv:
    """Reads and sets the local RabbitMQ's ``rabbit`` application environment (as root,
    with rabbitmqctl), and puts back what it changed."""

    def __init__(self) -> None:
        exe = shutil.which("rabbitmqctl") or shutil.which("rabbitmqctl", path="/usr/sbin:/usr/local/sbin")
        if exe is None:
            missing("rabbitmqctl is not installed (the test sets RabbitMQ's consumer timeout with it)")
        self.exe = str(exe)
        self.saved: dict[str, str] = {}

    def eval(self, expr: str) -> str:
        try:
            done = subprocess.run([self.exe, "eval", expr], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            missing(f"rabbitmqctl eval failed: {exc}")
            raise
        if done.returncode != 0:
            missing(f"rabbitmqctl eval failed (it needs root on the broker's host): {done.stderr.strip()}")
        return done.stdout.strip()

    def get(self, key: str) -> str:
        """The value as an Erlang term: ``{ok,1800000}``, or ``undefined``."""
        return self.eval(f"application:get_env(rabbit, {key}).")

    def set(self, key: str, value: int) -> None:
        if key not in self.saved:
            self.saved[key] = self.get(key)
        self.eval(f"application:set_env(rabbit, {key}, {value}).")

    def restore(self, key: str) -> None:
        was = self.saved.pop(key, None)
        if was is None:
            return
        found = re.fullmatch(r"\{ok,(.*)\}", was, re.S)
        if found:
            self.eval(f"application:set_env(rabbit, {key}, {found.group(1)}).")
        else:
            self.eval(f"application:unset_env(rabbit, {key}).")

    def restore_all(self) -> None:
        for key in list(self.saved):
            self.restore(key)


@pytest.fixture
def rabbit() -> Iterator[RabbitEnv]:
    env = RabbitEnv()
    try:
        yield env
    finally:
        env.restore_all()


async def test_a_step_longer_than_the_consumer_timeout_runs_once_and_the_run_completes(
    rabbit: RabbitEnv, fleet_factory: Any, dispatchers: Any, tmp_path: Path, queue: str
) -> None:
    """Step s2 lasts three consumer timeouts. RabbitMQ closes the executing worker's channel
    during it and redelivers the message; the worker reconnects and finishes the step (no
    process dies, nothing is taken over), the copy is dropped, and the run completes with
    each step started once and recorded done once: the lease, not the broker, decides who
    executes a run, so a redelivered copy never starts a step that is still running."""
    store_at, broker_at = store_url("postgresql"), broker_url("amqp")
    trace = tmp_path / "trace.log"
    async with opened(store_at) as store:
        fleet = fleet_factory(store_at, broker_at)
        rabbit.set("channel_tick_interval", TICK_MS)
        rabbit.set("consumer_timeout", TIMEOUT_MS)
        try:
            fleet.start(2, "--lease", "3", "--sweep-interval", "0.5", "--sweep-grace", "1")
        finally:  # the workers' channels have read it; nobody else's should
            rabbit.restore("consumer_timeout")
        inputs = {"label": uuid.uuid4().hex[:6], "trace": str(trace), "delay": 0.05, "delay_s2": STEP_S}
        run_id = await submit(store, dispatchers(broker_at), "five", inputs)
        _rid, _step, s1_at, pid = await wait_trace(trace, run_id, "s1")
        executing = next(p for p in fleet.procs if p.pid == int(pid))
        closed_at = None
        deadline = time.monotonic() + 60
        while True:
            info = await store.get_run(run_id)
            if closed_at is None and CLOSED in Path(executing.log).read_text(errors="replace"):
                closed_at = time.time()
            if info is not None and info.status in (RunStatus.COMPLETED, RunStatus.FAILED):
                break
            assert time.monotonic() < deadline, f"run still {info and info.status}"
            await asyncio.sleep(0.05)
        assert info.status is RunStatus.COMPLETED
        _rid, _step, s2_at, _pid = await wait_trace(trace, run_id, "s2")
        # the broker closed the channel while s2 ran, after the timeout, within a few ticks
        assert closed_at is not None, fleet.logs()[-3000:]
        assert float(s2_at) < closed_at < float(s2_at) + STEP_S
        # (s1 starts a little after the delivery; the worker logs the close a little after it)
        assert TIMEOUT_MS / 1000 - 0.5 <= closed_at - float(s1_at) <= TIMEOUT_MS / 1000 + 3

        assert starts(trace, run_id) == dict.fromkeys(STEPS, 1)  # nothing started twice
        state = await check_once(store, run_id, inputs)  # each step recorded done once
        s2 = [h for h in state["execution_history"] if h["node"] == "s2"]
        assert len(s2) == 1 and s2[0]["status"] == "done" and s2[0]["seconds"] >= STEP_S
        kinds = [e["kind"] for e in runtime_get(state, "event_log", [])]
        assert "interrupted" not in kinds  # nobody took the run over

        # the redelivered copy reached a worker and was dropped
        deadline = time.monotonic() + 30
        while f"run {run_id}: message dropped" not in fleet.logs():
            assert time.monotonic() < deadline, fleet.logs()[-3000:]
            await asyncio.sleep(0.1)
        # the executing worker reconnected and lives on (Celery on its own stops it with
        # "Unrecoverable error: PreconditionFailed" once its runs are done)
        text = Path(executing.log).read_text(errors="replace")
        assert "Unrecoverable error" not in text, text[-3000:]
        assert text.count("Connected to amqp") >= 2, text[-3000:]
        assert all(p.poll() is None for p in fleet.procs), fleet.logs()[-3000:]


async def test_any_other_channel_error_still_stops_the_worker(fleet_factory: Any, queue: str) -> None:
    """Only the consumer timeout's channel error is taken for a lost connection: a queue
    declared elsewhere with other arguments stops the worker with the broker's reason, as
    it does in Celery, instead of a reconnect loop that never gets ready."""
    import kombu

    store_at, broker_at = store_url("postgresql"), broker_url("amqp")
    with kombu.Connection(broker_at, connect_timeout=3) as conn:
        conn.default_channel.queue_declare(queue, durable=True, auto_delete=True)
    fleet = fleet_factory(store_at, broker_at)
    (worker,) = fleet.start(1, "--sweep-interval", "0", wait=False)
    await asyncio.to_thread(worker.wait, 60)
    text = Path(worker.log).read_text(errors="replace")
    assert "Unrecoverable error: PreconditionFailed" in text and "inequivalent arg" in text, text[-3000:]
    assert "Connection to broker lost" not in text
