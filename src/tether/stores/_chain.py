"""The chain engine: how a run's versions become rows and rows become a state again.

Pure and synchronous: it works on plain bytes and records (:class:`Write`, ``(version,
payload)`` rows, :class:`Known`) and does no I/O, so a store is the part that talks to a
database and this module is the part that decides. It plans a commit (a *delta* of the
reducers' ops, a *full* state when compaction is due, or a *segment* packing the last
deltas), replays a chain of rows into a state, cuts a chain for a prune, and judges a
write against the run record it would follow (:func:`check_write`).

Storage model: each run is an append-only log of versions 1, 2, 3…; a version is either
a full state or a delta of replayable ops against the version before. Loading version v
reads the last full row at or before v plus the rows after it. In a store that seals
(``Capabilities.seals``), runs of deltas are packed into segment rows (see ``_segment``):
the tail's first row holds them all, the others keep their history entry with an empty
payload (*sealed*), so a load reads one row per segment.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from tether.errors import CheckpointCorrupt
from tether.state.context import Changes
from tether.state.model import (
    NO_CHAIN,
    ChainStats,
    Checkpoint,
    RunInfo,
    RunStatus,
    chain_stats,
)
from tether.state.serde import SCHEMA_VERSION, Codec, state_offset
from tether.state.values import check_value
from tether.stores._checks import RunHead, check_write, next_fence
from tether.stores._kept import KeptRows
from tether.stores._patch import Values, patch_ops, whole_ops
from tether.stores._replay import Carrier, apply_delta, checkpoint_from, lone_full, replay_rows
from tether.stores._segment import pack_segment, segment_length, split_segment
from tether.stores.policies import CompactionPolicy

__all__ = [
    "NO_CHAIN",
    "Carrier",
    "ChainEngine",
    "CompactionPolicy",
    "Known",
    "Plan",
    "RunHead",
    "StaleSeal",
    "Write",
    "apply_delta",
    "last_bytes",
    "check_write",
    "full_head",
    "full_payload",
    "known_kept",
    "lone_full",
    "next_fence",
]


@dataclass(slots=True, kw_only=True)
class Write:
    """One atomic save: a new version of a run, and the run record after it.

    Not frozen, though nothing changes one once it is handed to a backend: a save builds
    one, and a frozen dataclass's ``__init__`` costs several times more."""

    run_id: str
    kind: str
    """``full``, ``delta`` or ``segment`` (see ``seal_from``)."""
    payload: bytes
    node_id: str | None
    status: RunStatus
    created_at: float
    expires_at: float | None
    expected_version: int | None
    """None: append after whatever is there; 0: the run must not exist; n: latest must be n."""
    require_status: RunStatus | None = None
    growth_bytes: int = 0
    rewrite_bytes: int = 0
    state_at: int = 0
    """Where the state's own bytes start in a plain full payload, for a backend that keeps
    them apart (``Capabilities.splits_state``); 0 otherwise."""
    head: dict[str, Any] | None = None
    """With ``state_at``: the payload's head as it was encoded (ids, metadata…), so that
    such a backend need not decode it again."""
    dated: bool = True
    """False: the payload holds no datetime, so none of its values is a MessagePack
    extension and a decode needs no ``ext_hook`` (see ``serde.pack_plain``)."""
    write_id: str = ""
    """Unique per commit, stored with the run: a retry of a write that landed but whose
    reply was lost finds its own id as the latest and returns that version instead of a
    VersionConflict (or a second copy). "" for none."""
    seal_from: int = 0
    """For a ``segment`` write, the first version it packs: the payload replaces that
    row's, the rows after it up to the new version (included) are stored sealed (kind
    ``sealed``, empty payload). The backend checks that row holds a delta or a segment and
    none up to the new one is full, and raises :class:`StaleSeal` (changing nothing)
    otherwise."""
    fence: int = 0
    """A lease holder's write: the token it holds, accepted only while it is the run's
    current one (:class:`LeaseLost` otherwise, checked with the version). 0: a write of no
    holder (a plain store user, a CLI edit), which fencing leaves alone. With ``take``, the
    backend sets it to the token it stored."""
    take: bool = False
    """This write takes a new lease on the run: the backend stores a token greater than any
    the run had (:func:`next_fence`) in the same atomic write and sets ``fence`` to it."""
    lease_until: float | None = None
    """With a holder's write, the lease deadline to store in the run record: None leaves it,
    0 clears it (the holder released the run)."""

    def chain_after(self, prev: ChainStats, version: int) -> ChainStats:
        """The run's chain statistics once this write is version ``version``."""
        if self.kind == "full":
            return chain_stats(version, len(self.payload), 0, 0, 0)
        return chain_stats(
            prev.base_version,
            prev.base_bytes,
            prev.growth_bytes + self.growth_bytes,
            prev.rewrite_bytes + self.rewrite_bytes,
            prev.length + 1,
        )


