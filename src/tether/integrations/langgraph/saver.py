"""``TetherSaver``: LangGraph's checkpointer interface on tether's stores.

A store belongs to one event loop. ``async with TetherSaver.from_url(url)`` opens it on
the caller's loop, for async graphs (``ainvoke``, ``astream``): a call from another loop
or thread is handed to that loop. ``with TetherSaver.from_url(url)`` opens it on a loop
thread of its own, for sync graphs (``invoke``), and works in Jupyter or any thread: the
saver's work then runs in the calling thread, and so do the store calls a graph step
makes (commit, load, the run record) on SQLite, PostgreSQL and Redis, through a second,
synchronous connection (``tether.stores.blocking``); the other calls are handed to the
loop thread. Either way both the sync and the async methods work. Only a sync call on
the store's own loop is refused (it would block that loop forever).
"""

from __future__ import annotations

import asyncio
import builtins
import math
import random
from collections.abc import AsyncIterator, Collection, Coroutine, Iterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from tether.errors import ConfigError
from tether.integrations.langgraph._inline import InlineStore
from tether.integrations.langgraph._layout import check_prefix
from tether.integrations.langgraph._threads import Threads
from tether.stores import CheckpointStore, ExpiryPolicy, create_store
from tether.stores.blocking import blocking_twin, run_inline
from tether.sync import open_store_sync

__all__ = ["TetherSaver"]

T = TypeVar("T")


def _where(config: RunnableConfig) -> tuple[str, str, str | None]:
    conf = config.get("configurable") or {}
    thread_id = conf.get("thread_id")
    if thread_id is None:
        raise ConfigError('TetherSaver needs a thread id: pass config={"configurable": {"thread_id": "..."}}')
    return str(thread_id), str(conf.get("checkpoint_ns") or ""), conf.get("checkpoint_id")


def _store_options(options: dict[str, Any]) -> dict[str, Any]:
    # LangGraph keeps checkpoints until they are deleted; tether's stores expire runs by
    # default, so a saver opened from a URL keeps them unless told otherwise.
    options.setdefault("expiry", ExpiryPolicy(checkpoint_ttl=None, completed_ttl=None))
    return options


class TetherSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer that stores threads in a tether store.

    Open it with :meth:`from_url` (``sqlite:///…``, ``postgresql://…``, ``redis://…``,
    ``mysql://…``, ``tiered+redis://…``), or wrap a store you opened yourself:
    ``TetherSaver(store)`` then serves the event loop of its first async call.

    Channels that grow by appending (``add_messages``, ``operator.add``) are stored as
    the items each step added; the latest checkpoint of a namespace this process wrote
    or read is served from memory after one small read that proves it is still the
    latest. Values go through LangGraph's serializer (``serde``), as with its own savers.

    Args:
        store: an open (set up) tether store.
        serde: LangGraph serializer; its default ``JsonPlusSerializer`` when None.
        cache_size: how many namespaces keep their latest state decoded in memory.
        flush_delay: seconds a task's writes may wait to be stored in the same commit as
            the checkpoint that follows them (one durable write per step instead of two).
            Interrupts, errors and resumes are stored at once; a process killed within
            that window runs the finished task again on resume. None: store at once.
        prefix: run ids of this saver start with it (``lg`` by default), so that savers
            with different prefixes share one store without seeing each other's threads.
    """

    def __init__(
        self,
        store: CheckpointStore,
        *,
        serde: SerializerProtocol | None = None,
        cache_size: int = 256,
        flush_delay: float | None = 0.02,
        prefix: str = "lg",
        loop: asyncio.AbstractEventLoop | None = None,
        inline: InlineStore | None = None,
    ) -> None:
        _check_options(cache_size=cache_size, flush_delay=flush_delay, prefix=prefix)
        super().__init__(serde=serde)
        self.store = store
        self.inline_store = inline
        """Set for a saver serving sync graphs: its work runs in the callers' threads on this
        store (``with TetherSaver.from_url(...)`` opens one); ``loop`` is then the store's
        own loop thread, where the calls the inline store cannot make go."""
        self._threads = Threads(
            store if inline is None else inline,
            self.serde,
            cache_size=cache_size,
            flush_delay=flush_delay,
            prefix=prefix,
            inline=inline is not None,
            home_loop=loop if inline is not None else None,
        )
        self._loop = loop

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        serde: SerializerProtocol | None = None,
        flush_delay: float | None = 0.02,
        prefix: str = "lg",
        **options: Any,
    ) -> _SaverOpener:
        """Open a saver on the store at ``url``; use with ``with`` or ``async with``.

        ``options`` go to the store (``codec``, ``compaction``, ``expiry``...); checkpoints
        never expire unless an ``expiry`` is given.

        >>> with TetherSaver.from_url("sqlite:///checkpoints.db") as saver:  # doctest: +SKIP
        ...     graph = builder.compile(checkpointer=saver)
        """
        _check_options(flush_delay=flush_delay, prefix=prefix)  # before anything is opened
        return _SaverOpener(
            url, serde, {"flush_delay": flush_delay, "prefix": prefix}, _store_options(dict(options))
        )

    # == running on the store's loop, or in the caller's thread ========================
    async def _arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one of the saver's own coroutines (``self._threads``') for an async caller."""
        if self._threads.inline:  # on a worker thread: the saver's locks block their thread
            return await asyncio.to_thread(run_inline, coro)
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        if loop is self._loop:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one of the saver's own coroutines (``self._threads``') for a sync caller: in
        this thread when the saver runs inline, else on the store's loop."""
        if not self._threads.inline:
            return self._srun(coro)
        self._refuse_on_loop(coro)
        return run_inline(coro)

    def _refuse_on_loop(self, coro: Coroutine[Any, Any, Any]) -> None:
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and running is self._loop:
            coro.close()
            raise ConfigError(
                "a sync TetherSaver method was called on the event loop its store runs on, "
                "which would block it: use the async graph methods here (ainvoke, astream, "
                "aget_state), or open the saver with `with TetherSaver.from_url(url)` for sync graphs"
            )

    def _srun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the store's loop and wait for it (the store's own calls)."""
        if self._loop is None:
            coro.close()
            raise ConfigError(
                "this TetherSaver has no event loop yet: for sync graphs open it with "
                "`with TetherSaver.from_url(url) as saver:`"
            )
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            coro.close()
            raise ConfigError(
                "a sync TetherSaver method was called on the event loop its store runs on, "
                "which would block it: use the async graph methods here (ainvoke, astream, "
                "aget_state), or open the saver with `with TetherSaver.from_url(url)` for sync graphs"
            )
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    # == the checkpointer interface (async) ==========================================
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns, cid = _where(config)
        return await self._arun(self._threads.get_tuple(thread_id, ns, cid))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await self._arun(self._select(config, filter, before, limit))
        for cid, ns in found:
            tup = await self._arun(self._threads.tuple_of(cid, ns))
            if tup is not None:
                yield tup

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._arun(self._put(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        now = self._writes(config, writes, task_id, task_path)
        if now is not None:
            await self._arun(now)

    async def aflush(self) -> None:
        """Store the task writes still waiting for their checkpoint (see ``flush_delay``)."""
        await self._arun(self._threads.flush())

    async def adelete_thread(self, thread_id: str) -> None:
        await self._arun(self._threads.delete_thread(str(thread_id)))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._arun(self._threads.delete_for_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._arun(self._threads.copy_thread(str(source_thread_id), str(target_thread_id)))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._arun(self._threads.prune([str(t) for t in thread_ids], strategy))

    # == the same, blocking ==========================================================
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns, cid = _where(config)
        return self._sync(self._threads.get_tuple(thread_id, ns, cid))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._sync(self._put(config, checkpoint, metadata, new_versions))

    def flush(self) -> None:
        """Store the task writes still waiting for their checkpoint (see ``flush_delay``)."""
        self._sync(self._threads.flush())

    def delete_thread(self, thread_id: str) -> None:
        self._sync(self._threads.delete_thread(str(thread_id)))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._sync(self._threads.delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._sync(self._threads.copy_thread(str(source_thread_id), str(target_thread_id)))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._sync(self._threads.prune([str(t) for t in thread_ids], strategy))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        for cid, ns in self._sync(self._select(config, filter, before, limit)):
            tup = self._sync(self._threads.tuple_of(cid, ns))
            if tup is not None:
                yield tup

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        now = self._writes(config, writes, task_id, task_path)
        if now is not None:
            self._sync(now)

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> BaseCheckpointSaver[str]:
        """LangGraph's clone with a stricter serializer; it shares this saver's cache."""
        clone = super().with_allowlist(extra_allowlist)
        if clone is not self and isinstance(clone, TetherSaver):
            clone._threads = self._threads.with_serde(clone.serde)
        return clone

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Versions as LangGraph's SQL savers write them, so imported threads continue."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # == internals ==================================================================
    def _writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> Coroutine[Any, Any, None] | None:
        """Buffer writes that may wait for the next put, from the caller's thread (no hop to
        the store's loop); otherwise the coroutine that stores them now."""
        thread_id, ns, cid = _where(config)
        if cid is None:
            raise ConfigError(
                "put_writes needs configurable.checkpoint_id (the checkpoint the writes follow)"
            )
        batch, deferred = self._threads.writes_batch(cid, writes, task_id, task_path)
        if deferred and self._loop is not None:
            self._threads.defer(thread_id, ns, batch, self._loop)
            return None
        return self._threads.store_writes(thread_id, ns, batch)

    async def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id, ns, parent = _where(config)
        meta = get_serializable_checkpoint_metadata(config, metadata)
        await self._threads.put(thread_id, ns, checkpoint, meta, parent, new_versions)
        return {
            "configurable": {
                "thread_id": config["configurable"]["thread_id"],
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def _select(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> builtins.list[tuple[str, Any]]:
        conf = (config or {}).get("configurable") or {}
        thread_id = conf.get("thread_id")
        ns = conf.get("checkpoint_ns")
        before_id = ((before or {}).get("configurable") or {}).get("checkpoint_id")
        return await self._threads.select(
            None if thread_id is None else str(thread_id),
            None if ns is None else str(ns),
            cid=conf.get("checkpoint_id"),
            before=before_id,
            filter=filter,
            limit=limit,
        )


def _check_options(*, flush_delay: float | None, prefix: str, cache_size: int = 1) -> None:
    """Raise :class:`ConfigError` naming the saver option that is wrong (before a store is
    opened for it, so a bad option leaves no file or connection behind)."""
    check_prefix(prefix)
    if type(cache_size) is not int or cache_size < 1:
        raise ConfigError(
            f"TetherSaver cache_size must be a whole number >= 1 (namespaces kept decoded in "
            f"memory), got {cache_size!r}"
        )
    if flush_delay is not None and (
        type(flush_delay) not in (int, float) or not math.isfinite(flush_delay) or flush_delay < 0
    ):
        raise ConfigError(
            f"TetherSaver flush_delay must be None (store task writes at once) or seconds >= 0, "
            f"got {flush_delay!r}"
        )


class _SaverOpener:
    """What :meth:`TetherSaver.from_url` returns: a sync and an async context manager."""

    def __init__(
        self, url: str, serde: SerializerProtocol | None, saver: dict[str, Any], options: dict[str, Any]
    ) -> None:
        self.url, self.serde, self.saver_options, self.options = url, serde, saver, options
        self._saver: TetherSaver | None = None
        self._inline: InlineStore | None = None

    async def __aenter__(self) -> TetherSaver:
        store = create_store(self.url, **self.options)
        try:
            await store.setup()
            self._saver = TetherSaver(
                store, serde=self.serde, loop=asyncio.get_running_loop(), **self.saver_options
            )
        except BaseException:
            await store.aclose()
            raise
        return self._saver

    async def __aexit__(self, *exc: object) -> None:
        if self._saver is not None:
            try:
                await self._saver.aflush()
            finally:
                await self._saver.store.aclose()
                self._saver = None

    def __enter__(self) -> TetherSaver:
        sync_store = open_store_sync(self.url, **self.options)
        try:
            twin = blocking_twin(sync_store.store, self.url, self.options)
        except BaseException:
            sync_store.close()
            raise
        inline = InlineStore(sync_store, twin)
        try:
            self._saver = TetherSaver(
                sync_store.store,
                serde=self.serde,
                loop=sync_store.runner.loop,
                inline=inline,
                **self.saver_options,
            )
        except BaseException:
            inline.close()  # the twin, the store and its loop thread
            raise
        self._inline = inline
        return self._saver

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        saver, self._saver = self._saver, None
        inline, self._inline = self._inline, None
        if saver is not None and inline is not None:
            try:
                saver.flush()
            finally:
                inline.close()
