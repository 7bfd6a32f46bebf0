"""The saver's work, as coroutines on the store's event loop (see ``_layout`` for the data).

Each namespace run is guarded by a lock of this process and written through an
:class:`ExecutionContext`, so a put is one atomic tether commit whose delta is what
changed: the items a list channel gained, the channels LangGraph bumped, the new
checkpoint record and index entry. Another process writing the same namespace makes
the commit raise ``VersionConflict``; the namespace is then reloaded and the put redone.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, cast

from langgraph.checkpoint.base import WRITES_IDX_MAP, Checkpoint, CheckpointTuple

from tether.errors import ConfigError, RunNotFound, VersionConflict
from tether.integrations.langgraph._handout import copied, gc_paused
from tether.integrations.langgraph._layout import (
    EMPTY,
    LIST,
    REDUCERS,
    REF,
    VALUE,
    before_put,
    check_prefix,
    chunks_extend,
    decode_channels,
    extends,
    list_prefix,
    ns_key,
    record_of,
    resolve_writes,
    run_index_key,
    scratch_key,
    sort_writes,
    thread_index_key,
)
from tether.state import ExecutionContext, RunStatus
from tether.stores import CheckpointStore
from tether.stores.blocking import BlockingLock, run_inline

__all__ = ["Threads"]

logger = logging.getLogger(__name__)

_ATTEMPTS = 3
_DROP_WRITES = 32
_DROP_WRITE_BYTES = 32 * 1024
_RECENT = 16
_NOTE_BYTES = 16 * 1024
"""Replaced values up to this size are kept for a one-read time travel; larger ones are
not stored twice (that read then takes two loads)."""


def _size(entry: list[Any]) -> int:
    return len(entry[5]) if entry[4] != REF else 0


Batch = tuple[str, dict[str, Any], bool]
"""Writes of one ``put_writes`` call: checkpoint id, entries by key, all special."""

_PLAIN: set[str] = set()
"""``dated`` for ``merge_trusted``: the saver's own values (bytes, str, int, None, lists
and dicts of them) hold no datetime and need no validating walk."""


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _as_ref(entry: list[Any], refs: Mapping[tuple[str, bytes], tuple[str, int]]) -> list[Any]:
    hit = refs.get((entry[3], entry[5]))
    if hit is None or hit[0] != entry[4]:
        return entry
    return [*entry[:4], REF, hit[1], entry[6]]


def _wkey(entry: list[Any]) -> str:
    return f"{entry[0]}|{entry[1]}|{entry[2]}"


FRESH, PRIVATE, LENT = 0, 1, 2


class _Ns:
    """What this process knows of one namespace run: its latest context, decoded."""

    __slots__ = (
        "buffer",
        "ctx",
        "given",
        "key",
        "ns",
        "owner",
        "pos",
        "recent",
        "since",
        "snaps",
        "thread_id",
        "values",
        "version",
        "view",
        "__weakref__",
    )

    def __init__(self, key: str, thread_id: str, ns: str) -> None:
        self.key, self.thread_id, self.ns = key, thread_id, ns
        self.ctx: ExecutionContext | None = None
        """The latest state, ready to commit on (loaded when a write needs it)."""
        self.view: Any = None
        """The latest state for reading: ``ctx``, or a plain dict from a lean load."""
        self.version = 0
        self.values: dict[str, Any] = {}
        """Channel values at the context's version (the objects LangGraph handed over)."""
        self.snaps: dict[str, list[Any]] = {}
        """For list channels, the items as stored: a copy, so in-place edits show."""
        self.owner = FRESH
        """Who may hold ``values``: nobody yet (FRESH, just decoded), LangGraph's loop, which
        put them (PRIVATE), or a caller they were handed to as they are (LENT: they may have
        been edited since, so the next caller gets them decoded again from the stored bytes)."""
        self.given: dict[str, list[Any]] = {}
        """For list channels, the items last handed out (copies of ``values``'): the next put
        of a graph that read them extends them, which is an append as well."""
        self.pos: dict[str, int] = {}
        """Checkpoint id -> its (last) entry in ``ix``."""
        self.buffer: list[Batch] = []
        """Pending writes not stored yet (see ``Threads.flush_delay``)."""
        self.since: float | None = None
        """When the oldest buffered batch was buffered (``time.monotonic``); None once a
        flush of them has been started."""
        self.recent: dict[tuple[str, bytes], tuple[str, int]] = {}
        """The chunks last appended to list channels, by channel and bytes: ``(type, index)``.
        A pending write with the same bytes is stored as a reference to its chunk."""

    def forget(self) -> None:
        self.ctx, self.view, self.version, self.values, self.snaps, self.pos = None, None, 0, {}, {}, {}
        self.recent, self.given, self.owner = {}, {}, FRESH


