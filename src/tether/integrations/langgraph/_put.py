"""``put``: one checkpoint as one atomic commit of what changed (see ``_layout``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from tether.errors import RunNotFound, VersionConflict
from tether.integrations.langgraph._handout import exact, kept_copy
from tether.integrations.langgraph._layout import (
    EMPTY,
    LIST,
    REF,
    VALUE,
    decode_channels,
    extends,
    resolve_writes,
    run_index_key,
)
from tether.integrations.langgraph._pending import PendingWrites
from tether.integrations.langgraph._reads import Reads
from tether.integrations.langgraph._space import (
    DROP_WRITE_BYTES,
    DROP_WRITES,
    LENT,
    PLAIN,
    PRIVATE,
    RECENT,
    Batch,
    Space,
)
from tether.integrations.langgraph._spaces import Spaces
from tether.state import ExecutionContext

logger = logging.getLogger(__name__)

__all__ = ["Puts"]


class Puts:
    """Stores checkpoints: appends for lists that grew, the channels LangGraph bumped, the
    record and index entry, and the writes waiting for it."""

    def __init__(self, spaces: Spaces, pending: PendingWrites, reads: Reads) -> None:
        self.spaces, self.pending, self.reads = spaces, pending, reads

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
        n = self.spaces.space(thread_id, ns)

        async def work() -> None:
            self.pending.stored(
                n, await self.put_once(n, checkpoint, metadata, parent_id, new_versions, equal)
            )

        await self.pending.retrying(n, work, absorb=True)

    async def put_once(
        self,
        n: Space,
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
        ctx = await self.spaces.ctx_for_write(n)
        taken = self.pending.taken(n, stored_only=True)
        ix: list[Any] = ctx.get("ix") or []
        values, snaps = dict(n.values), dict(n.snaps)
        # What the saver keeps is its own: copies of what the graph hands over (the graph's
        # caller holds the originals), except while its values are lent to a caller anyway
        # (handed out as decoded: the next read decodes them again, see ``Reads.hand_out``).
        lent = n.owner == LENT
        lineage: dict[str, list[Any]] = {}
        if parent_id is not None and ix and parent_id != ix[-1][0] and parent_id in n.pos:
            values, snaps = await self.fork(n, ctx, ix, parent_id)
            n.recent = {}
        meta: dict[str, Any] = ctx.get("m") or {}
        versions: Mapping[str, Any] = checkpoint["channel_versions"]
        given: Mapping[str, Any] = checkpoint["channel_values"]
        update: dict[str, Any] = {}
        grow: dict[str, Any] = {}  # appends (chunks, writes) and the put's own keys: one merge
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
            if ch not in versions or ch not in given:
                if ent is not None and ent[1] != EMPTY:
                    refs = self.replaced(ctx, ch, refs, ref_channels, referred)
                    ctx.put_trusted(key, [])
                update[ch] = None if ch not in versions else [ver, EMPTY]
                values.pop(ch, None)
                snaps.pop(ch, None)
                continue
            value = given[ch]
            if type(value) is list:
                old = snaps.get(ch) if ent is not None and ent[1] == LIST else None
                seen = n.given.get(ch)  # the graph's items, as last handed out or put
                if old is None:
                    grew = False
                elif equal:  # values decoded afresh (an import): equal items are kept ones
                    grew = extends(value, old, equal=True)
                else:  # the graph extends what it was handed, or what it put last
                    grew = seen is not None and len(seen) == len(old) and extends(value, seen)
                if grew and old is not None:
                    added = value[len(old) :]
                    if added:
                        t, b = self.spaces.dumps(added)
                        refs[ch, b] = (t, len(chunks))
                        ref_channels.add(ch)
                        grow[key] = [[t, b]]
                        # the saver's items and the graph's grow in place, not copied whole
                        # at every put (a failed commit forgets the namespace's)
                        old += added if lent else self.own(added, (t, b))
                    mine = old
                    if seen is not None and not equal:
                        seen += added
                    else:
                        seen = list(value)
                else:
                    whole = self.spaces.dumps(value)
                    if chunks:
                        refs = self.replaced(ctx, ch, refs, ref_channels, referred)
                        ctx.put_trusted(key, [whole])
                    else:  # a first value is an append to nothing: growth, not a rewrite
                        grow[key] = [whole]
                    mine = list(value) if lent else self.own(value, whole)
                    seen = list(value)
                snaps[ch] = mine
                lineage[ch] = seen
                values[ch] = mine
                kind = LIST
            else:
                refs = self.replaced(ctx, ch, refs, ref_channels, referred)
                whole = self.spaces.dumps(value)
                ctx.put_trusted(key, [whole])
                snaps.pop(ch, None)
                values[ch] = value if lent else self.own(value, whole)
                kind = VALUE
            update[ch] = [ver, kind]
        for batch in taken:  # writes waiting for this checkpoint: one commit for both
            # (several batches are merged one by one: each must see those before it)
            self.pending.apply_writes(n, ctx, batch, refs, grow if len(taken) == 1 else None)
        record = {k: v for k, v in checkpoint.items() if k not in ("channel_values", "channel_versions")}
        grow["cp"] = self.spaces.dumps(record)
        if update:
            grow["m"] = update
        if ctx.get("p") is not None:  # a note an earlier saver kept (see ``p`` in ``_layout``)
            grow["p"] = None
        grow["ix"] = [[cid, ctx.version + 1, parent_id, *self.spaces.dumps(dict(metadata))]]
        ctx.merge_trusted(grow, PLAIN)
        pending: list[Any] = ctx.get("w") or []
        # The previous checkpoint's writes stay in this version too: those that waited for
        # this put are stored only here (see ``_state_of``).
        live = (cid, ix[-1][0] if ix else None)
        pos = n.pos
        kept = [e for e in pending if e[0] in live or e[0] not in pos]
        dead = len(pending) - len(kept)
        # Reads pick writes by checkpoint id, so older ones may stay a while: dropping them
        # rewrites the live ones, so it waits until they are worth it (their bytes summed
        # inline: a call per write was most of this put's own work on a chat's writes).
        if dead >= DROP_WRITES or (
            dead and sum([len(e[5]) for e in pending if e[4] != REF]) > DROP_WRITE_BYTES
        ):
            ctx.put_trusted("w", kept)
        run_id = metadata.get("run_id")
        if run_id is not None and str(run_id) != ctx.get("r"):
            await self.spaces.index_add(
                run_index_key(str(run_id), self.spaces.prefix), [n.thread_id, n.ns], {}
            )
            ctx.put("r", str(run_id))
        await self.spaces.store.commit(ctx, patches=False)
        position = len(ix)
        self.spaces.committed(n, ctx)
        n.values, n.snaps, n.owner = values, snaps, LENT if lent else PRIVATE
        n.given = {ch: items for ch, items in n.given.items() if ch not in update} | lineage
        n.pos[cid] = position
        n.recent = refs if len(refs) <= RECENT else dict(list(refs.items())[-RECENT:])
        return taken

    def own(self, value: Any, encoded: Sequence[Any]) -> Any:
        """The saver's copy of ``value`` (what a graph handed to a put); decoded from its
        stored bytes, ``encoded``, unless the copy is what decoding them gives (see
        ``_handout``): a read in another process must see the same value."""
        if exact(value):
            return kept_copy(value)
        return self.spaces.loads((encoded[0], encoded[1]))

    async def fork(
        self, n: Space, ctx: ExecutionContext, ix: list[Any], parent_id: str
    ) -> tuple[dict[str, Any], dict[str, list[Any]]]:
        """Put the parent checkpoint's channels back in ``ctx`` (the next save is a full one):
        a put whose parent is an older checkpoint starts a branch from it."""
        try:
            parent, _ = await self.reads.state_of(n.key, ix, n.pos[parent_id])
        except RunNotFound:  # pruned by another process meanwhile: reload and redo
            raise VersionConflict(n.key, expected=ctx.version, actual=None) from None
        self.unref(ctx)  # the chunks they refer to are replaced
        base = {k: v for k, v in parent.items() if k.startswith("c:") or k == "m"}
        for key in ("t", "r", "ix", "ow", "w", "cp"):
            if key in ctx:
                base[key] = ctx.get(key)
        ctx.restore(base)
        values = decode_channels(base, None, self.spaces.loads)
        meta = base.get("m") or {}
        return values, {ch: list(v) for ch, v in values.items() if type(v) is list and meta[ch][1] == LIST}

    def unref(self, ctx: ExecutionContext, channel: str | None = None) -> None:
        """Make the writes that refer to ``channel``'s chunks (or any) whole, before those
        chunks are replaced."""
        pending = ctx.get("w") or []
        if any(e[4] == REF and (channel is None or e[3] == channel) for e in pending):
            ctx.put("w", resolve_writes(pending, ctx, channel))

    def replaced(
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
            self.unref(ctx, channel)
            referred.discard(channel)
        if channel not in ref_channels:
            return refs
        ref_channels.discard(channel)
        return {k: r for k, r in refs.items() if k[0] != channel}
