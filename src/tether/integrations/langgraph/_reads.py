"""Reading checkpoints: the latest from memory after one small read, older ones from their
own stored version and the next put's, every value handed out the caller's own."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, cast

from langgraph.checkpoint.base import Checkpoint, CheckpointTuple

from tether.errors import RunNotFound
from tether.integrations.langgraph._handout import copied, gc_paused
from tether.integrations.langgraph._layout import (
    LIST,
    before_put,
    decode_channels,
    list_prefix,
    record_of,
    resolve_writes,
    sort_writes,
)
from tether.integrations.langgraph._pending import PendingWrites
from tether.integrations.langgraph._space import (
    FRESH,
    LENT,
    PRIVATE,
    Space,
)
from tether.integrations.langgraph._spaces import Spaces

logger = logging.getLogger(__name__)

__all__ = ["Reads"]


class Reads:
    """``get_tuple`` and ``list``."""

    def __init__(self, spaces: Spaces, pending: PendingWrites) -> None:
        self.spaces, self.pending = spaces, pending

    async def get_tuple(self, thread_id: str, ns: str, cid: str | None) -> CheckpointTuple | None:
        n = self.spaces.space(thread_id, ns)
        async with self.pending.held(n):
            if not await self.spaces.fresh(n):
                return None
            ix = n.view.get("ix") or []
            if not ix:
                return None
            i = len(ix) - 1 if cid is None else n.pos.get(cid)
            return None if i is None else await self.checkpoint_tuple(n, i)

    async def checkpoint_tuple(self, n: Space, i: int) -> CheckpointTuple:
        ctx = n.view
        ix = ctx.get("ix")
        entry = ix[i]
        cid = entry[0]
        late = list(((ctx.get("ow") or {}).get(cid) or {}).values())
        if i == len(ix) - 1:
            record = record_of(ctx, self.spaces.loads)
            versions = record["channel_versions"]
            meta = ctx.get("m") or {}
            values = self.hand_out(n, versions, meta)
            pending = resolve_writes(ctx.get("w") or [], ctx)
        else:
            state, pending = await self.state_of(n.key, ix, i)
            record = record_of(state, self.spaces.loads)
            known = None if n.owner == LENT else self.copied_prefixes(n, state)
            with gc_paused():
                values = decode_channels(state, record["channel_versions"], self.spaces.loads, known)
        record["channel_values"] = values
        writes = [e for e in pending if e[0] == cid] + late
        conf = {"thread_id": n.thread_id, "checkpoint_ns": n.ns}
        return CheckpointTuple(
            config={"configurable": {**conf, "checkpoint_id": cid}},
            checkpoint=cast(Checkpoint, record),
            metadata=self.spaces.loads((entry[3], entry[4])),
            parent_config={"configurable": {**conf, "checkpoint_id": entry[2]}} if entry[2] else None,
            pending_writes=[(e[1], e[3], self.spaces.loads((e[4], e[5]))) for e in sort_writes(writes)],
        )

    def hand_out(self, n: Space, versions: Mapping[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
        """The latest checkpoint's channel values, the caller's own: the decoded values
        themselves the first time (nobody holds them yet: a cold read costs one decode),
        else a copy of what the saver keeps. Values once handed out as they are may have
        been edited since: the saver decodes its own again from the stored bytes first."""

        def decode_again(owner: int) -> None:
            with gc_paused():
                self.spaces.adopt(
                    n, n.view, n.version, decode_channels(n.view, None, self.spaces.loads), owner
                )

        def latest(held: Mapping[str, Any]) -> dict[str, Any]:
            return {ch: v for ch, v in held.items() if ch in versions and meta[ch][0] == versions[ch]}

        if n.owner == LENT:
            decode_again(PRIVATE)
        values = latest(n.values)
        if n.owner == FRESH:
            n.owner = LENT
        else:
            try:
                values = copied(values)
            except Exception:  # an object copy.deepcopy refuses: decoded afresh, and lent
                decode_again(LENT)
                values = latest(n.values)
        n.given = {ch: list(v) for ch, v in values.items() if type(v) is list and ch in n.snaps}
        return values

    def copied_prefixes(self, n: Space, state: Any) -> dict[str, list[Any]] | None:
        """Copies of :meth:`prefixes`; None (everything decoded) when they hold an object
        that cannot be copied."""
        try:
            out: dict[str, list[Any]] = copied(self.prefixes(n, state))
        except Exception:  # (copy.deepcopy refused it)
            return None
        return out

    @staticmethod
    def prefixes(n: Space, state: Any) -> dict[str, list[Any]]:
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

    async def state_of(self, key: str, ix: list[Any], i: int) -> tuple[dict[str, Any], list[Any]]:
        """Checkpoint ``ix[i]`` (not the latest): its channels and record, and the pending
        writes stored with the put after it (writes that waited for that put are stored
        only there). Two loads, or one when that put was stored by an earlier saver that
        kept a note of what it changed (``p``)."""
        version = ix[i + 1][1]
        after = await self.spaces.store.load(key, version)
        if after is None:
            raise RunNotFound(key, version)
        pending = resolve_writes(after.state.get("w") or [], after.state)
        state = before_put(after.state, ix[i][0])
        if state is None:
            cp = await self.spaces.store.load(key, version - 1)
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
    ) -> list[tuple[str, Space]]:
        """The checkpoints ``list`` returns, newest id first: ``(checkpoint_id, namespace)``."""
        if thread_id is None:
            threads = await self.all_threads()
        else:
            threads = [(thread_id, [ns] if ns is not None else await self.spaces.namespaces(thread_id))]
        found: list[tuple[str, Space]] = []
        for tid, namespaces in threads:
            for space in namespaces:
                n = self.spaces.space(tid, space)
                async with self.pending.held(n):
                    if not await self.spaces.fresh(n):
                        continue
                    ix = n.view.get("ix") or []
                    for c, i in n.pos.items():
                        if (cid is not None and c != cid) or (before is not None and c >= before):
                            continue
                        if filter:
                            entry = ix[i]
                            md = self.spaces.loads((entry[3], entry[4]))
                            if any(md.get(k) != v for k, v in filter.items()):
                                continue
                        found.append((c, n))
        found.sort(key=lambda f: f[0], reverse=True)
        return found if limit is None else found[:limit]

    async def tuple_of(self, cid: str, n: Space) -> CheckpointTuple | None:
        async with self.pending.held(n):
            if n.view is None and not await self.spaces.load(n, writable=False):
                return None
            i = n.pos.get(cid)
            return None if i is None else await self.checkpoint_tuple(n, i)

    async def all_threads(self) -> list[tuple[str, list[str]]]:
        out: list[tuple[str, list[str]]] = []
        offset = 0
        while True:
            runs = await self.spaces.store.list_runs(limit=500, offset=offset)
            for info in runs:
                if info.run_id.startswith((self.spaces.prefix + "t:", self.spaces.prefix + "t#")):
                    cp = await self.spaces.store.load(info.run_id)
                    if cp is not None and "t" in cp.state:
                        out.append((str(cp.state["t"]), [str(x) for x in cp.state.get("k") or []]))
            if len(runs) < 500:
                return out
            offset += 500
