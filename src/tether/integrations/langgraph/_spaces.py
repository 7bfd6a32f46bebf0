"""The namespaces of one store as this process knows them: a cache of ``Space`` records,
their locks, their loading, and the index runs that list a thread's namespaces."""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from tether.errors import VersionConflict
from tether.integrations.langgraph._handout import gc_paused
from tether.integrations.langgraph._layout import (
    LIST,
    REDUCERS,
    check_prefix,
    decode_channels,
    ns_key,
    thread_index_key,
)
from tether.integrations.langgraph._space import (
    FRESH,
    Space,
)
from tether.state import ExecutionContext
from tether.stores import CheckpointStore
from tether.stores.blocking import BlockingLock

logger = logging.getLogger(__name__)

__all__ = ["Spaces"]


class Spaces:
    """The store, the serializer, and what this process knows of each namespace run.

    ``inline``: the operations run to completion in the calling thread (``run_inline``):
    ``store`` is then an object with the store's methods whose awaits never suspend (see
    ``_inline.InlineStore``), and the namespace locks are thread locks."""

    def __init__(
        self,
        store: Any,
        serde: Any,
        *,
        cache_size: int = 256,
        prefix: str = "lg",
        inline: bool = False,
        home_loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        check_prefix(prefix)
        self.store: CheckpointStore = store
        self.inline = inline
        self.prefix = prefix
        """Run ids start with it: savers with different prefixes share a store unseen."""
        self.serde = serde
        self.cache_size = cache_size
        self.cache: OrderedDict[str, Space] = OrderedDict()
        self.locks: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self.indexed: set[tuple[str, str]] = set()
        self.keys: dict[tuple[str, str], str] = {}
        """``ns_key`` of recent ``(thread_id, ns)``: every call needs it."""
        self.guard = threading.Lock()
        """The cache and the write buffers: a sync caller buffers writes from its own thread."""
        self.home_loop = home_loop
        """The store's loop when the operations run inline (where waiting writes are swept)."""

    def with_serde(self, serde: Any) -> Spaces:
        """The same store, cache and locks, with another serializer (``with_allowlist``)."""
        twin = copy.copy(self)
        twin.serde = serde
        return twin

    def dumps(self, value: Any) -> list[Any]:
        t, b = self.serde.dumps_typed(value)
        return [t, b]

    def loads(self, typed: tuple[str, bytes]) -> Any:
        return self.serde.loads_typed(typed)

    def space(self, thread_id: str, ns: str, key: str | None = None) -> Space:
        if key is None:
            key = self.keys.get((thread_id, ns))
            if key is None:
                key = ns_key(thread_id, ns, self.prefix)
                if len(self.keys) >= 4 * self.cache_size:
                    self.keys.clear()
                self.keys[thread_id, ns] = key
        with self.guard:
            n = self.cache.get(key)
            if n is None:
                n = self.cache[key] = Space(key, thread_id, ns)
                for old in list(self.cache.values())[: max(0, len(self.cache) - self.cache_size)]:
                    if not old.buffer:  # a namespace with writes still to store stays
                        del self.cache[old.key]
            else:
                self.cache.move_to_end(key)
            return n

    def lock(self, key: str) -> Any:
        """The namespace's lock: an asyncio lock, or a thread lock when inline."""
        lock = self.locks.get(key)
        if lock is None:
            with self.guard:
                lock = self.locks.get(key)
                if lock is None:
                    lock = self.locks[key] = BlockingLock() if self.inline else asyncio.Lock()
        return lock

    def adopt(self, n: Space, view: Any, version: int, values: dict[str, Any], owner: int = FRESH) -> None:
        meta = view.get("m") or {}
        n.view, n.version, n.values, n.owner, n.given = view, version, values, owner, {}
        n.ctx = view if isinstance(view, ExecutionContext) else None
        n.snaps = {ch: list(v) for ch, v in values.items() if type(v) is list and meta[ch][1] == LIST}
        n.pos = {e[0]: i for i, e in enumerate(view.get("ix") or [])}

    def committed(self, n: Space, ctx: ExecutionContext) -> None:
        n.ctx, n.view, n.version = ctx, ctx, ctx.version

    async def load(self, n: Space, *, writable: bool = True) -> bool:
        """Read the latest state. A read needs only the lean ``load``; a write needs an
        ExecutionContext, and keeps the values already decoded when nothing changed (and the
        graph's items beside them, by which appends are recognised).

        The garbage collector is paused while the state is built: everything that
        allocates stays alive, and on a large state the passes it triggers cost as much as
        the read. Inline (where no await suspends) that is the whole read: the rows, the
        chain replay and its integrity check in the store, then the decoding; on an event
        loop only the decoding, so that other tasks never run with it paused."""
        if self.inline:
            with gc_paused():
                return await self._load(n, writable)
        return await self._load(n, writable)

    async def _load(self, n: Space, writable: bool) -> bool:
        if not writable:
            cp = await self.store.load(n.key)
            if cp is None:
                n.forget()
                return False
            with gc_paused():
                values = decode_channels(cp.state, None, self.loads)
            self.adopt(n, cp.state, cp.version, values)
            return True
        ctx = await self.store.load_context(n.key, reducers=REDUCERS)
        if ctx is None:
            n.forget()
            return False
        if n.view is not None and n.version == ctx.version:
            values, snaps, given = n.values, n.snaps, n.given
            self.adopt(n, ctx, ctx.version, values, n.owner)
            n.snaps, n.given = snaps, given
        else:
            with gc_paused():
                values = decode_channels(ctx, None, self.loads)
            self.adopt(n, ctx, ctx.version, values)
        return True

    async def fresh(self, n: Space) -> bool:
        """Make ``n`` the store's latest; about one small read when it already is."""
        if n.view is None:
            return await self.load(n, writable=False)
        info = await self.store.get_run(n.key)
        if info is None:
            n.forget()
            return False
        if info.version != n.version:
            return await self.load(n, writable=False)
        return True

    def new_ctx(self, n: Space) -> ExecutionContext:
        ctx = ExecutionContext(n.key, reducers=REDUCERS)
        ctx.put("t", [n.thread_id, n.ns])
        return ctx

    async def index_add(self, key: str, item: Any, head: Mapping[str, Any]) -> None:
        """Add ``item`` to an index run's list ``k`` (once; safe against other writers)."""
        mark = (key, repr(item))
        if mark in self.indexed:
            return
        for attempt in range(5):
            ctx = await self.store.load_context(key, reducers=REDUCERS)
            if ctx is None:
                ctx = ExecutionContext(key, reducers=REDUCERS)
                for k, v in head.items():
                    ctx.put(k, v)
            if item not in (ctx.get("k") or []):
                ctx.merge({"k": [item]})
                try:
                    await self.store.commit(ctx)
                except VersionConflict:
                    if attempt == 4:
                        raise
                    continue
            self.indexed.add(mark)
            return

    async def index_items(self, key: str) -> list[Any]:
        cp = await self.store.load(key)
        return list(cp.state.get("k") or []) if cp is not None else []

    async def namespaces(self, thread_id: str) -> list[str]:
        return [str(ns) for ns in await self.index_items(thread_index_key(thread_id, self.prefix))]

    async def ctx_for_write(self, n: Space) -> ExecutionContext:
        if n.ctx is not None:
            return n.ctx
        await self.index_add(thread_index_key(n.thread_id, self.prefix), n.ns, {"t": n.thread_id})
        return self.new_ctx(n)
