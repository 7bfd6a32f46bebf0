"""Deltas and segments joined from packed parts, so that sealing decodes nothing it wrote.

Why: a store that seals (see ``_segment``) packs the last deltas it wrote into a segment.
Built from decoded rows, that meant decoding every row of the tail again and packing the
segment anew, at every level: a large share of a commit's CPU on a chat-sized run (figures
in ``benchmarks/README.md``, "Sealing from packed parts"). Keeping the decoded bodies
instead would keep the caller's live objects, which may change after the commit.

MessagePack is a concatenation (an array is its header and its items' bytes), so a commit
packs each op's argument once, joins its delta from those bytes and keeps them as a
:data:`Step`; a seal joins the segment from the steps of the rows it packs, byte for byte
what ``pack_segment`` gives for the decoded bodies (``tests/stores/test_seal.py``). A row
read back from the database has no steps: :func:`steps_of` packs its decoded bodies.
"""

from __future__ import annotations

import functools
import struct
from typing import Any

import ormsgpack

from tether.state.serde import pack_value
from tether.stores._segment import SEGMENT_SCHEMA

__all__ = ["Step", "join_delta", "join_segment", "pack_delta", "steps_of"]

PackedOp = tuple[str, str, bytes]
"""An op with its argument packed: key, op name, argument."""

Step = tuple[bytes, bytes, float, bytes, list[str], list[PackedOp]]
"""One version's delta as parts: node, status (packed), time, meta (packed), the node ids
it marked executed, its ops in the order a segment's ``split_segment`` gives them."""

_STR_FIRST = frozenset((*range(0xA0, 0xC0), 0xD9, 0xDA, 0xDB))
_NIL, _EMPTY_MAP = b"\xc0", b"\x80"
_INTS = [bytes((i,)) for i in range(128)]
"""The small ints a segment's ops carry (their version's index), packed."""
_ARRAY = frozenset((*range(0x90, 0xA0), 0xDC, 0xDD))
"""First byte of a packed array (what ``pack_segment`` merges: a list once decoded)."""