class StaleSeal(Exception):
    """A segment write found other rows than those it packs (another process pruned the
    run meanwhile): the save is retried as a plain delta. Internal."""


class Known(NamedTuple):
    """What a store knows of a run's chain as of one version, for its next commit."""

    version: int
    chain: ChainStats
    tail: list[Carrier] | None
    """The last rows stored after the last full one, oldest first, ending at ``version``
    (None: not known, no segment until the next full row)."""
    tail_bytes: int = 0
    """The payload bytes of ``tail``, kept as it grows so a commit need not add them up."""
    values: Values | None = None
    """The packed values of the keys last overwritten, as of ``version`` (see ``_patch``):
    what the next commit's overwrites are patched against."""


class Plan(NamedTuple):
    """What a commit writes: the write, the level of its segment (0: none), and the delta
    alone when it is a segment (to write instead if the backend says :class:`StaleSeal`)."""

    write: Write
    level: int
    plain: bytes
    walked: bool | None = None
    """For changes that did not say whether their state holds a datetime, what a walk of
    it found (None: not walked)."""
    values: Values | None = None
    """The values known once the write is stored (see ``_patch``; None after a full row)."""


_new_tuple = tuple.__new__
"""Builds a named tuple from all its fields, in order, without its Python ``__new__``."""


VOUCH_BYTES = 32 * 1024 * 1024
"""How many bytes of rows (and of the replays kept with them) a store's engine keeps to vouch
for (see ``_kept``)."""


