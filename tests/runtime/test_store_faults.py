"""A store that fails a commit (a private redis-server stopped mid-run): the runner pauses
the run instead of dying, records why once the store is back, or leaves it for resume."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.stores.conftest import IN_CI, new_id, open_test_store
from tether.errors import StoreUnavailable
from tether.runtime import Runner, Step, Workflow, live_status
from tether.state import RunStatus
from tether.state.reserved import runtime_state
from tether.stores import RetryPolicy, create_store


class PrivateRedis:
    """A redis-server of our own, so stopping it bothers nobody; AOF on, so what it
    acknowledged survives a stop."""

    def __init__(self, binary: str, dir: Path) -> None:
        self.binary, self.dir = binary, dir
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
             "--save", "", "--appendonly", "yes", "--appendfsync", "always"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("private redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[PrivateRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        if IN_CI:
            pytest.fail("CI=true but redis-server is not installed")
        pytest.skip("redis-server is not installed")
    server = PrivateRedis(binary, tmp_path)
    server.start()
    yield server
    server.stop()


def workflow(server: PrivateRedis, ran: list[str]) -> Workflow:
    def step(sc):
        ran.append(sc.step.id)
        if sc.step.id == "b" and ran.count("b") == 1:
            server.stop()  # the store goes away while the step runs
        return {"messages": [sc.step.id]}

    return Workflow.plan([Step(id=s, fn=step) for s in ("a", "b", "c")])


async def test_a_failed_commit_pauses_the_run_once_the_store_is_back(redis_server):
    ran: list[str] = []

    def on_event(event):
        if event.kind == "store_failed":
            redis_server.start()  # back while the runner waits to record the pause

    store = create_store(f"redis://127.0.0.1:{redis_server.port}/0")
    await store.setup()
    try:
        run_id = new_id()
        runner = Runner(workflow(redis_server, ran), store, on_event=on_event, store_wait=30)
        result = await runner.start(run_id)
        assert result.status is RunStatus.PAUSED
        cp = await store.load(run_id)
        assert await store.get_status(run_id) is RunStatus.PAUSED
        assert runtime_state(cp.state)["lease"] is None and cp.executed_node_ids == ["a"]
        assert "the store failed a commit" in runtime_state(cp.state)["pause_reason"]
        assert runtime_state(cp.state)["event_log"][-1]["kind"] == "store_failed"
        done = await Runner(workflow(redis_server, ran), store).resume(run_id)
        assert done.status is RunStatus.COMPLETED
        assert done.state["messages"] == ["a", "b", "c"] and ran == ["a", "b", "b", "c"]
    finally:
        if redis_server.proc is None:
            redis_server.start()
        await store.aclose()


async def test_a_store_that_stays_down_leaves_the_run_for_resume(redis_server):
    ran: list[str] = []
    store = create_store(f"redis://127.0.0.1:{redis_server.port}/0")
    await store.setup()
    try:
        run_id = new_id()
        result = await Runner(workflow(redis_server, ran), store, store_wait=0.5).start(run_id)
        assert result.status is RunStatus.INTERRUPTED  # said, not raised
        redis_server.start()
        info = await store.get_run(run_id)
        assert info.status is RunStatus.RUNNING  # as last stored...
        assert await live_status(store, info) is RunStatus.INTERRUPTED  # ...but nobody runs it
        done = await Runner(workflow(redis_server, ran), store).resume(run_id)
        assert done.status is RunStatus.COMPLETED and done.state["messages"] == ["a", "b", "c"]
    finally:
        if redis_server.proc is None:
            redis_server.start()
        await store.aclose()


async def test_lost_replies_of_a_step_commit_and_of_the_pause_leave_a_consistent_run(backend, store_url):
    """Step b's commit lands but its reply is lost (the store gives up retrying), and so
    does the pause the runner then records: the run is PAUSED, b stored once, the lease
    released, versions contiguous, and the result says PAUSED, not interrupted."""
    ran: list[str] = []

    def step(sc):
        ran.append(sc.step.id)
        return {"messages": [sc.step.id]}

    flow = Workflow.plan([Step(id=s, fn=step) for s in ("a", "b", "c")])
    async with open_test_store(backend, store_url, retry=RetryPolicy(attempts=1)) as store:
        real = store.backend.append
        lost: list[str] = []

        async def append(w):
            version = await real(w)  # the write lands...
            which = "PAUSED" if w.status is RunStatus.PAUSED else "RUNNING" if w.node_id == "b" else ""
            if which and which not in lost:
                lost.append(which)
                raise StoreUnavailable("the reply was lost")  # ...its reply does not
            return version

        store.backend.append = append
        run_id = new_id()
        result = await Runner(flow, store, store_wait=5).start(run_id)
        assert lost == ["RUNNING", "PAUSED"]
        assert result.status is RunStatus.PAUSED
        assert await store.get_status(run_id) is RunStatus.PAUSED
        cp = await store.load(run_id)
        runtime = runtime_state(cp.state)
        assert cp.executed_node_ids == ["a", "b"] and cp.state["messages"] == ["a", "b"]
        assert runtime["lease"] is None and "the store failed a commit" in runtime["pause_reason"]
        assert [e["kind"] for e in runtime["event_log"]].count("store_failed") == 1
        history = await store.history(run_id)
        assert sorted(h.version for h in history) == list(range(1, len(history) + 1))
        assert result.version == cp.version == len(history)
        done = await Runner(flow, store).resume(run_id)
        assert done.status is RunStatus.COMPLETED
        assert done.state["messages"] == ["a", "b", "c"] and ran == ["a", "b", "c"]
