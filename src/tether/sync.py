"""Blocking use of tether's async API: scripts, sync frameworks, Jupyter, worker threads.

Everything in tether that does I/O is async. A sync caller cannot ``asyncio.run`` each
call: inside Jupyter (or any code that already runs an event loop) ``asyncio.run``
raises, and a store's connections belong to the loop that opened them, so a loop per
call would reopen them every time. So a :class:`LoopThread` runs one event loop on a
daemon thread for the life of a facade; each blocking call hands its coroutine to that
loop and waits for it. Any thread may call, and the exceptions are the ones the async
API raises (``VersionConflict``, ``RunNotFound``...), re-raised in the caller's thread.

    >>> with open_store_sync("sqlite:///tether.db") as store:  # doctest: +SKIP
    ...     cp = store.load("run-1")
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from tether.errors import ConfigError
from tether.state import Checkpoint, ExecutionContext, ExecutionContextSnapshot, ReducerRegistry, RunStatus
from tether.state.model import CheckpointInfo, RunInfo
from tether.stores import CheckpointStore, create_store

if TYPE_CHECKING:
    from tether.runtime.report import Decision
    from tether.runtime.runner import Runner, RunResult
    from tether.runtime.workflow import Workflow

__all__ = ["LoopThread", "SyncRunner", "SyncStore", "open_store_sync", "run_sync"]

T = TypeVar("T")


class LoopThread:
    """An event loop running on a daemon thread of its own, for blocking callers.

    ``run(coro)`` blocks the calling thread until the coroutine finishes on that loop.
    Calling it from the loop's own thread would wait forever, so that raises
    :class:`ConfigError` instead.
    """

    def __init__(self, name: str = "tether-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        self._closed = False

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; the caller decides how to wait."""
        if self._closed:
            coro.close()
            raise ConfigError("this tether loop thread is closed; open a new facade")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], *, timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and return its result (or raise its exception)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise ConfigError(
                "a blocking tether call was made on tether's own loop thread (from inside a step "
                "or a callback); await the async API there instead"
            )
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()  # KeyboardInterrupt or timeout: do not leave it running
            raise

    def close(self) -> None:
        """Cancel what is still running, stop the loop and join the thread; idempotent."""
        if self._closed:
            return
        if self._thread.is_alive():
            try:
                self.run(_drain())
            finally:
                self._closed = True
                self.loop.call_soon_threadsafe(self.loop.stop)
                self._thread.join()
        self._closed = True
        self.loop.close()

    def __enter__(self) -> LoopThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _drain() -> None:
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine to completion from sync code, even where a loop is running.

    Outside any event loop this is ``asyncio.run``. Inside one (a Jupyter cell, an async
    framework calling sync code), the coroutine runs on a short-lived loop thread, so
    the caller's loop is neither re-entered nor blocked by a nested ``asyncio.run``.
    For many calls on one store use :func:`open_store_sync`, which keeps its connections.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with LoopThread(name="tether-run-sync") as runner:
        return runner.run(coro)


