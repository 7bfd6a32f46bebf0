"""Segment rows: the deltas of several consecutive versions stored as one row.

Why: a load pays per row it reads (the driver's fetch, a decode, an apply), so a long
chain of small deltas loads far slower than its bytes would (figures in
``benchmarks/README.md``, "Figures behind the storage engine"). Once a run's tail
of deltas holds ``CompactionPolicy.seal_versions`` versions (or ``seal_tail_bytes``), the
save that would add one more writes them all, itself included, as one *segment* into
the tail's first row, and leaves the other rows of the range *sealed*: their history
entry stays (node, status, time), their payload is empty. Segments of one level merge
into the next (``seal_fanout``), so a load reads the base, a few segments a level and
the short tail after them.

A segment's payload is laid out by column, since decoding it costs per object and a
version's own fields are mostly the same as the next one's (a delta's head decoded as a
dict of its own cost as much as its message). Numbers a load of the latest state does not
need one by one are packed as little-endian arrays (``<d`` floats, ``<I`` counts), one
bytes object each instead of an object per number (as lists they were a large share of
the objects a segment decodes to)::

    {"v": 2, "kind": "segment", "first": a, "n": count, "lv": level,
     "node": [...] | value,  "status": [...] | value,  "meta": [...] | value,
     "ts": <d array,  "executed": [ids...],  "ends": <I array,
     "names": [key or op name, ...],  "ops": [[key at, op at, arg, i], ...]}

``names`` (from payload schema 3) lists the keys and op names the ops use once, and each op
gives their positions in it instead: a run whose every version overwrites a few keys stored
each key's name and the runtime's op name (``tether.state.reserved:part``) once per version,
a third of an orchestration's stored bytes. Segments without it (schema 2) hold the names.

``lv`` is 1 for a segment of deltas, L + 1 for one merged from segments of level L: a
store merges the last few segments of one level into one, so a chain of N versions is
read as O(log N) rows (see ``CompactionPolicy``). ``node``, ``status`` and ``meta`` hold
one value per version, or one value for all of
them. ``executed`` holds every version's executed node ids in order and ``ends`` where
each version's end (absent when there are none). ``i`` in an op is the index of its
version.

Ops on different keys commute (a reducer touches only its key), so only the ops of one key
keep their version order, and consecutive ``append`` ops of one key are merged into one:
``[key, "append", items, i, <I array j, m, k, n, ...]`` says the items up to ``m`` were there
after version ``a + j``, up to ``n`` after ``a + k``… Replaying a whole segment then extends
each list once; replaying it up to a version inside it cuts the items.

Consecutive ``set`` ops of a key, or ``merge`` ops (from payload schema 4), become one *run*:
``[key, op, outcome, i, <I array j, e, k, f, ..., bytes]``. The outcome is what the run leaves
(the last value set, or the union of the merges, a shallow merge being a dict update) and
``i`` the run's last version; the bytes hold each version's own argument as MessagePack,
version ``a + j``'s ending at ``e``, ``a + k``'s at ``f``… (every merge's; every set's but the
last, which is the outcome). A LangGraph thread overwrites its checkpoint record and merges
its channels' versions at every step: a read of the latest state decodes one record a key,
not one a version, and applies one op; a split, or a read up to a version inside the run,
decodes the arguments it needs.
"""

from __future__ import annotations

import struct
from typing import Any

from tether.errors import CheckpointCorrupt
from tether.state.reducers import apply_op
from tether.state.reserved import OP as RESERVED_OP
from tether.state.reserved import merge_part_into
from tether.state.serde import SCHEMA_VERSION, pack_value, unpack_dated
from tether.stores._patch import PATCH, apply_patch

__all__ = ["apply_ops", "apply_segment", "pack_segment", "segment_length", "split_segment"]

SEGMENT_SCHEMA = 2
"""The payload schema that introduced segments (see ``serde.SCHEMA_CHANGES``)."""


