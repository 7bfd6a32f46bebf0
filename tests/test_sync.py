"""tether.sync: the blocking facade works in scripts, threads and inside a running loop,
and raises the async API's errors."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from tether.errors import ConfigError, VersionConflict
from tether.runtime.workflow import Step, Workflow
from tether.state import ExecutionContext, RunStatus
from tether.sync import SyncRunner, open_store_sync, run_sync


def test_the_sync_store_commits_and_loads_from_plain_code_and_threads(tmp_path: Path) -> None:
    """Commit, load, history from the main thread and from worker threads."""
    with open_store_sync(f"sqlite:///{tmp_path}/s.db") as store:
        ctx = ExecutionContext("sync-1")
        ctx.merge({"messages": ["a"]})
        assert store.commit(ctx) == 1
        results: list[Any] = []

        def worker(i: int) -> None:
            c = ExecutionContext(f"thread-{i}")
            c.merge({"messages": [i]})
            store.commit(c)
            results.append(store.load(f"thread-{i}").state["messages"])  # type: ignore[union-attr]

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == [[0], [1], [2], [3]]
        assert [h.version for h in store.history("sync-1")] == [1]


async def test_the_sync_store_works_inside_a_running_loop_with_the_same_errors(tmp_path: Path) -> None:
    """As in a Jupyter cell: no 'loop already running', and VersionConflict as itself."""
    asyncio.get_running_loop()
    with open_store_sync(f"sqlite:///{tmp_path}/s.db") as store:
        first = ExecutionContext("dup")
        first.merge({"messages": ["x"]})
        store.commit(first)
        second = ExecutionContext("dup")
        second.merge({"messages": ["y"]})
        with pytest.raises(VersionConflict):
            store.commit(second)
        assert store.load("dup").state["messages"] == ["x"]  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="closed"):
        store.load("dup")


async def test_run_sync_inside_and_outside_a_loop() -> None:
    """run_sync gives the coroutine's result where asyncio.run would raise."""

    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert run_sync(answer()) == 42
    assert await asyncio.to_thread(run_sync, answer()) == 42


def test_a_blocking_call_from_the_store_loop_is_refused(tmp_path: Path) -> None:
    """A step calling the sync store would wait on itself forever: ConfigError instead."""
    with open_store_sync(f"sqlite:///{tmp_path}/s.db") as store:

        async def inside() -> None:
            store.get_run("x")

        with pytest.raises(ConfigError, match="own loop thread"):
            store.runner.run(inside())


def test_the_sync_runner_runs_and_resumes_a_workflow(tmp_path: Path) -> None:
    """A workflow paused after its first step finishes on resume, all from sync code."""

    def first(sc: Any) -> dict[str, Any]:
        return {"first_output": "done"}

    async def second(sc: Any) -> dict[str, Any]:
        return {"second_output": "done too"}

    wf = Workflow(
        [Step(id="first", fn=first, pause_after=True), Step(id="second", fn=second, deps=("first",))]
    )
    with open_store_sync(f"sqlite:///{tmp_path}/s.db") as store:
        runner = SyncRunner(wf, store)
        paused = runner.start("wf-1", {"user_input": "go"})
        assert paused.status is RunStatus.PAUSED
        done = runner.resume("wf-1")
        assert done.status is RunStatus.COMPLETED
        assert done.state["second_output"] == "done too"
        assert store.get_status("wf-1") is RunStatus.COMPLETED