class SyncStore:
    """A :class:`CheckpointStore` with blocking methods of the same names and errors.

    Built by :func:`open_store_sync`; ``store`` is the async store underneath (it lives
    on ``runner``'s loop, so only coroutines run there may use it).
    """

    def __init__(self, store: CheckpointStore, runner: LoopThread, *, owns_runner: bool = True) -> None:
        self.store = store
        self.runner = runner
        self._owns_runner = owns_runner
        self._closed = False

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise ConfigError("this SyncStore is closed; open a new one with open_store_sync(url)")
        return self.runner.run(coro)

    def setup(self) -> None:
        self._run(self.store.setup())

    def commit(
        self,
        ctx: ExecutionContext,
        *,
        node_id: str | None = None,
        status: RunStatus = RunStatus.RUNNING,
        metadata: Mapping[str, Any] | None = None,
    ) -> int:
        return self._run(self.store.commit(ctx, node_id=node_id, status=status, metadata=metadata))

    def save(self, checkpoint: Checkpoint, *, expected_version: int | None = None) -> int:
        return self._run(self.store.save(checkpoint, expected_version=expected_version))

    def load(self, run_id: str, version: int | None = None) -> Checkpoint | None:
        return self._run(self.store.load(run_id, version))

    def load_context(
        self, run_id: str, version: int | None = None, *, reducers: ReducerRegistry | None = None
    ) -> ExecutionContext | None:
        return self._run(self.store.load_context(run_id, version, reducers=reducers))

    def history(
        self, run_id: str, *, before: int | None = None, limit: int | None = None
    ) -> list[CheckpointInfo]:
        return self._run(self.store.history(run_id, before=before, limit=limit))

    def snapshot(self, run_id: str) -> ExecutionContextSnapshot | None:
        return self._run(self.store.snapshot(run_id))

    def get_run(self, run_id: str) -> RunInfo | None:
        return self._run(self.store.get_run(run_id))

    def get_status(self, run_id: str) -> RunStatus | None:
        return self._run(self.store.get_status(run_id))

    def set_status(self, run_id: str, status: RunStatus | str) -> None:
        self._run(self.store.set_status(run_id, status))

    def update_state(
        self,
        run_id: str,
        update: Mapping[str, Any],
        *,
        reducers: ReducerRegistry | None = None,
        node_id: str | None = None,
    ) -> int:
        return self._run(self.store.update_state(run_id, update, reducers=reducers, node_id=node_id))

    def rollback(self, run_id: str, version: int) -> int:
        return self._run(self.store.rollback(run_id, version))

    def copy(self, run_id: str, new_run_id: str, *, version: int | None = None) -> int:
        return self._run(self.store.copy(run_id, new_run_id, version=version))

    def prune(self, run_id: str, *, keep: int) -> int:
        return self._run(self.store.prune(run_id, keep=keep))

    def delete(self, run_id: str) -> bool:
        return self._run(self.store.delete(run_id))

    def list_runs(
        self, *, status: RunStatus | None = None, limit: int = 100, offset: int = 0
    ) -> list[RunInfo]:
        return self._run(self.store.list_runs(status=status, limit=limit, offset=offset))

    def purge_expired(self) -> int:
        return self._run(self.store.purge_expired())

    def close(self) -> None:
        """Close the store's connections (and the loop thread it owns); idempotent."""
        if self._closed:
            return
        try:
            self.runner.run(self.store.aclose())
        finally:
            self._closed = True
            if self._owns_runner:
                self.runner.close()

    def __enter__(self) -> SyncStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_store_sync(url: str, *, setup: bool = True, **options: Any) -> SyncStore:
    """Open the store for ``url`` (as :func:`tether.stores.open_store` does) for blocking use.

    Use it as a context manager, or call ``close()``: the store's connections and its loop
    thread live until then.

    >>> with open_store_sync("sqlite:///tether.db") as store:  # doctest: +SKIP
    ...     store.commit(ctx)
    """
    runner = LoopThread(name="tether-store")
    try:
        store = runner.run(_open(url, setup, options))
    except BaseException:
        runner.close()
        raise
    return SyncStore(store, runner)


async def _open(url: str, setup: bool, options: dict[str, Any]) -> CheckpointStore:
    store = create_store(url, **options)
    if setup:
        try:
            await store.setup()
        except BaseException:
            await store.aclose()
            raise
    return store


class SyncRunner:
    """A :class:`tether.runtime.Runner` driven from sync code.

    Steps run on the store's loop thread, so async steps work as they do under the async
    runner, and a sync step simply blocks that thread while it runs. Keyword arguments
    are the Runner's (reducers, decisions, on_event...).
    """

    def __init__(self, workflow: Workflow, store: SyncStore, **options: Any) -> None:
        from tether.runtime.runner import Runner

        self.store = store
        self.runner: Runner = Runner(workflow, store.store, **options)

    def start(self, run_id: str, inputs: Mapping[str, Any] | None = None) -> RunResult:
        """Start a new run and drive it until it completes, pauses or fails."""
        return self.store._run(self.runner.start(run_id, inputs))

    def resume(
        self, run_id: str, *, decision: Decision | str | None = None, force: bool = False
    ) -> RunResult:
        """Continue a paused or crashed run (see ``Runner.resume``)."""
        return self.store._run(self.runner.resume(run_id, decision=decision, force=force))