class Threads:
    """LangGraph's checkpointer operations over one tether store.

    Its operations are coroutines. In the default mode they run on the store's event loop.
    With ``inline=True`` they run to completion in the calling thread (``run_inline``):
    ``store`` is then an object with the store's methods whose awaits never suspend (see
    ``saver._InlineStore``), the namespace locks are thread locks, and writes that wait
    for their checkpoint are flushed on a worker thread."""

    def __init__(
        self,
        store: Any,
        serde: Any,
        *,
        cache_size: int = 256,
        flush_delay: float | None = 0.02,
        prefix: str = "lg",
        inline: bool = False,
    ) -> None:
        check_prefix(prefix)
        self.store: CheckpointStore = store
        self.inline = inline
        self.prefix = prefix
        """Run ids start with it: savers with different prefixes share a store unseen."""
        self.serde = serde
        self.cache_size = cache_size
        self.flush_delay = flush_delay
        """Task writes wait up to this long (seconds) to be stored in the same commit as
        the checkpoint that follows them; None stores each batch at once."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._cache: OrderedDict[str, _Ns] = OrderedDict()
        self._locks: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self._indexed: set[tuple[str, str]] = set()
        self._keys: dict[tuple[str, str], str] = {}
        """``ns_key`` of recent ``(thread_id, ns)``: every call needs it."""
        self._guard = threading.Lock()
        """The cache and the write buffers: a sync caller buffers writes from its own thread."""
        self.home_loop: asyncio.AbstractEventLoop | None = None
        """The store's loop when the operations run inline (where waiting writes are swept)."""
        self._sweep_loop: asyncio.AbstractEventLoop | None = None
        self._sweeping = False
        """A sweep of the buffered writes is scheduled on ``_sweep_loop``: it runs every
        ``flush_delay`` while any are buffered (one wake-up per delay, not one per batch)."""

    def with_serde(self, serde: Any) -> Threads:
        """The same store, cache and locks, with another serializer (``with_allowlist``)."""
        twin = copy.copy(self)
        twin.serde = serde
        return twin

    # == helpers ====================================================================
    def _dumps(self, value: Any) -> list[Any]:
        t, b = self.serde.dumps_typed(value)
        return [t, b]

    def _loads(self, typed: tuple[str, bytes]) -> Any:
        return self.serde.loads_typed(typed)

    def _ns(self, thread_id: str, ns: str, key: str | None = None) -> _Ns:
        if key is None:
            key = self._keys.get((thread_id, ns))
            if key is None:
                key = ns_key(thread_id, ns, self.prefix)
                if len(self._keys) >= 4 * self.cache_size:
                    self._keys.clear()
                self._keys[thread_id, ns] = key
        with self._guard:
            n = self._cache.get(key)
            if n is None:
                n = self._cache[key] = _Ns(key, thread_id, ns)
                for old in list(self._cache.values())[: max(0, len(self._cache) - self.cache_size)]:
                    if not old.buffer:  # a namespace with writes still to store stays
                        del self._cache[old.key]
            else:
                self._cache.move_to_end(key)
            return n

    def _taken(self, n: _Ns, stored_only: bool = False) -> list[Batch]:
        """The buffered batches to store now; ``stored_only``: only those of checkpoints
        already stored (the others wait for a later put, or the sweep)."""
        with self._guard:
            return [b for b in n.buffer if not stored_only or b[0] in n.pos]

    def _stored(self, n: _Ns, taken: list[Batch]) -> None:
        """``taken`` is stored; the batches still buffered wait for the sweep."""
        with self._guard:
            if taken:
                done = {id(b) for b in taken}
                n.buffer[:] = [b for b in n.buffer if id(b) not in done]
            if not n.buffer:
                n.since = None
                return
            n.since = time.monotonic()  # what is left waits for a later put, as long again
            arm = not self._sweeping and self._sweep_loop is not None
            self._sweeping = self._sweeping or arm
        if arm:
            self._arm_sweep()

    def _lock(self, key: str) -> Any:
        """The namespace's lock: an asyncio lock, or a thread lock when inline."""
        lock = self._locks.get(key)
        if lock is None:
            with self._guard:
                lock = self._locks.get(key)
                if lock is None:
                    lock = self._locks[key] = BlockingLock() if self.inline else asyncio.Lock()
        return lock

    def _adopt(self, n: _Ns, view: Any, version: int, values: dict[str, Any], owner: int = FRESH) -> None:
        meta = view.get("m") or {}
        n.view, n.version, n.values, n.owner, n.given = view, version, values, owner, {}
        n.ctx = view if isinstance(view, ExecutionContext) else None
        n.snaps = {ch: list(v) for ch, v in values.items() if type(v) is list and meta[ch][1] == LIST}
        n.pos = {e[0]: i for i, e in enumerate(view.get("ix") or [])}

    def _committed(self, n: _Ns, ctx: ExecutionContext) -> None:
        n.ctx, n.view, n.version = ctx, ctx, ctx.version

    async def _load(self, n: _Ns, *, writable: bool = True) -> bool:
        """Read the latest state. A read needs only the lean ``load``; a write needs an
        ExecutionContext, and keeps the values already decoded when nothing changed (they
        are the objects LangGraph holds, which is how appends are recognised)."""
        if not writable:
            cp = await self.store.load(n.key)
            if cp is None:
                n.forget()
                return False
            with gc_paused():
                values = decode_channels(cp.state, None, self._loads)
            self._adopt(n, cp.state, cp.version, values)
            return True
        ctx = await self.store.load_context(n.key, reducers=REDUCERS)
        if ctx is None:
            n.forget()
            return False
        if n.view is not None and n.version == ctx.version:
            values, snaps, given = n.values, n.snaps, n.given
            self._adopt(n, ctx, ctx.version, values, n.owner)
            n.snaps, n.given = snaps, given
        else:
            with gc_paused():
                values = decode_channels(ctx, None, self._loads)
            self._adopt(n, ctx, ctx.version, values)
        return True

    async def _fresh(self, n: _Ns) -> bool:
        """Make ``n`` the store's latest; about one small read when it already is."""
        if n.view is None:
            return await self._load(n, writable=False)
        info = await self.store.get_run(n.key)
        if info is None:
            n.forget()
            return False
        if info.version != n.version:
            return await self._load(n, writable=False)
        return True

    def _new_ctx(self, n: _Ns) -> ExecutionContext:
        ctx = ExecutionContext(n.key, reducers=REDUCERS)
        ctx.put("t", [n.thread_id, n.ns])
        return ctx

    async def _index_add(self, key: str, item: Any, head: Mapping[str, Any]) -> None:
        """Add ``item`` to an index run's list ``k`` (once; safe against other writers)."""
        mark = (key, repr(item))
        if mark in self._indexed:
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
            self._indexed.add(mark)
            return

    async def _index_items(self, key: str) -> list[Any]:
        cp = await self.store.load(key)
        return list(cp.state.get("k") or []) if cp is not None else []

    async def namespaces(self, thread_id: str) -> list[str]:
        return [str(ns) for ns in await self._index_items(thread_index_key(thread_id, self.prefix))]

    async def _retrying(self, n: _Ns, work: Callable[[], Any], *, absorb: bool = False) -> Any:
        """Run ``work`` under ``n``'s lock on its latest state; redo it after a conflict.
        ``absorb``: ``work`` stores the buffered writes itself (a put, in its commit)."""
        async with self._lock(n.key) if absorb else self._held(n):
            for attempt in range(_ATTEMPTS):
                if n.ctx is None:
                    await self._load(n)
                try:
                    return await work()
                except VersionConflict:
                    n.forget()
                    if attempt == _ATTEMPTS - 1:
                        raise
                except BaseException:
                    n.forget()  # the context may hold ops that were never stored
                    raise

    # == put ========================================================================
    async def put(
        self,
        thread_id: str,
        ns: str,
        checkpoint: Mapping[str, Any],
        metadata: Mapping[str, Any],
        parent_id: str | None,
        new_versions: Mapping[str, Any],
        *,
        equal: bool = False,
    ) -> None:
        """Store a checkpoint; ``equal``: detect appends by equality (values decoded afresh)."""
        n = self._ns(thread_id, ns)

        async def work() -> None:
            self._stored(n, await self._put_once(n, checkpoint, metadata, parent_id, new_versions, equal))

        await self._retrying(n, work, absorb=True)

    async def _put_once(
        self,
        n: _Ns,
        checkpoint: Mapping[str, Any],
        metadata: Mapping[str, Any],
        parent_id: str | None,
        new_versions: Mapping[str, Any],
        equal: bool,
    ) -> list[Batch]:
        """Returns the buffered batches of writes the commit stored. Writes for this
        checkpoint or a later one (a graph whose puts lag behind its tasks) wait for a later
        put, whose appended chunks they may then refer to instead of holding the same bytes
        again."""
        cid = str(checkpoint["id"])
        n.since = None  # this put stores what waits (what it leaves waits again, see _stored)
        ctx = await self._ctx_for_write(n)
        taken = self._taken(n, stored_only=True)
        ix: list[Any] = ctx.get("ix") or []
        values, snaps = dict(n.values), dict(n.snaps)
        # What this put changes, as it was: checkpoint ``ix[-1]`` is then read from this
        # version alone (see ``p`` in ``_layout``).
        note: dict[str, Any] | None = (
            {"id": ix[-1][0], "cp": ctx.get("cp"), "m": {}, "n": {}, "c": {}} if ix else None
        )
        noted = 0
        if parent_id is not None and ix and parent_id != ix[-1][0] and parent_id in n.pos:
            values, snaps = await self._fork(n, ctx, ix, parent_id)
            note = None
            n.recent = {}
        meta: dict[str, Any] = ctx.get("m") or {}
        versions: Mapping[str, Any] = checkpoint["channel_versions"]
        given: Mapping[str, Any] = checkpoint["channel_values"]
        update: dict[str, Any] = {}
        refs = dict(n.recent)
        ref_channels = {k[0] for k in refs}
        # channels that pending writes refer to by chunk: those must be made whole first
        # when the channel's chunks are replaced (see ``_unref``)
        referred = {e[3] for e in ctx.get("w") or () if e[4] == REF}
        for ch in [*versions, *(c for c, e in meta.items() if e is not None and c not in versions)]:
            ent = meta.get(ch)
            ver = versions.get(ch)
            if ch in versions and ch not in new_versions and ent is not None and ent[0] == ver:
                continue  # unchanged: the stored value is this version's
            key = "c:" + ch
            chunks = ctx.get(key) or []
            if note is not None:
                note["m"][ch] = ent
            if ch not in versions or ch not in given:
                if ent is not None and ent[1] != EMPTY:
                    refs = self._replaced(ctx, ch, refs, ref_channels, referred)
                    ctx.put_trusted(key, [])
                    noted += self._note_chunks(note, ch, chunks)
                update[ch] = None if ch not in versions else [ver, EMPTY]
                values.pop(ch, None)
                snaps.pop(ch, None)
                continue
            value = given[ch]
            if type(value) is list:
                old = snaps.get(ch) if ent is not None and ent[1] == LIST else None
                if old is not None and not extends(value, old, equal=equal):
                    handed = n.given.get(ch)  # a graph that read the state extends its copy
                    if handed is not None and len(handed) == len(old) and extends(value, handed):
                        old = handed
                if old is not None and extends(value, old, equal=equal):
                    if note is not None:
                        note["n"][ch] = len(chunks)
                    if len(value) > len(old):
                        t, b = self._dumps(value[len(old) :])
                        refs[ch, b] = (t, len(chunks))
                        ref_channels.add(ch)
                        ctx.merge_trusted({key: [[t, b]]}, _PLAIN)
                elif chunks:
                    refs = self._replaced(ctx, ch, refs, ref_channels, referred)
                    ctx.put_trusted(key, [self._dumps(value)])
                    noted += self._note_chunks(note, ch, chunks)
                else:  # a first value is an append to nothing: growth, not a rewrite
                    ctx.merge_trusted({key: [self._dumps(value)]}, _PLAIN)
                    if note is not None:
                        note["n"][ch] = 0
                snaps[ch], kind = list(value), LIST
            else:
                refs = self._replaced(ctx, ch, refs, ref_channels, referred)
                ctx.put_trusted(key, [self._dumps(value)])
                noted += self._note_chunks(note, ch, chunks)
                snaps.pop(ch, None)
                kind = VALUE
            values[ch] = value
            update[ch] = [ver, kind]
        for batch in taken:  # writes waiting for this checkpoint: one commit for both
            self._apply_writes(n, ctx, batch, refs)
        record = {k: v for k, v in checkpoint.items() if k not in ("channel_values", "channel_versions")}
        own: dict[str, Any] = {"cp": self._dumps(record)}
        if update:
            own["m"] = update
        if ix:
            own["p"] = note if noted <= _NOTE_BYTES else None
        own["ix"] = [[cid, ctx.version + 1, parent_id, *self._dumps(dict(metadata))]]
        ctx.merge_trusted(own, _PLAIN)
        pending: list[Any] = ctx.get("w") or []
        # The previous checkpoint's writes stay in this version too: those that waited for
        # this put are stored only here (see ``_state_of``).
        previous = ix[-1][0] if ix else None
        kept = [e for e in pending if e[0] in (cid, previous) or e[0] not in n.pos]
        dead = len(pending) - len(kept)
        # Reads pick writes by checkpoint id, so older ones may stay a while: dropping them
        # rewrites the live ones, so it waits until they are worth it.
        if dead >= _DROP_WRITES or (dead and sum(map(_size, pending)) > _DROP_WRITE_BYTES):
            ctx.put_trusted("w", kept)
        run_id = metadata.get("run_id")
        if run_id is not None and str(run_id) != ctx.get("r"):
            await self._index_add(run_index_key(str(run_id), self.prefix), [n.thread_id, n.ns], {})
            ctx.put("r", str(run_id))
        await self.store.commit(ctx)
        position = len(ix)
        self._committed(n, ctx)
        n.values, n.snaps, n.owner = values, snaps, PRIVATE
        n.given = {ch: items for ch, items in n.given.items() if ch not in update}  # still copies
        n.pos[cid] = position
        n.recent = refs if len(refs) <= _RECENT else dict(list(refs.items())[-_RECENT:])
        return taken

    async def _fork(
        self, n: _Ns, ctx: ExecutionContext, ix: list[Any], parent_id: str
    ) -> tuple[dict[str, Any], dict[str, list[Any]]]:
        """Put the parent checkpoint's channels back in ``ctx`` (the next save is a full one):
        a put whose parent is an older checkpoint starts a branch from it."""
        try:
            parent, _ = await self._state_of(n.key, ix, n.pos[parent_id])
        except RunNotFound:  # pruned by another process meanwhile: reload and redo
            raise VersionConflict(n.key, expected=ctx.version, actual=None) from None
        self._unref(ctx)  # the chunks they refer to are replaced
        base = {k: v for k, v in parent.items() if k.startswith("c:") or k == "m"}
        for key in ("t", "r", "ix", "ow", "w", "cp"):
            if key in ctx:
                base[key] = ctx.get(key)
        ctx.restore(base)
        values = decode_channels(base, None, self._loads)
        meta = base.get("m") or {}
        return values, {ch: list(v) for ch, v in values.items() if type(v) is list and meta[ch][1] == LIST}

    # == writes =====================================================================
    def writes_batch(
        self, cid: str, writes: Sequence[tuple[str, Any]], task_id: str, path: str
    ) -> tuple[Batch, bool]:
        """One ``put_writes`` call as stored entries, and whether it may wait for the next put
        (interrupts, errors and resumes are stored at once)."""
        special, deferred = True, bool(self.flush_delay)
        entries: dict[str, list[Any]] = {}
        for idx, (ch, value) in enumerate(writes):
            widx = WRITES_IDX_MAP.get(ch)
            if widx is None:
                special, widx = False, idx
            else:
                deferred = False
            t, b = self.serde.dumps_typed(value)
            entries[f"{cid}|{task_id}|{widx}"] = [cid, task_id, widx, ch, t, b, path]
        return (cid, entries, special), deferred

    def defer(self, thread_id: str, ns: str, batch: Batch, loop: asyncio.AbstractEventLoop) -> None:
        """Buffer writes for the next put's commit (or the sweep), from any thread, without
        waiting for ``loop``: a sync graph then pays no hop to the store's thread for them."""
        n = self._ns(thread_id, ns)
        with self._guard:
            if not n.buffer or n.since is None:
                n.since = time.monotonic()
            n.buffer.append(batch)
            self._sweep_loop = loop
            arm = not self._sweeping
            self._sweeping = True
        if arm:
            self._arm_sweep()

    def _arm_sweep(self) -> None:
        loop = self._sweep_loop
        assert loop is not None
        if _running_loop() is loop:
            loop.call_later(self.flush_delay or 0, self._sweep)
        else:
            loop.call_soon_threadsafe(loop.call_later, self.flush_delay or 0, self._sweep)

    def _sweep(self) -> None:
        """On the sweep's loop: flush the namespaces whose writes waited ``flush_delay``;
        come back while any still wait."""
        loop = self._sweep_loop
        assert loop is not None
        delay = self.flush_delay or 0
        now = time.monotonic()
        due: list[_Ns] = []
        with self._guard:
            waiting = [n for n in self._cache.values() if n.buffer and n.since is not None]
            for n in waiting:
                if now - n.since >= delay:  # type: ignore[operator]
                    n.since = None
                    due.append(n)
            later = [n.since for n in waiting if n.since is not None]
            if not later:
                self._sweeping = False
        for n in due:
            if self.inline:
                loop.run_in_executor(None, self._flush_inline, n)
            else:
                task = loop.create_task(self._timed_flush(n))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        if later:
            loop.call_later(max(0.0, min(later) + delay - now), self._sweep)

    def _flush_inline(self, n: _Ns) -> None:
        run_inline(self._timed_flush(n))

    async def store_writes(self, thread_id: str, ns: str, batch: Batch) -> None:
        """Store writes now, with any still buffered for the namespace."""
        n = self._ns(thread_id, ns)
        async with self._lock(n.key):
            with self._guard:
                n.buffer.append(batch)
            await self._flush_locked(n)

    async def put_writes(
        self, thread_id: str, ns: str, cid: str, writes: Sequence[tuple[str, Any]], task_id: str, path: str
    ) -> None:
        batch, deferred = self.writes_batch(cid, writes, task_id, path)
        loop = _running_loop() or self.home_loop
        if deferred and loop is not None:
            self.defer(thread_id, ns, batch, loop)
        else:
            await self.store_writes(thread_id, ns, batch)

    def _unref(self, ctx: ExecutionContext, channel: str | None = None) -> None:
        """Make the writes that refer to ``channel``'s chunks (or any) whole, before those
        chunks are replaced."""
        pending = ctx.get("w") or []
        if any(e[4] == REF and (channel is None or e[3] == channel) for e in pending):
            ctx.put("w", resolve_writes(pending, ctx, channel))

    def _replaced(
        self,
        ctx: ExecutionContext,
        channel: str,
        refs: dict[tuple[str, bytes], tuple[str, int]],
        ref_channels: set[str],
        referred: set[str],
    ) -> dict[tuple[str, bytes], tuple[str, int]]:
        """``channel``'s chunks are about to be replaced: the writes that refer to them are
        made whole, and ``refs`` (returned) forgets them. ``ref_channels``: the channels in
        ``refs``; ``referred``: the channels pending writes refer to (both kept up to date)."""
        if channel in referred:
            self._unref(ctx, channel)
            referred.discard(channel)
        if channel not in ref_channels:
            return refs
        ref_channels.discard(channel)
        return {k: r for k, r in refs.items() if k[0] != channel}

    @staticmethod
    def _note_chunks(note: dict[str, Any] | None, channel: str, chunks: list[Any]) -> int:
        """Keep a replaced value's chunks in the put's note; returns their size."""
        if note is None or not chunks:
            return 0
        note["c"][channel] = chunks
        return sum(len(c[1]) for c in chunks)

    def _apply_writes(
        self,
        n: _Ns,
        ctx: ExecutionContext,
        batch: Batch,
        refs: Mapping[tuple[str, bytes], tuple[str, int]] | None = None,
    ) -> bool:
        """Add one batch of writes to ``ctx``; False when all of it is stored already.
        ``refs``: chunks this commit appends, by channel and bytes: a write with the same
        bytes is stored as a reference to its chunk."""
        cid, entries, special = batch
        ix = ctx.get("ix") or []
        late = cid in n.pos and cid != ix[-1][0]
        listed: list[Any] = [] if late else (ctx.get("w") or [])
        have: dict[str, Any] = (
            ((ctx.get("ow") or {}).get(cid) or {}) if late else {_wkey(e): e for e in listed if e[0] == cid}
        )
        add = {k: e for k, e in entries.items() if (special or k not in have) and have.get(k) != e}
        if not add:
            return False
        if late:
            ctx.merge({"ow": {cid: {**have, **add}}})
        elif any(k in have for k in add):  # an upsert of special writes: rewrite the list
            ctx.put("w", [e for e in listed if _wkey(e) not in add] + list(add.values()))
        else:  # new writes are appended: growth, so they never force a full save
            new = list(add.values())
            if refs:
                new = [_as_ref(e, refs) for e in new]
            ctx.merge_trusted({"w": new}, _PLAIN)
        return True

    async def _ctx_for_write(self, n: _Ns) -> ExecutionContext:
        if n.ctx is not None:
            return n.ctx
        await self._index_add(thread_index_key(n.thread_id, self.prefix), n.ns, {"t": n.thread_id})
        return self._new_ctx(n)

    async def _flush_locked(self, n: _Ns) -> None:
        """Store the writes buffered for ``n`` (its lock held)."""
        for attempt in range(_ATTEMPTS):
            if not n.buffer:
                return
            if n.ctx is None:
                await self._load(n)
            try:
                ctx = await self._ctx_for_write(n)
                taken = self._taken(n)
                changed = [self._apply_writes(n, ctx, b, n.recent) for b in taken]
                if any(changed):
                    await self.store.commit(ctx)
                    self._committed(n, ctx)
                self._stored(n, taken)
                return
            except VersionConflict:
                n.forget()
                if attempt == _ATTEMPTS - 1:
                    raise
            except BaseException:
                n.forget()
                raise

    async def _timed_flush(self, n: _Ns) -> None:
        try:
            async with self._held(n):
                pass
        except Exception:  # nobody to raise to: the next call on this thread retries
            logger.exception("storing pending writes of %s failed; retried on the next call", n.key)

    async def flush(self) -> None:
        """Store every buffered write now (``close`` and the context managers call it)."""
        with self._guard:
            waiting = [n for n in self._cache.values() if n.buffer]
        for n in waiting:
            async with self._held(n):
                pass

    @asynccontextmanager
    async def _held(self, n: _Ns) -> AsyncIterator[None]:
        """``n``'s lock, with its buffered writes stored first: what every read sees."""
        async with self._lock(n.key):
            if n.buffer:
                await self._flush_locked(n)
            yield

    # == reading ====================================================================
    async def get_tuple(self, thread_id: str, ns: str, cid: str | None) -> CheckpointTuple | None:
        n = self._ns(thread_id, ns)
        async with self._held(n):
            if not await self._fresh(n):
                return None
            ix = n.view.get("ix") or []
            if not ix:
                return None
            i = len(ix) - 1 if cid is None else n.pos.get(cid)
            return None if i is None else await self._tuple(n, i)

    async def _tuple(self, n: _Ns, i: int) -> CheckpointTuple:
        ctx = n.view
        ix = ctx.get("ix")
        entry = ix[i]
        cid = entry[0]
        late = list(((ctx.get("ow") or {}).get(cid) or {}).values())
        if i == len(ix) - 1:
            record = record_of(ctx, self._loads)
            versions = record["channel_versions"]
            meta = ctx.get("m") or {}
            values = self._hand_out(n, versions, meta)
            pending = resolve_writes(ctx.get("w") or [], ctx)
        else:
            state, pending = await self._state_of(n.key, ix, i)
            record = record_of(state, self._loads)
            known = None if n.owner == LENT else copied(self._prefixes(n, state))
            with gc_paused():
                values = decode_channels(state, record["channel_versions"], self._loads, known)
        record["channel_values"] = values
        writes = [e for e in pending if e[0] == cid] + late
        conf = {"thread_id": n.thread_id, "checkpoint_ns": n.ns}
        return CheckpointTuple(
            config={"configurable": {**conf, "checkpoint_id": cid}},
            checkpoint=cast(Checkpoint, record),
            metadata=self._loads((entry[3], entry[4])),
            parent_config={"configurable": {**conf, "checkpoint_id": entry[2]}} if entry[2] else None,
            pending_writes=[(e[1], e[3], self._loads((e[4], e[5]))) for e in sort_writes(writes)],
        )

    def _hand_out(self, n: _Ns, versions: Mapping[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
        """The latest checkpoint's channel values, the caller's own: the decoded values
        themselves the first time (nobody holds them yet), else a copy of them, or, once
        they were handed out as they are, decoded again from the stored bytes."""
        if n.owner == LENT:
            with gc_paused():
                values = decode_channels(n.view, versions, self._loads)
        else:
            values = {ch: v for ch, v in n.values.items() if ch in versions and meta[ch][0] == versions[ch]}
            if n.owner == FRESH:
                n.owner = LENT
            else:
                values = copied(values)
        n.given = {ch: list(v) for ch, v in values.items() if type(v) is list and ch in n.snaps}
        return values

    @staticmethod
    def _prefixes(n: _Ns, state: Any) -> dict[str, list[Any]]:
        """List channels of an older checkpoint that are a prefix of the latest value held
        in memory: their items are sliced from it, not decoded again (time travel on a
        long conversation then decodes only what changed since)."""
        meta = state.get("m") or {}
        out = {}
        for ch, items in n.snaps.items():
            ent = meta.get(ch)
            if ent is not None and ent[1] == LIST:
                prefix = list_prefix(state.get("c:" + ch) or [], n.view.get("c:" + ch) or [], items)
                if prefix is not None:
                    out[ch] = prefix
        return out

    async def _state_of(self, key: str, ix: list[Any], i: int) -> tuple[dict[str, Any], list[Any]]:
        """Checkpoint ``ix[i]`` (not the latest): its channels and record, and the pending
        writes stored with the put after it (writes that waited for that put are stored
        only there). One load when that put kept a note of what it changed (``p``)."""
        version = ix[i + 1][1]
        after = await self.store.load(key, version)
        if after is None:
            raise RunNotFound(key, version)
        pending = resolve_writes(after.state.get("w") or [], after.state)
        state = before_put(after.state, ix[i][0])
        if state is None:
            cp = await self.store.load(key, version - 1)
            if cp is None:
                raise RunNotFound(key, version - 1)
            state = cp.state
        return state, pending

    async def select(
        self,
        thread_id: str | None,
        ns: str | None,
        *,
        cid: str | None,
        before: str | None,
        filter: Mapping[str, Any] | None,
        limit: int | None,
    ) -> list[tuple[str, _Ns]]:
        """The checkpoints ``list`` returns, newest id first: ``(checkpoint_id, namespace)``."""
        if thread_id is None:
            threads = await self._all_threads()
        else:
            threads = [(thread_id, [ns] if ns is not None else await self.namespaces(thread_id))]
        found: list[tuple[str, _Ns]] = []
        for tid, namespaces in threads:
            for space in namespaces:
                n = self._ns(tid, space)
                async with self._held(n):
                    if not await self._fresh(n):
                        continue
                    ix = n.view.get("ix") or []
                    for c, i in n.pos.items():
                        if (cid is not None and c != cid) or (before is not None and c >= before):
                            continue
                        if filter:
                            entry = ix[i]
                            md = self._loads((entry[3], entry[4]))
                            if any(md.get(k) != v for k, v in filter.items()):
                                continue
                        found.append((c, n))
        found.sort(key=lambda f: f[0], reverse=True)
        return found if limit is None else found[:limit]

    async def tuple_of(self, cid: str, n: _Ns) -> CheckpointTuple | None:
        async with self._held(n):
            if n.view is None and not await self._load(n, writable=False):
                return None
            i = n.pos.get(cid)
            return None if i is None else await self._tuple(n, i)

    async def _all_threads(self) -> list[tuple[str, list[str]]]:
        out: list[tuple[str, list[str]]] = []
        offset = 0
        while True:
            runs = await self.store.list_runs(limit=500, offset=offset)
            for info in runs:
                if info.run_id.startswith((self.prefix + "t:", self.prefix + "t#")):
                    cp = await self.store.load(info.run_id)
                    if cp is not None and "t" in cp.state:
                        out.append((str(cp.state["t"]), [str(x) for x in cp.state.get("k") or []]))
            if len(runs) < 500:
                return out
            offset += 500

    # == whole threads ==============================================================
    async def delete_thread(self, thread_id: str) -> None:
        for ns in {"", *await self.namespaces(thread_id)}:
            n = self._ns(thread_id, ns)
            async with self._held(n):
                await self.store.delete(n.key)
                n.forget()
        await self.store.delete(thread_index_key(thread_id, self.prefix))
        self._indexed = {m for m in self._indexed if m[0] != thread_index_key(thread_id, self.prefix)}

    async def prune(self, thread_ids: Sequence[str], strategy: str) -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ConfigError(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
        for thread_id in thread_ids:
            if strategy == "delete":
                await self.delete_thread(thread_id)
                continue
            for ns in await self.namespaces(thread_id):
                n = self._ns(thread_id, ns)

                async def work(n: _Ns = n) -> None:
                    ctx = n.ctx
                    if ctx is None or not ctx.get("ix"):
                        return
                    last = ctx.get("ix")[-1]
                    if len(ctx.get("ix")) > 1 or ctx.get("ow"):
                        ctx.put("ix", [last])  # the index first: versions it lists stay loadable
                        ctx.put("ow", {})
                        await self.store.commit(ctx)
                    await self.store.prune(n.key, keep=ctx.version - last[1] + 1)
                    n.forget()

                await self._retrying(n, work)

    async def copy_thread(self, source: str, target: str) -> None:
        if await self.namespaces(target):
            raise ConfigError(f"copy_thread: thread {target!r} already has checkpoints; delete it first")
        for ns in await self.namespaces(source):
            await self._copy_ns(self._ns(source, ns), self._ns(target, ns), keep=None)

    async def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints of these LangGraph runs, keeping the others.

        A namespace that keeps some is rebuilt: its kept checkpoints are copied to a scratch
        run, which is then marked complete (PAUSED), the namespace deleted and the scratch
        copied back. Each step can be redone, and the run indexes go last, so a process
        killed at any point loses nothing: the next ``delete_for_runs`` of these runs
        finds a complete scratch run and finishes the swap from it, or an incomplete one
        and starts over (the namespace is intact until its scratch is complete). Until
        then, readers may see the namespace missing or partly copied back.
        """
        drop = {str(r) for r in run_ids}
        places = {
            tuple(item) for rid in drop for item in await self._index_items(run_index_key(rid, self.prefix))
        }
        for thread_id, ns in sorted(places):
            n = self._ns(str(thread_id), str(ns))
            scratch = self._ns(n.thread_id, n.ns, key=scratch_key(n.key, self.prefix))
            info = await self.store.get_run(scratch.key)
            if info is not None and info.status == RunStatus.PAUSED:
                await self._swap_back(n, scratch)  # a rebuild that stopped after its copy
                continue
            async with self._held(n):
                if not await self._fresh(n):
                    continue
                ix = n.view.get("ix") or []
                runs = {c: self._loads((ix[i][3], ix[i][4])).get("run_id") for c, i in n.pos.items()}
            keep = {c for c, r in runs.items() if r is None or str(r) not in drop}
            if len(keep) == len(runs):
                continue
            if not keep:
                async with self._held(n):
                    await self.store.delete(n.key)
                    n.forget()
                continue
            if info is not None:
                await self.store.delete(scratch.key)
            scratch.forget()
            await self._copy_ns(n, scratch, keep=keep)
            await self.store.set_status(scratch.key, RunStatus.PAUSED)  # complete: swap from it
            await self._swap_back(n, scratch)
        for rid in drop:
            await self.store.delete(run_index_key(rid, self.prefix))
        self._indexed.clear()

    async def _swap_back(self, n: _Ns, scratch: _Ns) -> None:
        """Replace namespace ``n`` by its complete scratch copy, then drop the scratch."""
        async with self._held(n):
            await self.store.delete(n.key)
            n.forget()
        await self._copy_ns(scratch, n, keep=None)
        await self.store.delete(scratch.key)
        scratch.forget()

    async def _copy_ns(self, src: _Ns, dst: _Ns, *, keep: set[str] | None) -> None:
        """Append ``src``'s checkpoints (those in ``keep``, or all) to ``dst`` in order,
        copying stored chunks as they are: appended chunks stay appends."""
        async with self._held(src):
            if not await self._fresh(src):
                return
            order = sorted(src.pos.values())
        for i in order:
            async with self._held(src):
                if src.view is None and not await self._load(src, writable=False):
                    return
                view = src.view
                ix = view.get("ix")
                entry = ix[i]
                if keep is not None and entry[0] not in keep:
                    continue
                if i == len(ix) - 1:
                    state = {k: view.get(k) for k in view}
                    state["w"] = resolve_writes(state.get("w") or [], view)
                else:
                    state, pending = await self._state_of(src.key, ix, i)
                    state = {**state, "w": pending}
                late = (view.get("ow") or {}).get(entry[0])
            await self._append_state(dst, entry, state, late or {})

    async def _append_state(
        self, n: _Ns, entry: list[Any], state: Mapping[str, Any], late: Mapping[str, Any]
    ) -> None:
        cid = entry[0]

        async def work() -> None:
            ctx = n.ctx
            if ctx is None:
                await self._index_add(thread_index_key(n.thread_id, self.prefix), n.ns, {"t": n.thread_id})
                ctx = self._new_ctx(n)
            for key, value in state.items():
                if key.startswith("c:"):
                    old = ctx.get(key)
                    if old is not None and value != old and chunks_extend(value, old):
                        ctx.merge({key: value[len(old) :]})
                    elif value != old:
                        ctx.put(key, value)
                elif key in ("m", "cp") and value != ctx.get(key):
                    ctx.put(key, value)
            writes = [e for e in state.get("w") or [] if e[0] == cid]
            ix = ctx.get("ix") or []
            # the previous checkpoint's writes stay (see ``_state_of``)
            previous = [e for e in resolve_writes(ctx.get("w") or [], ctx) if ix and e[0] == ix[-1][0]]
            ctx.put("w", previous + writes + list(late.values()))
            ctx.merge({"ix": [[cid, ctx.version + 1, *entry[2:]]]})
            run_id = self._loads((entry[3], entry[4])).get("run_id")
            if run_id is not None and str(run_id) != ctx.get("r"):
                await self._index_add(run_index_key(str(run_id), self.prefix), [n.thread_id, n.ns], {})
                ctx.put("r", str(run_id))
            await self.store.commit(ctx)
            n.forget()  # values are decoded again when this namespace is next read

        await self._retrying(n, work)
