"""Segment rows: the deltas of several consecutive versions stored as one row.

Why: a load pays per row it reads (the driver's fetch, a decode, an apply), ~6-10 us a
row on these machines, while the floor pays ~2-9 us per KB. A chain of 1,000 small
deltas therefore loaded 2-6x slower than its floor (stop 13's note). Once a run's tail
of deltas holds ``CompactionPolicy.seal_versions`` versions (or ``seal_bytes``), the
save that would add one more writes them all, itself included, as one *segment* into
the tail's first row, and leaves the other rows of the range *sealed*: their history
entry stays (node, status, time), their payload is empty. A load reads the base, one
row per segment and the short tail after them.

A segment's payload::

    {"v": 2, "kind": "segment", "first": a,
     "heads": [[node, status, ts, meta, executed], ...],   # one per version a, a+1, ...
     "ops":   [[key, op, arg, i], ...]}                    # i: index of the version

Ops on different keys commute (a reducer touches only its key), so the ops are grouped
by key, in version order within a key, and consecutive ``append`` ops of one key are
merged into one: ``[key, "append", items, i, [[i, n], [j, m], ...]]`` where ``[j, m]``
says the items up to ``m`` were there after version ``a + j``. Replaying a whole segment
then extends each list once; replaying it up to a version inside it cuts the items.
"""

from __future__ import annotations

from typing import Any

from tether.errors import CheckpointCorrupt
from tether.state.reducers import apply_op

__all__ = ["apply_ops", "apply_segment", "pack_segment", "segment_length", "split_segment"]

SEGMENT_SCHEMA = 2
"""The payload schema that introduced segments (see ``serde.SCHEMA_CHANGES``)."""


def pack_segment(first: int, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    """One segment payload for the delta bodies of versions ``first``, ``first + 1``…

    The bodies' own lists are not changed: a merged append gets a list of its own (a
    body's ops may be the live state's objects, for a delta not yet encoded)."""
    heads: list[list[Any]] = []
    ops: list[list[Any]] = []
    last_of: dict[str, list[Any]] = {}
    for i, body in enumerate(bodies):
        heads.append([body.get("node"), body["status"], body["ts"], body.get("meta") or {}, body["executed"]])
        for key, op, arg in body["ops"]:
            prev = last_of.get(key)
            if (
                op == "append"
                and prev is not None
                and prev[1] == "append"
                and type(arg) is list
                and type(prev[2]) is list
            ):
                if len(prev) == 4:  # the first merge: the items become the segment's own list
                    prev[2] = list(prev[2])
                    prev.append([[prev[3], len(prev[2])]])
                prev[2].extend(arg)
                prev[4].append([i, len(prev[2])])
                continue
            entry = [key, op, arg, i]
            ops.append(entry)
            last_of[key] = entry
    return {"v": SEGMENT_SCHEMA, "kind": "segment", "first": first, "heads": heads, "ops": ops}


def split_segment(seg: dict[str, Any]) -> list[dict[str, Any]]:
    """The delta bodies a segment was packed from, one per version (ops grouped by key)."""
    heads = seg["heads"]
    bodies: list[dict[str, Any]] = [
        {
            "v": SEGMENT_SCHEMA,
            "kind": "delta",
            "node": h[0],
            "status": h[1],
            "ts": h[2],
            "meta": h[3],
            "executed": h[4],
            "ops": [],
        }
        for h in heads
    ]
    for entry in seg["ops"]:
        key, op, arg, i = entry[0], entry[1], entry[2], entry[3]
        if len(entry) == 4:
            bodies[i]["ops"].append([key, op, arg])
            continue
        start = 0
        for j, end in entry[4]:
            bodies[j]["ops"].append([key, op, arg[start:end]])
            start = end
    return bodies


def apply_segment(
    state: dict[str, Any], executed: list[str], seg: dict[str, Any], count: int
) -> dict[str, Any]:
    """Apply a segment's first ``count`` versions in place; returns the head of the last
    one applied (node, status, ts, meta), as a delta body would carry it."""
    heads = seg["heads"]
    if count < len(heads):
        for body in split_segment(seg)[:count]:
            apply_ops(state, body["ops"])
        for h in heads[:count]:
            executed.extend(h[4])
    else:
        apply_ops(state, seg["ops"])
        for h in heads:
            executed.extend(h[4])
    h = heads[count - 1]
    return {"node": h[0], "status": h[1], "ts": h[2], "meta": h[3]}


def apply_ops(state: dict[str, Any], ops: list[Any]) -> None:
    """Replay ``[key, op, arg, ...]`` ops in place, extending lists and dicts rather than
    copying them (every object here is freshly decoded, so it is the caller's)."""
    for entry in ops:
        key, op, arg = entry[0], entry[1], entry[2]
        old = state.get(key)
        if op == "append" and type(old) is list:
            old.extend(arg)
        elif op == "merge" and type(old) is dict:
            old.update(arg)
        else:
            state[key] = apply_op(old, op, arg)


def segment_length(seg: Any, *, run_id: str, version: int) -> int:
    """How many versions a decoded segment holds; CheckpointCorrupt naming the row when
    it is not a segment that starts at ``version``."""
    if (
        type(seg) is not dict
        or seg.get("kind") != "segment"
        or seg.get("first") != version
        or type(seg.get("heads")) is not list
        or not seg["heads"]
        or type(seg.get("ops")) is not list
    ):
        raise CheckpointCorrupt("segment row is damaged", run_id=run_id, version=version)
    return len(seg["heads"])