class ChainEngine:
    """Plans, seals and replays the chains of one store (its codec and policy).

    Every row a replay reads is checked (its CRC-32, or its AES-GCM tag when keyed); the rows
    of the chains it last replayed are kept, up to ``vouch_bytes`` in all, so that the same
    bytes read again are checked by a comparison with them, and a chain read again whole
    decodes the state they replay to instead of every row (see ``_kept``).
    """

    __slots__ = ("codec", "kept", "policy", "seals", "splits_state")

    def __init__(
        self,
        codec: Codec,
        policy: CompactionPolicy,
        *,
        seals: bool,
        splits_state: bool,
        vouch_bytes: int = VOUCH_BYTES,
    ) -> None:
        self.codec = codec
        self.policy = policy
        self.seals = seals
        self.splits_state = splits_state
        self.kept = KeptRows(0 if codec.encrypted else vouch_bytes)

    @property
    def vouch_bytes(self) -> int:
        """The bytes of rows (and replays) kept to vouch for; 0 when keyed."""
        return self.kept.limit

    # -- writing ---------------------------------------------------------------------
    def plan(
        self,
        changes: Changes,
        known: Known,
        *,
        node: str | None,
        status: RunStatus,
        now: float,
        meta: dict[str, Any],
        meta_dated: bool,
        expires_at: float | None,
        require_status: RunStatus | None,
        write_id: str,
        patches: bool = True,
    ) -> Plan:
        """The write a commit of ``changes`` makes after the chain ``known``: a delta of
        the reducers' ops, a full state when the run is new, restored or due for
        compaction, and a segment when the deltas at the end of the chain are enough.
        ``patches``: overwrites are diffed against the values last written (see ``_patch``);
        False stores them whole."""
        # one unpacking, not a named field read at a time (each is a generic attribute lookup)
        run_id, version, ops_taken, executed, full_only, state, all_executed, datetimes = changes[:8]
        if not full_only and version > 0:
            if patches:
                ops, values, rewrite = patch_ops(ops_taken, known.values)
            else:
                (ops, rewrite), values = whole_ops(ops_taken), None
            body = {
                "v": SCHEMA_VERSION,
                "node": node,
                "status": str(status),
                "ts": now,
                "meta": meta,
                "kind": "delta",
                "ops": ops,
                "executed": list(executed),
            }
            payload = self.codec.encode(body)
            rewrite = min(rewrite, len(payload))
            growth = len(payload) - rewrite
            if not self.policy.due(known.chain, growth=growth, rewrite=rewrite, sealed=self.seals):
                w = Write(
                    run_id=run_id,
                    kind="delta",
                    payload=payload,
                    node_id=node,
                    status=status,
                    created_at=now,
                    expires_at=expires_at,
                    expected_version=version,
                    require_status=require_status,
                    growth_bytes=growth,
                    rewrite_bytes=rewrite,
                    write_id=write_id,
                )
                if known.tail is not None and self.seals:
                    seal_from, level, packed = self.seal(run_id, version, known.tail, payload, body)
                    if level:
                        w.kind, w.payload, w.seal_from = "segment", packed, seal_from
                        return _new_tuple(Plan, (w, level, payload, None, values))
                return _new_tuple(Plan, (w, 0, b"", None, values))
        walked = None
        if meta_dated or datetimes:
            dated = True
        elif datetimes is None:
            dated = walked = any(check_value(value, key=key) for key, value in state.items())
        else:
            dated = False
        full = {
            "v": SCHEMA_VERSION,
            "node": node,
            "status": str(status),
            "ts": now,
            "meta": meta,
            "kind": "full",
            "executed": list(all_executed),
        }
        payload = self.codec.encode({**full, "state": state}, datetimes=dated)
        state_at = state_offset(payload, full, datetimes=dated) if self.splits_state else 0
        w = Write(
            run_id=run_id,
            kind="full",
            payload=payload,
            node_id=node,
            status=status,
            created_at=now,
            expires_at=expires_at,
            expected_version=version,
            require_status=require_status,
            state_at=state_at,
            head=full if state_at else None,
            dated=dated,
            write_id=write_id,
        )
        return _new_tuple(Plan, (w, 0, b"", walked, None))

    def seal(
        self,
        run_id: str,
        version: int,
        tail: list[Carrier],
        payload: bytes,
        body: dict[str, Any] | None = None,
    ) -> tuple[int, int, bytes]:
        """``(seal_from, level, segment)`` for a delta about to become ``version + 1``:
        a segment when the deltas at the end of the chain are enough (``seal_versions`` or
        ``seal_tail_bytes``), merged with the ``seal_fanout - 1`` segments of its level
        before it while that stays under ``seal_bytes``; else ``(0, 0, payload)``.

        A small chain (``seal_whole_bytes``) is kept to three rows a load reads: the full
        one, one segment of every version up to the last few, and those few, sealed into
        one *open* segment from the second on (a segment of level 1 holding fewer than
        ``seal_versions``), which each commit rewrites until they are enough to seal into
        the big one. A load pays per row it reads (its lookup, decode and apply), which at
        these sizes costs as much as the bytes do; rewriting so few costs less.

        ``body``: what ``payload`` was encoded from, packed as it is instead of decoded again
        (the segment is encoded here, before its caller can change any of it)."""
        policy = self.policy
        if min(policy.seal_whole_bytes, policy.seal_bytes) < len(payload):
            # not a small chain (its rows add up to more than that): most commits seal
            # nothing, and that is told from the deltas at the tail's end alone
            start = len(tail)
            while start and tail[start - 1][2] == 0:
                start -= 1
            deltas = len(tail) - start + 1
            if (
                not policy.seal_versions
                or deltas < 2
                or (
                    deltas < policy.seal_versions
                    and len(payload) + sum(len(r[0]) for r in tail[start:]) < policy.seal_tail_bytes
                )
            ):
                return 0, 0, payload
        rows = [*tail, (payload, 1, 0)]
        start = len(rows)
        while start and rows[start - 1][2] == 0:
            start -= 1
        total = sum(len(r[0]) for r in rows[start:])
        deltas = len(rows) - start
        whole = total + sum(len(r[0]) for r in rows[:start])
        small = whole <= min(policy.seal_whole_bytes, policy.seal_bytes)
        if small and start and rows[start - 1][2] == 1:
            held, size = rows[start - 1][1], len(rows[start - 1][0])
            if held < policy.seal_versions and size + total < policy.seal_tail_bytes:
                # the open segment of a small chain: the deltas after the big one, kept in
                # one row until they are enough to seal into it
                start, total, deltas = start - 1, total + size, deltas + held
        if (
            not policy.seal_versions
            or deltas < 2
            or (deltas < policy.seal_versions and total < policy.seal_tail_bytes and not small)
        ):
            return 0, 0, payload
        level, more = 1, policy.seal_fanout - 1
        if small and deltas < policy.seal_versions and total < policy.seal_tail_bytes:
            more = len(rows)  # the open segment of a small chain: level 1, merged with none
        elif small and start:
            # a small chain (``seal_whole_bytes``): every row after the full one in one
            # segment (a load pays per row: its lookup, decode and apply), levelled as the
            # merges would have levelled its versions, so that later ones merge into it alike
            start, total = 0, whole
            held, per = sum(r[1] for r in rows), policy.seal_versions
            while per * policy.seal_fanout <= held:
                per, level = per * policy.seal_fanout, level + 1
            level = max(level, *(r[2] for r in rows))
        while start >= more and all(r[2] == level for r in rows[start - more : start]):
            merged = total + sum(len(r[0]) for r in rows[start - more : start])
            if merged > policy.seal_bytes:
                break
            start, total, level = start - more, merged, level + 1
        first = version + 2 - sum(r[1] for r in rows[start:])
        # the collector is paused meanwhile, as for a replay: the rows decoded, split and
        # packed again are many containers dropped at once (a merge of four segments
        # decodes every version they hold), none of them in a cycle
        pause = gc.isenabled()
        if pause:
            gc.disable()
        try:
            bodies: list[dict[str, Any]] = []
            at = first
            last = len(rows) - 1
            for i, (data, count, lv) in enumerate(rows[start:], start):
                if i == last and body is not None:
                    bodies.append(body)
                    continue
                # vouched: a carrier is bytes this store encoded or checked as it read them,
                # never read again since, so their checksum is not computed again (the CRC
                # was a sixth of a seal's work)
                decoded = self.codec.decode(data, run_id=run_id, version=at, vouched=True)
                if lv and segment_length(decoded, run_id=run_id, version=at) != count:
                    raise CheckpointCorrupt("segment row is damaged", run_id=run_id, version=at)
                bodies.append(decoded)  # a segment is packed by its ops, not split first
                at += count
            return first, level, self.codec.encode(pack_segment(first, bodies, level))
        finally:
            if pause:
                gc.enable()

    def after(
        self,
        plan: Plan,
        version: int,
        chain: ChainStats,
        tail: list[Carrier] | None,
        tail_bytes: int | None = None,
    ) -> Known:
        """What a store knows of the run once ``plan``'s write is stored as ``version``:
        the last rows, up to ``seal_bytes`` of them (all a next segment may merge).
        ``tail_bytes``: the payload bytes of ``tail`` when known (else added up here).
        ``tail`` is taken over: the caller keeps no other use of it."""
        write = plan.write
        values = plan.values
        if not self.seals:  # a store that never seals needs no rows
            return _new_tuple(Known, (version, chain, None, 0, values))
        if write.kind == "full":
            return Known(version, chain, [])
        if tail is None:
            return Known(version, chain, None, 0, values)
        rows = tail
        total = sum(len(r[0]) for r in rows) if tail_bytes is None else tail_bytes
        if write.kind == "segment":
            rows = list(tail)
            held = version - write.seal_from  # versions of the tail the segment took in
            while held > 0:
                total -= len((row := rows.pop())[0])
                held -= row[1]
            rows.append((write.payload, version - write.seal_from + 1, plan.level))
        else:
            rows.append((write.payload, 1, 0))
        total += len(write.payload)
        if total <= self.policy.seal_bytes:  # all of it is what last_bytes would keep
            return Known(version, chain, rows, total, values)
        kept = last_bytes(rows, self.policy.seal_bytes)
        return Known(version, chain, kept, sum(len(r[0]) for r in kept), values)

    def encode_full(self, head: dict[str, Any], state: Any, *, datetimes: bool = True) -> tuple[bytes, int]:
        """A full payload (the state its last pair) and, for a backend that asks, where the
        state starts in it. ``datetimes=False``: neither holds one (see ``serde.pack_plain``)."""
        payload = self.codec.encode({**head, "state": state}, datetimes=datetimes)
        at = state_offset(payload, head, datetimes=datetimes) if self.splits_state else 0
        return payload, at

    def save_write(
        self, cp: Checkpoint, *, expected_version: int | None, expires_at: float | None, write_id: str
    ) -> Write:
        """The full write that stores a whole checkpoint."""
        dated = [check_value(value, key=key) for key, value in cp.state.items()]
        dated.append(check_value(cp.metadata, key="metadata"))
        check_value(list(cp.executed_node_ids), key="executed_node_ids")
        head = full_head(cp)
        datetimes = any(dated)
        payload, state_at = self.encode_full(head, cp.state, datetimes=datetimes)
        return Write(
            run_id=cp.run_id,
            kind="full",
            payload=payload,
            node_id=cp.node_id,
            status=RunStatus(cp.status),
            created_at=cp.timestamp.timestamp(),
            expires_at=expires_at,
            expected_version=expected_version,
            state_at=state_at,
            head=head if state_at else None,
            dated=datetimes,
            write_id=write_id,
        )

    # -- reading ---------------------------------------------------------------------
    def replay(
        self, run_id: str, chain: Sequence[tuple[int, bytes]]
    ) -> tuple[dict[str, Any], list[str], dict[str, Any], list[Carrier] | None]:
        """State, executed node ids, the head of the chain's last version, and the rows a
        commit continuing from it may pack (see :class:`Carrier`; None when it ends inside
        a segment), from ``(version, payload)`` rows: a full state, then deltas and segments
        applied in place (every object here is freshly decoded, so it is ours to change).

        The chain ends at the version wanted. Sealed rows (empty payloads) are skipped:
        the segment before them holds their ops, and a last row that is sealed makes the
        segment apply only up to it. Every version must be covered exactly once.

        The cyclic collector is paused meanwhile (as ``serde._unpack`` pauses it for a big
        body): a replay allocates rows, bodies and lists it drops at once, more containers
        than the state it returns, and a collection they would set off scans them for
        nothing (decoded MessagePack holds no cycle)."""
        pause = gc.isenabled()
        if pause:
            gc.disable()
        try:
            return replay_rows(self.codec, self.kept, run_id, chain, True)
        finally:
            if pause:
                gc.enable()

    def checkpoint_of(self, run_id: str, chain: Sequence[tuple[int, bytes]]) -> Checkpoint:
        """The checkpoint a non-empty ``(version, payload)`` chain ends at (see ``_replay``)."""
        return checkpoint_from(self.codec, self.kept, run_id, chain)

    def known_from_run(self, info: RunInfo | None, version: int) -> Known:
        """What a store knows of a chain from its run record alone (the record of a run at
        ``version``; else a chain taken as due for compaction)."""
        if info is not None and info.version == version:
            return Known(version, info.chain, None)
        return Known(version, ChainStats(length=self.policy.max_chain), None)

    def known_after_load(self, info: RunInfo, version: int, tail: list[Carrier] | None) -> Known:
        """What a store knows of a run loaded at ``version`` (its latest or an older one,
        after which the next commit writes a full row)."""
        if version == info.version:
            if tail is None:
                return Known(version, info.chain, None)
            kept = last_bytes(tail, self.policy.seal_bytes)
            return Known(version, info.chain, kept, sum(len(r[0]) for r in kept))
        return Known(version, ChainStats(length=self.policy.max_chain), None)

    def recut(self, run_id: str, chain: Sequence[tuple[int, bytes]]) -> bytes:
        """When the chain's last version is inside a segment that holds later versions too,
        a segment of those later ones (for the row after it, see ``Backend.rebase``); else b""."""
        cut = chain[-1][0]
        first, payload = next((v, p) for v, p in reversed(chain) if p)
        if first == chain[0][0]:
            return b""  # the full row
        body = self.codec.decode(payload, run_id=run_id, version=first)
        if (
            body.get("kind") != "segment"
            or first + segment_length(body, run_id=run_id, version=first) - 1 <= cut
        ):
            return b""
        return self.codec.encode(pack_segment(cut + 1, split_segment(body)[cut + 1 - first :]))


