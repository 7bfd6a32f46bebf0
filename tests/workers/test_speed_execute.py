"""The executor's short path (one read per started run, one runner per workflow, the drain
looked at by a timer instead of a task of its own) keeps what a message must lead to: a
drain stops a run at its next checkpoint, or cancels a step that outlasts the drain
timeout; a cancellation that is not a drain's is not swallowed."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.workers.conftest import STEPS, done_steps
from tests.workers.flows import five
from tether.state import ExecutionContext, RunStatus
from tether.state.reserved import runtime_get
from tether.stores import CheckpointStore, open_store
from tether.workers import QUEUE_KEY, WORKFLOW_KEY, Registry, RunExecutor, store_pending


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    async with open_store(f"sqlite:///{tmp_path}/t.db") as s:
        yield s


def _executor(store: CheckpointStore, **kw: Any) -> RunExecutor:
    return RunExecutor(store, Registry([five()], bundled=False), lease_ttl=3, **kw)


async def _ready(store: CheckpointStore, **inputs: Any) -> str:
    """A run stored as ``submit()`` stores it: PENDING, its TODO list made."""
    registry = Registry([five()], bundled=False)
    return await store_pending(store, "five", inputs, run_id=f"r-{uuid.uuid4().hex[:8]}", registry=registry)


async def test_load_run_reads_the_record_and_the_context_of_one_version(store: CheckpointStore) -> None:
    rid = await _ready(store, label="a")
    loaded = await store.load_run(rid)
    assert loaded is not None
    info, ctx = loaded
    assert info.status is RunStatus.PENDING and info.version == ctx.version == 1
    assert ctx.get("label") == "a" and ctx.get(WORKFLOW_KEY) == "five"
    assert await store.load_run("r-never-stored") is None


async def test_one_executor_runs_many_runs_of_a_workflow_each_under_its_own_lease(
    store: CheckpointStore,
) -> None:
    ex = _executor(store, owner="tether-worker:test:1")
    rids = [await _ready(store, label=str(i)) for i in range(3)]
    outs = [await ex.execute(rid, workflow="five") for rid in rids]
    assert [(o.action, o.status) for o in outs] == [("executed", "COMPLETED")] * 3
    fences = []
    for rid in rids:
        cp = await store.load(rid)
        info = await store.get_run(rid)
        assert cp is not None and info is not None and done_steps(cp.state) == STEPS
        assert runtime_get(cp.state, "lease") is None  # released by each run's final commit
        fences.append(info.fence)
    assert all(f > 0 for f in fences)  # every run took a lease token of its own


async def test_a_duplicate_message_for_a_started_run_is_dropped(store: CheckpointStore) -> None:
    ex = _executor(store)
    rid = await _ready(store)
    await ex.execute(rid, workflow="five")
    version = (await store.get_run(rid)).version  # type: ignore[union-attr]
    out = await ex.execute(rid, workflow="five")
    assert (out.action, out.status) == ("dropped", "COMPLETED")
    assert (await store.get_run(rid)).version == version  # type: ignore[union-attr]  # nothing written


async def _in_s2(ex: Any, store: CheckpointStore, trace: Path, *, delay_s2: float) -> tuple[str, Any]:
    """A run started on ``ex`` in a task, once its step s2 has begun (s2 lasts ``delay_s2``)."""
    rid = await _ready(store, trace=str(trace), delay_s2=delay_s2)
    work = asyncio.ensure_future(ex.execute(rid, workflow="five"))
    while " s2 " not in (trace.read_text() if trace.exists() else ""):
        await asyncio.sleep(0.01)
    return rid, work


async def test_a_drain_stops_the_run_after_the_step_in_progress(
    store: CheckpointStore, tmp_path: Path
) -> None:
    draining = threading.Event()
    ex = _executor(store, draining=draining, drain_timeout=30)
    trace = tmp_path / "trace.log"
    rid, work = await _in_s2(ex, store, trace, delay_s2=0.5)
    threading.Thread(target=draining.set).start()  # as a signal handler does, from another thread
    out = await asyncio.wait_for(work, 10)
    assert (out.action, out.status) == ("requeue", "INTERRUPTED")
    cp = await store.load(rid)
    info = await store.get_run(rid)
    assert cp is not None and info is not None and info.status is RunStatus.INTERRUPTED
    assert done_steps(cp.state) == ["s1", "s2"]  # s2 finished and is checkpointed; s3 never started
    assert runtime_get(cp.state, "lease") is None  # released: another worker takes it at once
    assert " s3 " not in trace.read_text()


async def test_a_step_outlasting_the_drain_timeout_is_stopped_from_its_last_checkpoint(
    store: CheckpointStore, tmp_path: Path
) -> None:
    draining = threading.Event()
    ex = _executor(store, draining=draining, drain_timeout=0.3)
    trace = tmp_path / "trace.log"
    rid, work = await _in_s2(ex, store, trace, delay_s2=60)
    draining.set()
    began = time.monotonic()
    out = await asyncio.wait_for(work, 10)
    assert time.monotonic() - began < 5  # the timeout, not the 60 s step
    assert (out.action, out.status) == ("requeue", "INTERRUPTED")
    assert not work.cancelled()  # the drain's cancellation ends in an outcome, not in the caller
    cp = await store.load(rid)
    info = await store.get_run(rid)
    assert cp is not None and info is not None and info.status is RunStatus.INTERRUPTED
    assert done_steps(cp.state) == ["s1"] and runtime_get(cp.state, "lease") is None
    reason = runtime_get(cp.state, "pause_reason")
    assert reason and "cancelled" in reason


async def test_a_cancellation_that_is_not_a_drain_reaches_the_caller(
    store: CheckpointStore, tmp_path: Path
) -> None:
    ex = _executor(store)
    trace = tmp_path / "trace.log"
    rid, work = await _in_s2(ex, store, trace, delay_s2=60)
    work.cancel()
    with pytest.raises(asyncio.CancelledError):
        await work
    info = await store.get_run(rid)
    assert info is not None and info.status is RunStatus.INTERRUPTED  # the runner left it consistent


async def test_a_message_for_a_run_stored_without_its_todo_list_prepares_it(store: CheckpointStore) -> None:
    rid = f"r-{uuid.uuid4().hex[:8]}"  # what a submitter without the workflow registered stores
    await store.commit(
        ExecutionContext(rid, {WORKFLOW_KEY: "five", QUEUE_KEY: "q"}), status=RunStatus.PENDING
    )
    out = await _executor(store).execute(rid)
    assert (out.action, out.status) == ("executed", "COMPLETED")
    cp = await store.load(rid)
    assert (
        cp is not None and done_steps(cp.state) == STEPS and set(runtime_get(cp.state, "todo")) == set(STEPS)
    )