def pack_segment(first: int, bodies: list[dict[str, Any]], level: int = 1) -> dict[str, Any]:
    """One segment payload for the versions ``first``, ``first + 1``… of ``bodies``, in
    order: delta bodies (one version each) and decoded segments (their ``n`` versions each).

    A segment is taken in whole, by its ops (grouped by key, version order within a key,
    as this packs them), not split into one body per version first: a merge of segments
    then costs per op it keeps, not per version's op twice (split, then packed again).

    The bodies' own lists are not changed: a merged append gets a list of its own (a
    body's ops may be the live state's objects, for a delta not yet encoded)."""
    ops: list[list[Any]] = []
    last_of: dict[str, list[Any]] = {}
    executed: list[str] = []
    ends: list[int] = []
    nodes: list[Any] = []
    statuses: list[Any] = []
    metas: list[Any] = []
    times: list[float] = []
    i = 0  # the version index (in the new segment) of the body's first version
    for body in bodies:
        if body.get("kind") == "segment":
            i = _take_segment(body, i, ops, last_of, executed, ends, (nodes, statuses, metas, times))
            continue
        executed.extend(body.get("executed") or ())
        ends.append(len(executed))
        nodes.append(body.get("node"))
        statuses.append(body["status"])
        metas.append(body.get("meta") or {})
        times.append(body["ts"])
        for key, op, arg in body["ops"]:
            if op == "set" or op == "merge":
                run = _run_for(last_of.get(key), op, arg)
                if run is not None:
                    _then(run, arg, i)
                    continue
            prev = _joins(last_of.get(key), op, arg)
            if prev is not None:
                prev[2].extend(arg)
                prev[4] += (i, len(prev[2]))
                continue
            entry = [key, op, arg, i]
            ops.append(entry)
            last_of[key] = entry
        i += 1
    seg: dict[str, Any] = {
        "v": SCHEMA_VERSION,
        "kind": "segment",
        "first": first,
        "n": i,
        "lv": level,
        "node": _column(nodes),
        "status": _column(statuses),
        "meta": _column(metas),
        "ts": _floats(times),
        "executed": executed,
        "ops": ops,
    }
    names: dict[str, int] = {}
    for entry in ops:
        entry[0] = names.setdefault(entry[0], len(names))
        entry[1] = names.setdefault(entry[1], len(names))
        if len(entry) == 5:
            entry[4] = _counts(entry[4])
        elif len(entry) == 6:
            entry[4] = _counts(entry[4])
            entry[5] = b"".join(entry[5])
    seg["names"] = list(names)
    if executed:
        seg["ends"] = _counts(ends)
    return seg


def _run_for(prev: list[Any] | None, op: str, arg: Any) -> list[Any] | None:
    """``prev`` (the key's last entry) as the run that a ``set`` or ``merge`` of ``arg``
    joins, made a run in place at the first join (see the module docstring); None when it
    does not join. A run's merged outcome is a dict of its own, never an argument given."""
    if prev is None or prev[1] != op or len(prev) == 5:
        return None
    if op == "merge" and (type(arg) is not dict or type(prev[2]) is not dict):
        return None
    if len(prev) == 4:
        prev.extend(([], []))
        if op == "merge":  # every merge's own argument is kept: a later split needs each
            _keep(prev, prev[3], pack_value(prev[2]))
            prev[2] = dict(prev[2])
    return prev


def _then(run: list[Any], arg: Any, i: int, *, encoded: bool = False) -> None:
    """Version ``i``'s ``set`` or ``merge`` of ``arg`` added to ``run``. ``encoded``: a
    merge's own arguments come as bytes with it (a taken run's outcome), not kept here."""
    if run[1] == "merge":
        if not encoded:
            _keep(run, i, pack_value(arg))
        run[2].update(arg)
    else:  # the value it overwrites is kept as bytes
        _keep(run, run[3], pack_value(run[2]))
        run[2] = arg
    run[3] = i


def _keep(run: list[Any], i: int, data: bytes) -> None:
    """Version ``i``'s own argument, encoded, appended to the run's bytes."""
    run[4] += (i, (run[4][-1] if run[4] else 0) + len(data))
    run[5].append(data)


