"""Whole threads: delete, prune, copy, and deleting the checkpoints of some runs."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from tether.errors import ConfigError
from tether.integrations.langgraph._layout import (
    chunks_extend,
    resolve_writes,
    run_index_key,
    scratch_key,
    thread_index_key,
)
from tether.integrations.langgraph._pending import PendingWrites
from tether.integrations.langgraph._reads import Reads
from tether.integrations.langgraph._space import (
    Space,
)
from tether.integrations.langgraph._spaces import Spaces
from tether.state import RunStatus

logger = logging.getLogger(__name__)

__all__ = ["Maintenance"]


class Maintenance:
    """Operations on whole threads and namespaces."""

    def __init__(self, spaces: Spaces, pending: PendingWrites, reads: Reads) -> None:
        self.spaces, self.pending, self.reads = spaces, pending, reads

    async def delete_thread(self, thread_id: str) -> None:
        for ns in {"", *await self.spaces.namespaces(thread_id)}:
            n = self.spaces.space(thread_id, ns)
            async with self.pending.held(n):
                await self.spaces.store.delete(n.key)
                n.forget()
        await self.spaces.store.delete(thread_index_key(thread_id, self.spaces.prefix))
        self.spaces.indexed = {
            m for m in self.spaces.indexed if m[0] != thread_index_key(thread_id, self.spaces.prefix)
        }

    async def prune(self, thread_ids: Sequence[str], strategy: str) -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ConfigError(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
        for thread_id in thread_ids:
            if strategy == "delete":
                await self.delete_thread(thread_id)
                continue
            for ns in await self.spaces.namespaces(thread_id):
                n = self.spaces.space(thread_id, ns)

                async def work(n: Space = n) -> None:
                    ctx = n.ctx
                    if ctx is None or not ctx.get("ix"):
                        return
                    last = ctx.get("ix")[-1]
                    if len(ctx.get("ix")) > 1 or ctx.get("ow"):
                        ctx.put("ix", [last])  # the index first: versions it lists stay loadable
                        ctx.put("ow", {})
                        await self.spaces.store.commit(ctx)
                    await self.spaces.store.prune(n.key, keep=ctx.version - last[1] + 1)
                    n.forget()

                await self.pending.retrying(n, work)

    async def copy_thread(self, source: str, target: str) -> None:
        if await self.spaces.namespaces(target):
            raise ConfigError(f"copy_thread: thread {target!r} already has checkpoints; delete it first")
        for ns in await self.spaces.namespaces(source):
            await self.copy_ns(self.spaces.space(source, ns), self.spaces.space(target, ns), keep=None)

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
            tuple(item)
            for rid in drop
            for item in await self.spaces.index_items(run_index_key(rid, self.spaces.prefix))
        }
        for thread_id, ns in sorted(places):
            n = self.spaces.space(str(thread_id), str(ns))
            scratch = self.spaces.space(n.thread_id, n.ns, key=scratch_key(n.key, self.spaces.prefix))
            info = await self.spaces.store.get_run(scratch.key)
            if info is not None and info.status == RunStatus.PAUSED:
                await self.swap_back(n, scratch)  # a rebuild that stopped after its copy
                continue
            async with self.pending.held(n):
                if not await self.spaces.fresh(n):
                    continue
                ix = n.view.get("ix") or []
                runs = {c: self.spaces.loads((ix[i][3], ix[i][4])).get("run_id") for c, i in n.pos.items()}
            keep = {c for c, r in runs.items() if r is None or str(r) not in drop}
            if len(keep) == len(runs):
                continue
            if not keep:
                async with self.pending.held(n):
                    await self.spaces.store.delete(n.key)
                    n.forget()
                continue
            if info is not None:
                await self.spaces.store.delete(scratch.key)
            scratch.forget()
            await self.copy_ns(n, scratch, keep=keep)
            await self.spaces.store.set_status(scratch.key, RunStatus.PAUSED)  # complete: swap from it
            await self.swap_back(n, scratch)
        for rid in drop:
            await self.spaces.store.delete(run_index_key(rid, self.spaces.prefix))
        self.spaces.indexed.clear()

    async def swap_back(self, n: Space, scratch: Space) -> None:
        """Replace namespace ``n`` by its complete scratch copy, then drop the scratch."""
        async with self.pending.held(n):
            await self.spaces.store.delete(n.key)
            n.forget()
        await self.copy_ns(scratch, n, keep=None)
        await self.spaces.store.delete(scratch.key)
        scratch.forget()

    async def copy_ns(self, src: Space, dst: Space, *, keep: set[str] | None) -> None:
        """Append ``src``'s checkpoints (those in ``keep``, or all) to ``dst`` in order,
        copying stored chunks as they are: appended chunks stay appends."""
        async with self.pending.held(src):
            if not await self.spaces.fresh(src):
                return
            order = sorted(src.pos.values())
        for i in order:
            async with self.pending.held(src):
                if src.view is None and not await self.spaces.load(src, writable=False):
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
                    state, pending = await self.reads.state_of(src.key, ix, i)
                    state = {**state, "w": pending}
                late = (view.get("ow") or {}).get(entry[0])
            await self.append_state(dst, entry, state, late or {})

    async def append_state(
        self, n: Space, entry: list[Any], state: Mapping[str, Any], late: Mapping[str, Any]
    ) -> None:
        cid = entry[0]

        async def work() -> None:
            ctx = n.ctx
            if ctx is None:
                await self.spaces.index_add(
                    thread_index_key(n.thread_id, self.spaces.prefix), n.ns, {"t": n.thread_id}
                )
                ctx = self.spaces.new_ctx(n)
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
            run_id = self.spaces.loads((entry[3], entry[4])).get("run_id")
            if run_id is not None and str(run_id) != ctx.get("r"):
                await self.spaces.index_add(
                    run_index_key(str(run_id), self.spaces.prefix), [n.thread_id, n.ns], {}
                )
                ctx.put("r", str(run_id))
            await self.spaces.store.commit(ctx)
            n.forget()  # values are decoded again when this namespace is next read

        await self.pending.retrying(n, work)
