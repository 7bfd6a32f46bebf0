"""The executor's short path (no read for a run whose message carries its first state, one
read per other started run, one runner per workflow, the drain looked at by a timer instead
of a task of its own) keeps what a message must lead to: a run changed after its submitter
stored it is run as stored, or left as it is; a drain stops a run at its next checkpoint,
or cancels a step that outlasts the drain timeout; a cancellation that is not a drain's is
not swallowed."""

from __future__ import annotations

import asyncio
import datetime as dt
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
from tether.workers import (
    QUEUE_KEY,
    WORKFLOW_KEY,
    Registry,
    RunExecutor,
    first_state,
    store_for_message,
    store_pending,
)
from tether.workers.dispatch import FIRST_STATE_BYTES


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


class CountingStore:
    """The store, counting the runner's reads of a run (``load_run``)."""

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def load_run(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return await self.store.load_run(*args, **kwargs)


async def _submitted(store: CheckpointStore, **inputs: Any) -> tuple[str, dict[str, Any] | None]:
    """A run stored as ``submit()`` stores it, and the first state its message carries."""
    registry = Registry([five()], bundled=False)
    return await store_for_message(
        store, "five", inputs, run_id=f"r-{uuid.uuid4().hex[:8]}", registry=registry
    )


async def test_a_message_carrying_the_first_state_starts_the_run_without_reading_it(
    store: CheckpointStore,
) -> None:
    rid, first = await _submitted(store, label="a")
    assert first is not None and first["label"] == "a" and first[WORKFLOW_KEY] == "five"
    counting = CountingStore(store)
    ex = _executor(counting)  # type: ignore[arg-type]
    out = await ex.execute(rid, workflow="five", first=first)
    assert (out.action, out.status) == ("executed", "COMPLETED") and counting.reads == 0
    cp = await store.load(rid)
    info = await store.get_run(rid)
    assert cp is not None and info is not None and done_steps(cp.state) == STEPS
    assert cp.state["s5_output"] == "s5 of a" and info.fence > 0
    assert runtime_get(cp.state, "lease") is None
    version = info.version
    again = await ex.execute(rid, workflow="five", first=first)  # a duplicate: read, and dropped
    assert (again.action, again.status) == ("dropped", "COMPLETED") and counting.reads == 1
    assert (await store.get_run(rid)).version == version  # type: ignore[union-attr]


async def test_a_run_changed_after_it_was_submitted_runs_as_stored_not_as_its_message_says(
    store: CheckpointStore,
) -> None:
    rid, first = await _submitted(store, label="sent")
    loaded = await store.load_run(rid)
    assert loaded is not None and first is not None
    ctx = loaded[1]
    ctx.put("label", "updated")  # (a person's update of the waiting run: version 2)
    await store.commit(ctx, status=RunStatus.PENDING)
    out = await _executor(store).execute(rid, workflow="five", first=first)
    assert (out.action, out.status) == ("executed", "COMPLETED")
    cp = await store.load(rid)
    assert cp is not None and cp.state["label"] == "updated" and cp.state["s1_output"] == "s1 of updated"


async def test_a_run_paused_after_it_was_submitted_stays_paused_and_unwritten(store: CheckpointStore) -> None:
    rid, first = await _submitted(store, label="a")
    loaded = await store.load_run(rid)
    assert loaded is not None
    await store.commit(loaded[1], status=RunStatus.PAUSED)
    version = (await store.get_run(rid)).version  # type: ignore[union-attr]
    out = await _executor(store).execute(rid, workflow="five", first=first)
    assert (out.action, out.status) == ("dropped", "PAUSED")
    info = await store.get_run(rid)
    assert info is not None and info.status is RunStatus.PAUSED and info.version == version


async def test_a_message_for_a_deleted_run_is_dropped(store: CheckpointStore) -> None:
    rid, first = await _submitted(store, label="a")
    await store.delete(rid)
    out = await _executor(store).execute(rid, workflow="five", first=first)
    assert (out.action, out.status) == ("dropped", None)
    assert await store.get_run(rid) is None  # nothing written, not even a new run


def test_only_a_small_plain_json_state_rides_on_a_message() -> None:
    assert first_state({"a": [1, 2.5, None, True], "b": {"c": "d"}}) == {
        "a": [1, 2.5, None, True],
        "b": {"c": "d"},
    }
    assert first_state({"when": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)}) is None  # read from the store
    assert first_state({"pair": (1, 2)}) is None  # would come back a list
    assert first_state({"keys": {1: "one"}}) is None  # would come back "1"
    assert first_state({"x": float("nan")}) is None
    assert first_state({"big": "x" * FIRST_STATE_BYTES}) is None


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


async def test_a_drain_during_the_last_step_lets_the_run_complete(
    store: CheckpointStore, tmp_path: Path
) -> None:
    """The last step's checkpoint is the run's final commit: a drain that comes during it
    leaves nothing to hand back (before, the run was stored INTERRUPTED with every step
    done, for another worker to finish)."""
    draining = threading.Event()
    ex = _executor(store, draining=draining, drain_timeout=30)
    trace = tmp_path / "trace.log"
    rid = await _ready(store, trace=str(trace), delay_s5=0.5)
    work = asyncio.ensure_future(ex.execute(rid, workflow="five"))
    while " s5 " not in (trace.read_text() if trace.exists() else ""):
        await asyncio.sleep(0.01)
    threading.Thread(target=draining.set).start()
    out = await asyncio.wait_for(work, 10)
    assert (out.action, out.status) == ("executed", "COMPLETED")
    info = await store.get_run(rid)
    assert info is not None and info.status is RunStatus.COMPLETED and info.lease_until is None


async def test_a_drain_before_the_first_step_hands_the_run_back_unstarted(store: CheckpointStore) -> None:
    """A drain between the take and the first step: INTERRUPTED at once, lease released,
    no step run."""
    draining = threading.Event()
    ex = _executor(store, draining=draining, drain_timeout=30)
    rid = await _ready(store)

    def started(event: Any) -> None:
        if event.kind == "run_resumed":  # the take is committed; the first step is next
            draining.set()

    ex.on_event = started
    out = await ex.execute(rid, workflow="five")
    assert (out.action, out.status) == ("requeue", "INTERRUPTED")
    cp = await store.load(rid)
    info = await store.get_run(rid)
    assert cp is not None and info is not None and info.status is RunStatus.INTERRUPTED
    assert done_steps(cp.state) == [] and runtime_get(cp.state, "lease") is None


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
