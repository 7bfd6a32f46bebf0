"""Patches: an overwrite stored as what changed since the value the store last wrote.

Why: a step that overwrites a key (``set``), merges into a dict (``merge``) or updates the
runtime's part (``_tether``) hands the store the whole new value, though most of it is
what the run already holds: an orchestrator's metrics with a list that grows by one number
a round, a report index whose per-role list grows by one path, a history entry that gains
a line. Stored as is, each such step rewrites them, and a run's stored bytes grow with the
square of its length (an orchestration held 6x its final state after 200 iterations).

A store keeps, per run, the MessagePack bytes of the values it last wrote for those keys
(and dict entries), :data:`Values`. At the next commit, an op whose value it knows becomes
a ``patch`` op when that is smaller: a dict patch names the entries that changed, a list
patch keeps a prefix and appends the rest, anything else is replaced. A patch is kept only
if applying it to the known value gives back the new value's exact bytes, so a patch is
never wrong, whatever the values hold (``1`` against ``True``, key order, NaN). An entry
whose value did not change is left out of the write.

Patch layout (``[key, "patch", p]`` in a delta's ops, ``p`` one of)::

    [value]                       replace (a list of one item)
    [0, {name: p, ...}]           a dict: patch each named entry (create it when absent)
    [0, {name: p, ...}, [gone]]   … and remove the entries named in ``gone``
    [1, keep, items]              a list: keep its first ``keep`` items, append ``items``
    [1, keep, items, cut]         … after removing its first ``cut`` items (a capped list)

(Tags are small integers and a replacement has none: a patch is written once a version, so
its every byte counts.)

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Literal

import ormsgpack

from tether.state.reserved import EVENT_LOG, ROUTE, TODO
from tether.state.reserved import OP as RESERVED_OP
from tether.state.serde import pack_plain, unpack_dated

__all__ = ["PATCH", "Values", "apply_patch", "patch_ops", "whole_ops"]

PATCH = "patch"
"""The op name of a patch in a delta (replayed by ``_segment.apply_ops``)."""

Values = dict[tuple[str, ...], "bytes | tuple[bytes, int]"]
"""What a store last wrote at each path of a run's state (``(key,)`` for a whole value,
``(key, name)`` for a dict entry, ``("_tether", "todo", step)`` for a TODO item), packed;
``(packed, misses)`` for a path whose last overwrite could not be patched (see ``SKIP``)."""

_OPTS = ormsgpack.OPT_PASSTHROUGH_DATETIME | ormsgpack.OPT_PASSTHROUGH_SUBCLASS

_DICT = 0
_LIST = 1

MIN_BYTES = 32
"""Values smaller than this are written as they are: a patch could not save much."""
MAX_BYTES = 256 * 1024
"""Values bigger than this are not kept: the memory and the diff would cost more than the
rewrite saves (a key rewritten whole at this size is better kept as a list of appends)."""
SKIP = 8
"""After three overwrites in a row that could not be patched, a path's overwrites are stored
whole without a diff but for every ``SKIP``-th (until one is patched again): a value that
changes whole every time (a serialised record, an id, a version string) would otherwise pay
an unpack, a diff and a pack at every commit for nothing. A value replaced whole once among
patched ones (two misses: to it and back) is still diffed. An unchanged value is still left
out (that takes only a comparison of bytes)."""


def patch_ops(ops: tuple[Any, ...], values: Values | None) -> tuple[list[list[Any]], Values, int]:
    """The ops to store for ``ops`` (``(key, op, arg)`` as the reducers recorded them) given
    the ``values`` known as of the previous version; the values known after them, and the
    bytes of the ops that replace a value (the rewrite, for compaction: everything but
    appends, a merge's entries and the runtime's part counted by what they replace, its
    event log being appended)."""
    known: Values = dict(values) if values else {}
    # the paths with known paths under them: the others have none to forget (a scan of
    # every known path per op was a third of the work, for the few keys ever merged)
    under = {path[:n] for path in known for n in range(1, len(path))}
    out: list[list[Any]] = []
    rewrite = 0
    for key, op, arg in ops:
        if op == "set":
            p, size = _overwrite(known, under, (key,), arg)  # as of the ops before this one
            if p is None:
                continue  # the same value again: nothing to store
            rewrite += size
            out.append([key, op, arg] if p is False else [key, PATCH, p])
        elif (op == "merge" or op == RESERVED_OP) and type(arg) is dict and arg:
            known.pop((key,), None)
            kept, patches, size = _entries(known, under, (key,), arg, reserved=op == RESERVED_OP)
            if kept:
                out.append([key, op, kept])
            if patches:
                out.append([key, PATCH, [_DICT, patches]])
            rewrite += size
        else:
            _forget(known, under, (key,))
            out.append([key, op, arg])
            if op != "append" and op != "add":  # (appends are growth)
                rewrite += sized(arg)
    return out, known, rewrite


def whole_ops(ops: tuple[Any, ...]) -> tuple[list[list[Any]], int]:
    """The ops to store for ``ops`` without patching them: for a writer whose overwrites
    never repeat most of the value they replace, which a diff would only cost. The rewrite
    bytes returned are the packed size of every value the ops overwrite (a merge's entries,
    the runtime's part but its event log), as ``patch_ops`` counts an overwrite it stores
    whole."""
    out: list[list[Any]] = []
    rewrite = 0
    for key, op, arg in ops:
        out.append([key, op, arg])
        if (op == "merge" or op == RESERVED_OP) and type(arg) is dict and arg:
            reserved = op == RESERVED_OP
            for name, value in arg.items():
                if reserved and (name == EVENT_LOG or (name == ROUTE and type(value) is list)):
                    continue  # appended or applied by the reducer: growth
                rewrite += sized(value)
        elif op != "append" and op != "add":
            rewrite += sized(arg)
    return out, rewrite


def _entries(
    known: Values, under: set[tuple[str, ...]], at: tuple[str, ...], arg: dict[str, Any], *, reserved: bool
) -> tuple[dict[str, Any], dict[str, Any], int]:
    """A merge's entries split into those written as they are and those patched."""
    kept: dict[str, Any] = {}
    patches: dict[str, Any] = {}
    size = 0
    for name, value in arg.items():
        if reserved and (name == EVENT_LOG or (name == ROUTE and type(value) is list)):
            # appended (the event log) or applied (a routing step) by the reducer: a delta already
            _forget(known, under, (*at, name))
            kept[name] = value
            continue
        if reserved and name == TODO and type(value) is dict:
            known.pop((*at, name), None)
            items, item_patches, n = _entries(known, under, (*at, name), value, reserved=False)
            size += n
            if items:
                kept[name] = items
            if item_patches:
                patches[name] = [_DICT, item_patches]
            continue
        p, n = _overwrite(known, under, (*at, name), value)
        if p is None:
            continue
        size += n
        if p is False:
            kept[name] = value
        else:
            patches[name] = p
    return kept, patches, size


def _overwrite(
    known: Values, under: set[tuple[str, ...]], path: tuple[str, ...], value: Any
) -> tuple[Any, int]:
    """How to store ``value`` at ``path``: ``(patch, its size)``, ``(None, 0)`` when it is
    the value known there, ``(False, its size)`` to store it whole; ``known`` is updated
    (and ``under``, the paths with known paths under them)."""
    held = _forget(known, under, path)
    packed, size = _pack(value)
    if packed is None:
        return False, sized(value) if size is None else size
    if len(path) > 1:
        under.update(path[:n] for n in range(1, len(path)))
    old, misses = held if type(held) is tuple else (held, 0)
    if old == packed:
        known[path] = (packed, misses) if misses else packed
        return None, 0
    if misses > 2 and misses % SKIP:
        known[path] = (packed, misses + 1)
        return False, len(packed)
    found = _patch(old, value, packed) if old is not None else False
    if found is False:
        known[path] = (packed, misses + 1) if old is not None else packed
        return False, len(packed)
    known[path] = packed
    return found


def sized(value: Any) -> int:
    """A value's MessagePack size, for the compaction's accounting (a datetime as its text)."""
    return len(ormsgpack.packb(value, default=str, option=_OPTS))


def _forget(known: Values, under: set[tuple[str, ...]], path: tuple[str, ...]) -> Any:
    """Forget every known value at or under ``path`` (its value changed in a way not
    tracked); returns the one at ``path`` (None when none was). ``under``: the paths with
    known paths under them (a path stays in it once forgotten: it then costs a scan)."""
    held = known.pop(path, None)
    if path in under:
        n = len(path)
        for gone in [p for p in known if p[:n] == path]:
            del known[gone]
    return held


def _pack(value: Any) -> tuple[bytes | None, int | None]:
    """The exact bytes of a value worth tracking (else None), and the size of the bytes packed
    (None when none were: a small value is then not packed a second time to be counted)."""
    if value is None or type(value) in (bool, int, float):
        return None, None
    try:
        packed = pack_plain(value)
    except (TypeError, ValueError, OverflowError):  # not plain data: the write says why
        return None, None
    if len(packed) < MIN_BYTES or len(packed) > MAX_BYTES:
        return None, len(packed)
    return packed, len(packed)


def _patch(old: bytes, new: Any, packed: bytes) -> tuple[Any, int] | Literal[False]:
    """``(patch, its size)`` turning the value packed as ``old`` into ``new`` (packed as
    ``packed``, other bytes than ``old``) when smaller than ``packed``; False when no patch
    is worth storing."""
    base = unpack_dated(old)
    p = diff(base, new)
    if p is None or len(p) == 1:  # a replacement: no patch
        return False
    size = len(pack_plain(p))
    if size >= len(packed) * 0.8:
        return False
    if pack_plain(apply_patch(base, p)) != packed:  # exact, or not at all
        return False
    return p, size


def diff(old: Any, new: Any) -> Any:
    """A patch from ``old`` to ``new`` (None: equal as far as ``==`` tells; the caller
    checks the bytes)."""
    if type(old) is dict and type(new) is dict:
        quick = _flat_diff(old, new)
        if quick is not None:
            return quick or None
        changed: dict[str, Any] = {}
        for name, value in new.items():
            if name in old:
                before = old[name]
                if type(before) is type(value) and before == value:
                    continue
                sub = diff(before, value)
                if sub is not None:
                    changed[name] = sub
            else:
                changed[name] = [value]
        gone = [name for name in old if name not in new]
        if not changed and not gone:
            return None
        return [_DICT, changed, gone] if gone else [_DICT, changed]
    if type(old) is list and type(new) is list:
        n = len(old)
        if len(new) >= n and new[:n] == old:
            if len(new) == n:
                return None
            return [_LIST, n, new[n:]]
        if new and n:  # a window that dropped its oldest items (a capped list)?
            try:
                cut = old.index(new[0])
            except ValueError:
                cut = 0
            if cut and new[: n - cut] == old[cut:]:
                return [_LIST, n - cut, new[n - cut :], cut]
        keep = 0
        for a, b in zip(old, new, strict=False):
            if type(a) is not type(b) or a != b:
                break
            keep += 1
        return [_LIST, keep, new[keep:]]
    if type(old) is type(new) and old == new:
        return None
    return [new]


def _flat_diff(old: dict[str, Any], new: dict[str, Any]) -> list[Any] | None:
    """:func:`diff` of two dicts of scalars by set operations in C, not a loop in Python
    (a run's visits per step: a dict as long as the workflow, one count changed a step);
    ``[]`` when equal; None when a value is not hashable (the loop decides)."""
    try:
        fresh = new.items() - old.items()
    except TypeError:
        return None
    gone = old.keys() - new.keys()
    if not fresh and not gone:
        return []
    added = [name for name, _ in fresh if name not in old]
    if len(added) > 1:  # new entries in their order (the bytes check wants the same order)
        tail = list(new)[len(new) - len(added) :]
        if set(tail) != set(added):
            return None
        fresh = {(name, new[name]) for name, _ in fresh if name in old}
        changed = {name: [value] for name, value in fresh}
        changed.update((name, [new[name]]) for name in tail)
    else:
        changed = {name: [value] for name, value in fresh}
    return [_DICT, changed, list(gone)] if gone else [_DICT, changed]


def apply_patch(old: Any, p: list[Any]) -> Any:
    """The value ``p`` makes of ``old``, changing ``old`` in place where it can (a replay's
    objects are freshly decoded: nothing else holds them)."""
    if len(p) == 1:
        return p[0]
    tag = p[0]
    if tag == _DICT:
        target = old if type(old) is dict else {}
        for name, sub in p[1].items():
            target[name] = apply_patch(target.get(name), sub)
        if len(p) > 2:
            for name in p[2]:
                target.pop(name, None)
        return target
    if tag == _LIST:
        items = old if type(old) is list else []
        if len(p) > 3:
            del items[: p[3]]
        del items[p[1] :]
        items.extend(p[2])
        return items
    raise ValueError(f"unknown patch {tag!r}")