_NEW_RUN = Known(0, NO_CHAIN, [])


def known_kept(seen: dict[str, Known], changes: Changes) -> Known | None:
    """What a store kept of the run (``seen``) at the version ``changes`` follow, or what a
    full write needs of it; None when only the run record can say."""
    known = seen.get(changes.run_id)
    if known is not None and known.version == changes.version:
        return known
    if changes.version == 0:
        return _NEW_RUN  # a full write takes nothing from it
    return Known(changes.version, NO_CHAIN, []) if changes.full else None


def last_bytes(rows: list[Carrier], limit: int) -> list[Carrier]:
    """The deltas at the end of ``rows`` (the next segment's) and the segments before them
    while all add up to at most ``limit`` bytes (those it may merge)."""
    keep = len(rows)
    while keep and rows[keep - 1][2] == 0:
        keep -= 1
    total = sum(len(r[0]) for r in rows[keep:])
    while keep and total + len(rows[keep - 1][0]) <= limit:
        keep -= 1
        total += len(rows[keep][0])
    return rows[keep:]


def full_head(cp: Checkpoint) -> dict[str, Any]:
    """A full row's payload for a checkpoint, all but its last pair, the state."""
    return {
        "v": SCHEMA_VERSION,
        "kind": "full",
        "node": cp.node_id,
        "status": str(cp.status),
        "ts": cp.timestamp.timestamp(),
        "meta": cp.metadata,
        "executed": list(cp.executed_node_ids),
    }


def full_payload(cp: Checkpoint) -> dict[str, Any]:
    """A checkpoint as a full row's payload, the form a load reads back."""
    return {**full_head(cp), "state": cp.state}
