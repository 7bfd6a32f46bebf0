"""Real `tether worker` processes on this machine's RabbitMQ and Redis, with PostgreSQL
and Redis stores. Every test uses its own queue name; nothing shared is purged.

Server URLs: TETHER_TEST_POSTGRESQL_URL, TETHER_TEST_REDIS_URL (store and Redis broker),
TETHER_TEST_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672//). With CI=true a
missing server fails the test; elsewhere it skips with the reason.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tether.state import RunStatus
from tether.state.reserved import runtime_get
from tether.stores import CheckpointStore, create_store

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
AMQP_URL = os.environ.get("TETHER_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
STEPS = ["s1", "s2", "s3", "s4", "s5"]


def missing(what: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true but {what}")
    pytest.skip(what)


def store_url(kind: str) -> str:
    url = os.environ.get(f"TETHER_TEST_{kind.upper()}_URL")
    if not url:
        missing(f"set TETHER_TEST_{kind.upper()}_URL to run the worker tests on {kind}")
    assert url is not None
    return url


def broker_url(kind: str) -> str:
    if kind == "amqp":
        url = AMQP_URL
    else:
        url = os.environ.get("TETHER_TEST_REDIS_URL", "")
        if not url:
            missing("set TETHER_TEST_REDIS_URL to use Redis as the broker")
    try:
        import kombu

        with kombu.Connection(url, connect_timeout=3) as conn:
            conn.ensure_connection(max_retries=1)
    except Exception as exc:
        missing(f"the {kind} broker at {url} is unreachable: {exc}")
    return url


@asynccontextmanager
async def opened(url: str) -> AsyncIterator[CheckpointStore]:
    store = create_store(url)
    try:
        await store.setup()
    except Exception as exc:
        await store.aclose()
        missing(f"the store at {url} is unreachable: {exc}")
    try:
        yield store
    finally:
        await store.aclose()


class Fleet:
    """`tether worker` subprocesses on one queue, their logs in ``tmp``."""

    def __init__(
        self, tmp: Path, store: str, broker: str, queue: str, env: dict[str, str] | None = None
    ) -> None:
        self.tmp, self.store, self.broker, self.queue = tmp, store, broker, queue
        self.extra_env = env or {}
        self.procs: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(HERE)])
        return {**env, **self.extra_env}

    def start(self, n: int = 1, *args: str, wait: bool = True) -> list[subprocess.Popen[bytes]]:
        new = []
        for _ in range(n):
            log = self.tmp / f"worker-{uuid.uuid4().hex[:6]}.log"
            cmd = [
                sys.executable,
                "-c",
                "from launch import main; main()",
                "worker",
                "--store",
                self.store,
                "--broker",
                self.broker,
                "--queue",
                self.queue,
                "--workflow",
                "flows:five",
                "--loglevel",
                "INFO",
                *args,
            ]
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env(), cwd=self.tmp
                )
            proc.log = log  # type: ignore[attr-defined]
            new.append(proc)
            self.procs.append(proc)
        if wait:
            for proc in new:
                self.wait_ready(proc)
        return new

    def wait_ready(self, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = Path(proc.log).read_text(errors="replace")  # type: ignore[attr-defined]
            if " ready." in text:
                return
            if proc.poll() is not None:
                raise AssertionError(f"worker exited {proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.1)
        raise AssertionError(f"worker not ready in {timeout}s")

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def logs(self) -> str:
        return "\n".join(Path(p.log).read_text(errors="replace") for p in self.procs)  # type: ignore[attr-defined]

    def stop(self) -> None:
        """At the end of a test: kill -9 (its queue is deleted next; a warm shutdown is
        tested where it matters, and waiting for one per worker costs seconds)."""
        for p in self.alive():
            p.kill()
        for p in self.procs:
            p.wait()


@pytest.fixture
def queue() -> str:
    return f"tether-test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def fleet_factory(tmp_path: Path, queue: str) -> Iterator[Any]:
    fleets: list[Fleet] = []

    def make(store: str, broker: str, env: dict[str, str] | None = None) -> Fleet:
        fleet = Fleet(tmp_path, store, broker, queue, env)
        fleets.append(fleet)
        return fleet

    yield make
    for fleet in fleets:
        fleet.stop()
    _delete_queue(fleets, queue)


def _delete_queue(fleets: list[Fleet], queue: str) -> None:
    """Our own queue (and the sweeper's lock) only."""
    for fleet in fleets[:1]:
        try:
            import kombu

            with kombu.Connection(fleet.broker, connect_timeout=3) as conn:
                if fleet.broker.startswith("amqp"):
                    conn.default_channel.queue_delete(queue)
                else:
                    conn.default_channel.client.delete(queue, f"tether.sweeper.{queue}")
        except Exception:
            pass


async def wait_status(
    store: CheckpointStore, run_id: str, wanted: set[RunStatus], timeout: float = 60
) -> RunStatus:
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        info = await store.get_run(run_id)
        status = info.status if info else None
        if status in wanted:
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {run_id} still {status} after {timeout}s")


async def wait_trace(trace: Path, run_id: str, step: str, timeout: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [ln.split() for ln in trace.read_text().splitlines()] if trace.exists() else []
        hits = [ln for ln in lines if ln[0] == run_id and ln[1] == step]
        if hits:
            return hits[-1]
        await asyncio.sleep(0.05)
    raise AssertionError(f"step {step} of {run_id} never started")


def starts(trace: Path, run_id: str) -> dict[str, int]:
    """How many times each step of the run really started."""
    counts = dict.fromkeys(STEPS, 0)
    for ln in trace.read_text().splitlines():
        rid, step, *_ = ln.split()
        if rid == run_id:
            counts[step] += 1
    return counts


def done_steps(state: dict[str, Any]) -> list[str]:
    """The steps the run's history records as done (each must appear once)."""
    return [h["node"] for h in state.get("execution_history", []) if h.get("status") == "done"]


def user_state(state: dict[str, Any]) -> dict[str, Any]:
    """What a run computed, without tether's bookkeeping (lease, event log, timings)."""
    return {k: v for k, v in state.items() if not k.startswith("_") and k not in ("execution_history",)}


async def reference(store: CheckpointStore, inputs: dict[str, Any]) -> dict[str, Any]:
    """The same inputs run in this process without Celery: the state a worker run must end with."""
    from tests.workers.flows import five
    from tether.runtime import Runner

    result = await Runner(five(), store).start(f"ref-{uuid.uuid4().hex[:10]}", inputs)
    assert result.status is RunStatus.COMPLETED
    return result.state


def lease_of(state: dict[str, Any]) -> Any:
    return runtime_get(state, "lease")


async def check_once(store: CheckpointStore, run_id: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """What every fleet test asserts of a run at the end: COMPLETED, each step recorded
    done exactly once, the state a single-process run of the same inputs ends with, and
    no lease left held. Returns the run's final state."""
    info = await store.get_run(run_id)
    assert info is not None and info.status is RunStatus.COMPLETED, info
    cp = await store.load(run_id)
    assert cp is not None
    assert done_steps(cp.state) == STEPS  # each step recorded done exactly once, in order
    todo = runtime_get(cp.state, "todo", {})
    assert {sid: t.get("status") for sid, t in todo.items()} == dict.fromkeys(STEPS, "done")
    # the same inputs without the delays (they shape timing, not what a run computes)
    ref = await reference(
        store, {k: v for k, v in inputs.items() if k != "crash" and not k.startswith("delay")}
    )
    assert user_state(cp.state) == {
        **user_state(ref),
        **{k: v for k, v in inputs.items() if k.startswith("delay")},
    }
    assert lease_of(cp.state) is None
    return cp.state


@pytest.fixture
def dispatchers(queue: str) -> Iterator[Any]:
    """Makes Dispatchers on this test's queue and closes them at its end, failed or not."""
    from tether.workers import Dispatcher

    made: list[Dispatcher] = []

    def make(url: str) -> Dispatcher:
        made.append(Dispatcher.from_url(url, queue=queue))
        return made[-1]

    yield make
    for dispatcher in made:
        try:
            dispatcher.close()
        except Exception:  # a broker a test killed: nothing left to close
            pass


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[Any]:
    """A redis-server of this test's own (a broker it may kill -9 and configure)."""
    from tests.workers.faults import RedisServer

    server = RedisServer(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def fault_proxy() -> Iterator[Any]:
    """Makes a proxy to the test PostgreSQL or Redis that breaks one checkpoint write when
    armed; closed at the end of the test."""
    from urllib.parse import urlsplit

    from tests.workers import faults

    made: list[Any] = []

    def make(kind: str) -> Any:
        parts = urlsplit(store_url(kind))
        make_proxy = faults.pg_proxy if kind == "postgresql" else faults.redis_proxy
        made.append(make_proxy((parts.hostname or "127.0.0.1", parts.port or 5432)))
        return made[-1]

    yield make
    for proxy in made:
        proxy.close()