def _joins(prev: list[Any] | None, op: str, arg: Any) -> list[Any] | None:
    """``prev`` (the key's last entry) when an ``append`` of ``arg`` joins it, its items
    then the segment's own list with its first mark (at the first join); else None."""
    if op != "append" or prev is None or prev[1] != "append" or type(arg) is not list:
        return None
    if type(prev[2]) is not list:
        return None
    if len(prev) == 4:  # the first join: the items become the segment's own list
        prev[2] = list(prev[2])
        prev.append([prev[3], len(prev[2])])
    return prev


def _take_segment(
    seg: dict[str, Any],
    base: int,
    ops: list[list[Any]],
    last_of: dict[str, list[Any]],
    executed: list[str],
    ends: list[int],
    columns: tuple[list[Any], list[Any], list[Any], list[float]],
) -> int:
    """Add a decoded segment's versions, from version index ``base``, to what
    ``pack_segment`` is packing; returns the index after its last version. Its appends
    join the ones before them of the same key, as its versions' own appends one by one
    would (a merged append's marks moved by ``base`` versions and by the items before)."""
    count: int = seg["n"]
    before = len(executed)
    executed.extend(seg["executed"])
    if "ends" in seg:
        ends.extend([before + end for end in _numbers(seg["ends"], "I")])
    else:
        ends.extend([before] * count)
    nodes, statuses, metas, times = columns
    for column, values in ((seg["node"], nodes), (seg["status"], statuses), (seg["meta"], metas)):
        values.extend(column if type(column) is list else [column] * count)
    times.extend(_numbers(seg["ts"], "d"))
    names = seg.get("names")
    for entry in seg["ops"]:
        key, op, arg, i = entry[0], entry[1], entry[2], entry[3]
        if names is not None:
            key, op = names[key], names[op]
        if len(entry) == 6:  # a run: joins the key's run before it, its bytes as they are
            marks = _numbers(entry[4], "I")
            run = _run_for(last_of.get(key), op, arg)
            if run is None:
                run = [key, op, dict(arg) if op == "merge" else arg, base + i, [], []]
                ops.append(run)
                last_of[key] = run
            else:
                _then(run, arg, base + i, encoded=True)
            size = run[4][-1] if run[4] else 0
            for k in range(0, len(marks), 2):
                run[4] += (base + marks[k], size + marks[k + 1])
            run[5].append(entry[5])
            continue
        if len(entry) == 4 and (op == "set" or op == "merge"):
            run = _run_for(last_of.get(key), op, arg)
            if run is not None:
                _then(run, arg, base + i)
                continue
        marks = _numbers(entry[4], "I") if len(entry) == 5 else (i, len(arg) if type(arg) is list else 0)
        prev = _joins(last_of.get(key), op, arg)
        if prev is not None:
            at = len(prev[2])
            prev[2].extend(arg)
            for k in range(0, len(marks), 2):
                prev[4] += (base + marks[k], at + marks[k + 1])
            continue
        if len(entry) == 5:
            moved = [m + base if k % 2 == 0 else m for k, m in enumerate(marks)]
            new = [key, op, list(arg), base + i, moved]
        else:
            new = [key, op, arg, base + i]
        ops.append(new)
        last_of[key] = new
    return base + count


def _floats(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}d", *values)


def _counts(values: list[int]) -> bytes:
    return struct.pack(f"<{len(values)}I", *values)


def _numbers(data: bytes, code: str) -> tuple[Any, ...]:
    return struct.unpack(f"<{len(data) // struct.calcsize(code)}{code}", data)


def _ts(seg: dict[str, Any], i: int) -> float:
    value: float = struct.unpack_from("<d", seg["ts"], 8 * i)[0]
    return value


def _column(values: list[Any]) -> Any:
    """One value for all versions when they are all the same string, None or empty dict,
    else the list. (Not any equal values: ``{"a": 1} == {"a": True}``.)"""
    first = values[0]
    if first is None or type(first) is str or (type(first) is dict and not first):
        kind = type(first)
        if all(type(v) is kind and v == first for v in values):
            return first
    return values


def _cell(column: Any, i: int) -> Any:
    return column[i] if type(column) is list else column