def _array(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _items(arg: bytes) -> tuple[int, bytes] | None:
    """A packed array's length and its items' bytes; None when ``arg`` is not an array."""
    first = arg[0]
    if 0x90 <= first <= 0x9F:
        return first & 0x0F, arg[1:]
    if first == 0xDC:
        return int.from_bytes(arg[1:3], "big"), arg[3:]
    if first == 0xDD:
        return int.from_bytes(arg[1:5], "big"), arg[5:]
    return None


_HEADS: dict[tuple[str, str], bytes] = {}
"""The packed key and op name of the ops seen (a run's keys are few), bounded."""
_DELTA_OPS: dict[tuple[str, str], bytes] = {}
"""The same with the header of a delta's op, ``[key, op, arg]``."""
_SMALL: dict[str | None, bytes] = {}
_DELTA_START = {SEGMENT_SCHEMA: b"\x88\xa1v" + bytes((SEGMENT_SCHEMA,)) + b"\xa4node"}
_DOUBLE = functools.partial(struct.Struct(">Bd").pack, 0xCB)
"""A float packed as ``pack_value`` packs it: a float64's marker, then the float."""


def _key_op(key: str, op: str) -> bytes:
    """The two strings packed, without their array's header."""
    head = _HEADS.get((key, op))
    if head is None:
        head = ormsgpack.packb((key, op))[1:]
        if len(_HEADS) < 4096:
            _HEADS[key, op] = head
    return head


def _small(value: str | None) -> bytes:
    """A node name or a status packed (they are few, so they are packed once each)."""
    packed = _SMALL.get(value)
    if packed is None:
        packed = pack_value(value)
        if len(_SMALL) < 4096 and (value is None or len(value) <= 64):
            _SMALL[value] = packed
    return packed


def _delta_op(key: str, op: str) -> bytes:
    head = b"\x93" + _key_op(key, op)
    if len(_DELTA_OPS) < 4096:
        _DELTA_OPS[key, op] = head
    return head


def join_delta(
    schema: int,
    node: str | None,
    status: str,
    ts: float,
    meta: dict[str, Any],
    ops_taken: Any,
    executed: list[str],
) -> tuple[bytes, Step, int]:
    """A delta's body (``pack_value`` of the dict :func:`pack_delta` packs), its step, and
    the bytes of its ops that overwrite (all but ``append`` and ``add``, the ``rewrite`` of
    compaction's accounting)."""
    node_b, status_b = _SMALL.get(node) or _small(node), _SMALL.get(status) or _small(status)
    meta_b = pack_value(meta) if meta else _EMPTY_MAP
    parts = [
        _DELTA_START.get(schema) or b"\x88\xa1v" + pack_value(schema) + b"\xa4node", node_b,
        b"\xa6status", status_b, b"\xa2ts", _DOUBLE(ts) if type(ts) is float else pack_value(ts),
        b"\xa4meta", meta_b, b"\xa4kind\xa5delta\xa3ops", _array(len(ops_taken)),
    ]  # fmt: skip
    ops: list[PackedOp] = []
    rewrite, heads, pack = 0, _DELTA_OPS, pack_value
    for key, op, arg in ops_taken:
        packed = pack(arg)
        ops.append((key, op, packed))
        parts += (heads.get((key, op)) or _delta_op(key, op), packed)
        if op != "append" and op != "add":
            rewrite += len(packed)
    parts += (b"\xa8executed", pack(executed))
    return b"".join(parts), (node_b, status_b, ts, meta_b, executed, ops), rewrite


def pack_delta(
    schema: int,
    node: str | None,
    status: str,
    ts: float,
    meta: dict[str, Any],
    ops_taken: Any,
    executed: list[str],
) -> tuple[bytes, int]:
    """:func:`join_delta` without a step, for a store that never seals: one call packs
    it all, and only the ops that overwrite are packed again, to be counted."""
    body = pack_value(
        {
            "v": schema,
            "node": node,
            "status": status,
            "ts": ts,
            "meta": meta,
            "kind": "delta",
            "ops": [[key, op, arg] for key, op, arg in ops_taken],
            "executed": executed,
        }
    )
    rewrite = 0
    for _key, op, arg in ops_taken:
        if op != "append" and op != "add":
            rewrite += len(pack_value(arg))
    return body, rewrite


def steps_of(bodies: list[dict[str, Any]]) -> list[Step]:
    """The steps of decoded delta bodies (``split_segment``'s, for a segment)."""
    return [
        (
            pack_value(b.get("node")),
            pack_value(b["status"]),
            b["ts"],
            pack_value(b.get("meta") or {}),
            list(b.get("executed") or ()),
            [(key, op, pack_value(arg)) for key, op, arg in b["ops"]],
        )
        for b in bodies
    ]


def _column(parts: list[bytes]) -> bytes:
    """``_segment._column`` on packed values: one for all when all are the same string,
    nil or empty map (equal bytes are equal values of one type), else the array."""
    first = parts[0]
    if (first in (_NIL, _EMPTY_MAP) or first[0] in _STR_FIRST) and all(p == first for p in parts):
        return first
    return _array(len(parts)) + b"".join(parts)


def _counts(values: list[int]) -> bytes:
    return pack_value(struct.pack(f"<{len(values)}I", *values))


def join_segment(first: int, steps: list[Step], level: int) -> tuple[bytes, list[Step]]:
    """The body of ``pack_segment(first, bodies, level)`` for the bodies of ``steps``, and
    the segment's own steps (those ``split_segment`` would give, for a merge later)."""
    entries: list[list[Any]] = []  # [key, op, arg, i, [(i, arg), ...] once merged, items?]
    last_of: dict[str, list[Any]] = {}
    executed: list[str] = []
    ends: list[int] = []
    for i, step in enumerate(steps):
        executed.extend(step[4])
        ends.append(len(executed))
        for key, op, arg in step[5]:
            prev = last_of.get(key)
            if op == "append" and prev is not None and prev[1] == "append" and prev[5] and arg[0] in _ARRAY:
                if prev[4] is None:
                    prev[4] = [(prev[3], prev[2])]
                prev[4].append((i, arg))
                continue
            entry = [key, op, arg, i, None, op == "append" and arg[0] in _ARRAY]
            entries.append(entry)
            last_of[key] = entry
    parts = [
        b"\x8c" if executed else b"\x8b", b"\xa1v", pack_value(SEGMENT_SCHEMA), b"\xa4kind\xa7segment",
        b"\xa5first", pack_value(first), b"\xa1n", pack_value(len(steps)), b"\xa2lv", pack_value(level),
        b"\xa4node", _column([s[0] for s in steps]), b"\xa6status", _column([s[1] for s in steps]),
        b"\xa4meta", _column([s[3] for s in steps]),
        b"\xa2ts", pack_value(struct.pack(f"<{len(steps)}d", *[s[2] for s in steps])),
        b"\xa8executed", pack_value(executed), b"\xa3ops", _array(len(entries)),
    ]  # fmt: skip
    split: list[list[PackedOp]] = [[] for _ in steps]
    for key, op, arg, i, merged, _listed in entries:
        if merged is None:
            parts += (b"\x94", _key_op(key, op), arg, _INTS[i] if i < 128 else pack_value(i))
            split[i].append((key, op, arg))
            continue
        items: list[bytes] = []
        marks: list[int] = []
        total = 0
        for j, piece in merged:
            count, chunk = _items(piece)  # type: ignore[misc]  # an array: checked when merged
            total += count
            items.append(chunk)
            marks += (j, total)
            split[j].append((key, op, piece))
        parts += (b"\x95", _key_op(key, op), _array(total), *items, pack_value(i), _counts(marks))
    if executed:
        parts += (b"\xa4ends", _counts(ends))
    seg_steps = [(s[0], s[1], s[2], s[3], s[4], split[i]) for i, s in enumerate(steps)]
    return b"".join(parts), seg_steps
