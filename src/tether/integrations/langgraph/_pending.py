"""Pending writes: buffered until the next put's commit or the sweep, stored under the
namespace's lock, which every read takes with them stored first (``held``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from langgraph.checkpoint.base import WRITES_IDX_MAP

from tether.errors import VersionConflict
from tether.integrations.langgraph._space import (
    ATTEMPTS,
    PLAIN,
    Batch,
    Space,
    as_ref,
    running_loop,
    write_key,
)
from tether.integrations.langgraph._spaces import Spaces
from tether.state import ExecutionContext
from tether.stores.blocking import run_inline

logger = logging.getLogger(__name__)

__all__ = ["PendingWrites"]


class PendingWrites:
    """Task writes of every namespace, and the lock discipline of every operation.

    Writes that wait for their checkpoint are flushed by a sweep on the store's loop (on a
    worker thread when the operations run inline)."""

    def __init__(self, spaces: Spaces, flush_delay: float | None) -> None:
        self.spaces = spaces
        self.flush_delay = flush_delay
        """Task writes wait up to this long (seconds) to be stored in the same commit as
        the checkpoint that follows them; None stores each batch at once."""
        self.tasks: set[asyncio.Task[None]] = set()
        self.sweep_loop: asyncio.AbstractEventLoop | None = None
        self.sweeping = False
        """A sweep of the buffered writes is scheduled on ``sweep_loop``: it runs every
        ``flush_delay`` while any are buffered (one wake-up per delay, not one per batch)."""

    def taken(self, n: Space, stored_only: bool = False) -> list[Batch]:
        """The buffered batches to store now; ``stored_only``: only those of checkpoints
        already stored (the others wait for a later put, or the sweep)."""
        with self.spaces.guard:
            return [b for b in n.buffer if not stored_only or b[0] in n.pos]

    def stored(self, n: Space, taken: list[Batch]) -> None:
        """``taken`` is stored; the batches still buffered wait for the sweep."""
        with self.spaces.guard:
            if taken:
                done = {id(b) for b in taken}
                n.buffer[:] = [b for b in n.buffer if id(b) not in done]
            if not n.buffer:
                n.since = None
                return
            n.since = time.monotonic()  # what is left waits for a later put, as long again
            arm = not self.sweeping and self.sweep_loop is not None
            self.sweeping = self.sweeping or arm
        if arm:
            self.arm_sweep()

    def arm_sweep(self) -> None:
        loop = self.sweep_loop
        assert loop is not None
        if running_loop() is loop:
            loop.call_later(self.flush_delay or 0, self.sweep)
        else:
            loop.call_soon_threadsafe(loop.call_later, self.flush_delay or 0, self.sweep)

    def sweep(self) -> None:
        """On the sweep's loop: flush the namespaces whose writes waited ``flush_delay``;
        come back while any still wait."""
        loop = self.sweep_loop
        assert loop is not None
        delay = self.flush_delay or 0
        now = time.monotonic()
        due: list[Space] = []
        with self.spaces.guard:
            waiting = [n for n in self.spaces.cache.values() if n.buffer and n.since is not None]
            for n in waiting:
                if now - n.since >= delay:  # type: ignore[operator]
                    n.since = None
                    due.append(n)
            later = [n.since for n in waiting if n.since is not None]
            if not later:
                self.sweeping = False
        for n in due:
            if self.spaces.inline:
                loop.run_in_executor(None, self.flush_inline, n)
            else:
                task = loop.create_task(self.timed_flush(n))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
        if later:
            loop.call_later(max(0.0, min(later) + delay - now), self.sweep)

    def flush_inline(self, n: Space) -> None:
        run_inline(self.timed_flush(n))

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
            t, b = self.spaces.serde.dumps_typed(value)
            entries[f"{cid}|{task_id}|{widx}"] = [cid, task_id, widx, ch, t, b, path]
        return (cid, entries, special), deferred

    def defer(self, thread_id: str, ns: str, batch: Batch, loop: asyncio.AbstractEventLoop) -> None:
        """Buffer writes for the next put's commit (or the sweep), from any thread, without
        waiting for ``loop``: a sync graph then pays no hop to the store's thread for them."""
        n = self.spaces.space(thread_id, ns)
        with self.spaces.guard:
            if not n.buffer or n.since is None:
                n.since = time.monotonic()
            n.buffer.append(batch)
            self.sweep_loop = loop
            arm = not self.sweeping
            self.sweeping = True
        if arm:
            self.arm_sweep()

    async def store_writes(self, thread_id: str, ns: str, batch: Batch) -> None:
        """Store writes now, with any still buffered for the namespace."""
        n = self.spaces.space(thread_id, ns)
        async with self.spaces.lock(n.key):
            with self.spaces.guard:
                n.buffer.append(batch)
            await self.flush_locked(n)

    async def put_writes(
        self, thread_id: str, ns: str, cid: str, writes: Sequence[tuple[str, Any]], task_id: str, path: str
    ) -> None:
        batch, deferred = self.writes_batch(cid, writes, task_id, path)
        loop = running_loop() or self.spaces.home_loop
        if deferred and loop is not None:
            self.defer(thread_id, ns, batch, loop)
        else:
            await self.store_writes(thread_id, ns, batch)

    def apply_writes(
        self,
        n: Space,
        ctx: ExecutionContext,
        batch: Batch,
        refs: Mapping[tuple[str, bytes], tuple[str, int]] | None = None,
        grow: dict[str, Any] | None = None,
    ) -> bool:
        """Add one batch of writes to ``ctx``; False when all of it is stored already.
        ``refs``: chunks this commit appends, by channel and bytes: a write with the same
        bytes is stored as a reference to its chunk. ``grow``: where new writes go to be
        appended with the caller's own appends, in one merge (the only batch of a put)."""
        cid, entries, special = batch
        ix = ctx.get("ix") or []
        late = cid in n.pos and cid != ix[-1][0]
        listed: list[Any] = [] if late else (ctx.get("w") or [])
        have: dict[str, Any] = (
            ((ctx.get("ow") or {}).get(cid) or {})
            if late
            else {write_key(e): e for e in listed if e[0] == cid}
        )
        add = {k: e for k, e in entries.items() if (special or k not in have) and have.get(k) != e}
        if not add:
            return False
        if late:
            ctx.merge({"ow": {cid: {**have, **add}}})
        elif any(k in have for k in add):  # an upsert of special writes: rewrite the list
            ctx.put("w", [e for e in listed if write_key(e) not in add] + list(add.values()))
        else:  # new writes are appended: growth, so they never force a full save
            new = list(add.values())
            if refs:
                new = [as_ref(e, refs) for e in new]
            if grow is None:
                ctx.merge_trusted({"w": new}, PLAIN)
            else:
                grow["w"] = new
        return True

    async def flush_locked(self, n: Space) -> None:
        """Store the writes buffered for ``n`` (its lock held)."""
        for attempt in range(ATTEMPTS):
            if not n.buffer:
                return
            if n.ctx is None:
                await self.spaces.load(n)
            try:
                ctx = await self.spaces.ctx_for_write(n)
                taken = self.taken(n)
                changed = [self.apply_writes(n, ctx, b, n.recent) for b in taken]
                if any(changed):
                    await self.spaces.store.commit(ctx, patches=False)
                    self.spaces.committed(n, ctx)
                self.stored(n, taken)
                return
            except VersionConflict:
                n.forget()
                if attempt == ATTEMPTS - 1:
                    raise
            except BaseException:
                n.forget()
                raise

    async def timed_flush(self, n: Space) -> None:
        try:
            async with self.held(n):
                pass
        except Exception:  # nobody to raise to: the next call on this thread retries
            logger.exception("storing pending writes of %s failed; retried on the next call", n.key)

    async def flush(self) -> None:
        """Store every buffered write now (``close`` and the context managers call it)."""
        with self.spaces.guard:
            waiting = [n for n in self.spaces.cache.values() if n.buffer]
        for n in waiting:
            async with self.held(n):
                pass

    @asynccontextmanager
    async def held(self, n: Space) -> AsyncIterator[None]:
        """``n``'s lock, with its buffered writes stored first: what every read sees."""
        async with self.spaces.lock(n.key):
            if n.buffer:
                await self.flush_locked(n)
            yield

    async def retrying(self, n: Space, work: Callable[[], Any], *, absorb: bool = False) -> Any:
        """Run ``work`` under ``n``'s lock on its latest state; redo it after a conflict.
        ``absorb``: ``work`` stores the buffered writes itself (a put, in its commit)."""
        async with self.spaces.lock(n.key) if absorb else self.held(n):
            for attempt in range(ATTEMPTS):
                if n.ctx is None:
                    await self.spaces.load(n)
                try:
                    return await work()
                except VersionConflict:
                    n.forget()
                    if attempt == ATTEMPTS - 1:
                        raise
                except BaseException:
                    n.forget()  # the context may hold ops that were never stored
                    raise