def split_segment(seg: dict[str, Any]) -> list[dict[str, Any]]:
    """The delta bodies a segment was packed from, one per version (ops grouped by key)."""
    count = seg["n"]
    times = _numbers(seg["ts"], "d")
    executed = seg["executed"]
    ends = _numbers(seg["ends"], "I") if "ends" in seg else (0,) * count
    bodies: list[dict[str, Any]] = [
        {
            "v": SEGMENT_SCHEMA,
            "kind": "delta",
            "node": _cell(seg["node"], i),
            "status": _cell(seg["status"], i),
            "ts": times[i],
            "meta": _cell(seg["meta"], i),
            "executed": executed[ends[i - 1] if i else 0 : ends[i]],
            "ops": [],
        }
        for i in range(count)
    ]
    names = seg.get("names")
    for entry in seg["ops"]:
        key, op, arg, i = entry[0], entry[1], entry[2], entry[3]
        if names is not None:
            key, op = names[key], names[op]
        if len(entry) == 4:
            bodies[i]["ops"].append([key, op, arg])
            continue
        marks, start = _numbers(entry[4], "I"), 0
        if len(entry) == 6:  # a run: each version's own argument decoded from its bytes
            data = entry[5]
            for at in range(0, len(marks), 2):
                end = marks[at + 1]
                bodies[marks[at]]["ops"].append([key, op, unpack_dated(data[start:end])])
                start = end
            if op != "merge":  # a set's last value is the run's outcome
                bodies[i]["ops"].append([key, op, arg])
            continue
        for at in range(0, len(marks), 2):
            end = marks[at + 1]
            bodies[marks[at]]["ops"].append([key, op, arg[start:end]])
            start = end
    return bodies


def apply_segment(
    state: dict[str, Any], executed: list[str], seg: dict[str, Any], count: int
) -> dict[str, Any]:
    """Apply a segment's first ``count`` versions in place; returns the head of the last
    one applied (node, status, ts, meta), as a delta body would carry it."""
    if count < seg["n"]:
        for body in split_segment(seg)[:count]:
            apply_ops(state, body["ops"])
            executed.extend(body["executed"])
    else:
        apply_ops(state, seg["ops"], seg.get("names"))
        executed.extend(seg["executed"])
    i = count - 1
    return {
        "node": _cell(seg["node"], i),
        "status": _cell(seg["status"], i),
        "ts": _ts(seg, i),
        "meta": _cell(seg["meta"], i),
    }


def apply_ops(state: dict[str, Any], ops: list[Any], names: list[str] | None = None) -> None:
    """Replay ``[key, op, arg, ...]`` ops in place, extending lists and dicts rather than
    copying them (every object here is freshly decoded, so it is the caller's). ``names``:
    a segment's table that its ops' keys and op names index."""
    for entry in ops:
        key, op, arg = entry[0], entry[1], entry[2]
        if names is not None:
            key, op = names[key], names[op]
        if op == "set":  # the most common op, and it needs nothing of the old value
            state[key] = arg
            continue
        old = state.get(key)
        if op == "append" and type(old) is list:
            old.extend(arg)
        elif op == "merge" and type(old) is dict:
            old.update(arg)
        elif op == RESERVED_OP and type(old) is dict:
            merge_part_into(old, arg)
        elif op == PATCH:
            state[key] = apply_patch(old, arg)
        else:
            state[key] = apply_op(old, op, arg)


def segment_length(seg: Any, *, run_id: str, version: int) -> int:
    """How many versions a decoded segment holds; CheckpointCorrupt naming the row when
    it is not a segment that starts at ``version``."""
    if (
        type(seg) is not dict
        or seg.get("kind") != "segment"
        or seg.get("first") != version
        or type(seg.get("n")) is not int
        or seg["n"] < 1
        or type(seg.get("ts")) is not bytes
        or len(seg["ts"]) != 8 * seg["n"]
        or type(seg.get("ops")) is not list
        or type(seg.get("executed")) is not list
        or type(seg.get("names", [])) is not list
    ):
        raise CheckpointCorrupt("segment row is damaged", run_id=run_id, version=version)
    return int(seg["n"])
