"""How a LangGraph thread is laid out in tether runs (pure: no I/O).

One tether run per ``(thread_id, checkpoint_ns)``; each of its versions is one event of
that namespace, in order: a checkpoint (``put``) or a batch of pending writes
(``put_writes``). The run's state at a version holds everything LangGraph asks for at
that point:

``c:<channel>``  the channel's value as a list of *chunks*, each ``[type, bytes]`` from
                 the saver's serializer. A list value is the concatenation of its chunks,
                 so a channel that grew by appending (``add_messages``, ``operator.add``)
                 stores only the new items, as one more chunk (an ``append`` op): a step
                 costs the bytes it added, not the whole list again.
``m``            ``{channel: [version, kind]}``: which channel version the stored value
                 is, and whether it is a single value, a list of chunks, or empty.
``cp``           the checkpoint without its channel values and versions (those are in ``m``).
``ix``           one entry per checkpoint of the namespace, in the order written:
                 ``[checkpoint_id, version, parent_id, meta_type, meta_bytes]``.
``w``            pending writes of the latest checkpoint (and of ones not put yet), a
                 list of ``[cid, task_id, idx, channel, type, bytes, task_path]``, unique
                 by ``cid|task_id|idx``; a write whose bytes are a chunk its put appended
                 to the channel is ``[..., channel, "@c", chunk_index, ...]`` instead (a
                 message is then stored once, not twice). Reads pick a checkpoint's writes
                 by its id. Writes
                 may wait for the next put and be stored in its commit, so the writes of
                 checkpoint X are read from the version of the put after it; a put drops
                 writes older than its parent's once there are enough (32 or 32 KiB).
``ow``           writes that arrived for an older checkpoint after a newer one existed
                 (replaying from an old checkpoint): ``{cid: {key: entry}}``.
``p``            only in versions stored by earlier savers, which noted what each put
                 changed, as it was before: ``{"id": previous checkpoint id, "cp": its
                 record, "m": its entries of the channels changed, "n": {channel: chunk
                 count} for appends, "c": {channel: chunks} for values replaced}``; such a
                 checkpoint is read from that one version. A put now leaves the note out
                 (and clears an old one): it held a copy of the previous record, stored
                 again with every step, which every later seal and cold read paid for,
                 while reading a checkpoint that is not the latest takes two loads without
                 it (the next put's version for its writes, and its own).
``r``            the LangGraph run id of the latest checkpoint (for ``delete_for_runs``).
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Mapping, Sequence
from typing import Any

from tether.errors import ConfigError
from tether.state.reducers import ReducerRegistry
from tether.state.values import RUN_ID_MAX_LENGTH

__all__ = [
    "EMPTY",
    "LIST",
    "REF",
    "REDUCERS",
    "VALUE",
    "before_put",
    "chunks_extend",
    "decode_channels",
    "extends",
    "list_prefix",
    "ns_key",
    "record_of",
    "resolve_writes",
    "run_index_key",
    "scratch_key",
    "sort_writes",
    "thread_index_key",
    "check_prefix",
]

VALUE, LIST, EMPTY = 0, 1, 2
REF = "@c"
"""The type of a pending write stored as a reference to a chunk of its channel."""


REDUCERS = (
    ReducerRegistry()
    .register("c:*", "append")
    .register("ix", "append")
    .register("k", "append")
    .register("m", "merge")
    .register("w", "append")
    .register("ow", "merge")
)

_MAX_KEY = RUN_ID_MAX_LENGTH
"""A key longer than a run id may be is hashed: a thread id of any length, nested under
any number of subgraph namespaces, maps to a run id every backend accepts."""
_MAX_PREFIX = 32
_SCRATCH = "~rw"


def check_prefix(prefix: str) -> None:
    """Raise :class:`ConfigError` unless every key made with ``prefix`` fits a run id,
    hashed keys and scratch runs included."""
    if type(prefix) is not str or not prefix or len(prefix) > _MAX_PREFIX or "\x00" in prefix:
        raise ConfigError(
            f"TetherSaver prefix must be 1 to {_MAX_PREFIX} characters without NUL, got {prefix!r}: "
            "run ids start with it, and a hashed key must still fit a run id"
        )


def _key(prefix: str, *parts: str) -> str:
    raw = prefix + ":" + "".join(f"{len(p)}:{p}" for p in parts)
    if len(raw) <= _MAX_KEY and "\x00" not in raw:  # no backend keeps a NUL in a key
        return raw
    return prefix + "#" + hashlib.sha256(raw.encode()).hexdigest()


def ns_key(thread_id: str, ns: str, prefix: str = "lg") -> str:
    """The tether run id of one namespace of a thread (unambiguous; hashed when long)."""
    return _key(prefix, thread_id, ns)


def scratch_key(key: str, prefix: str = "lg") -> str:
    """The scratch run ``delete_for_runs`` rebuilds namespace ``key`` in (hashed when long)."""
    raw = key + _SCRATCH
    if len(raw) <= _MAX_KEY:  # (``key`` came from ``_key``: no NUL)
        return raw
    return prefix + "#" + hashlib.sha256(raw.encode()).hexdigest() + _SCRATCH


def thread_index_key(thread_id: str, prefix: str = "lg") -> str:
    """The run that lists a thread's namespaces."""
    return _key(prefix + "t", thread_id)


def run_index_key(run_id: str, prefix: str = "lg") -> str:
    """The run that lists the namespaces holding checkpoints of one LangGraph run id."""
    return _key(prefix + "r", run_id)


def extends(new: list[Any], old: Sequence[Any], *, equal: bool = False) -> bool:
    """Whether ``new`` starts with the items of ``old``: the same objects (what LangGraph's
    reducers produce), or with ``equal``, equal ones (values decoded afresh, as an
    import reads them).

    Without ``equal``, the first and the last item must be the very objects, and the list
    comparison in C does the rest: it takes an item that is the same object as equal without
    calling its ``__eq__``, a pointer comparison, where a Python loop of ``is`` cost a call
    per item (a long chat is thousands of messages, compared at every put). An item between
    them that is another object but equal (a message replaced by an equal one) counts as
    kept; one whose ``==`` fails (an array's) makes the items compared one by one by identity."""
    n = len(old)
    if len(new) < n:
        return False
    if not n:
        return True
    prefix = old if type(old) is list else list(old)
    if equal:
        return new[:n] == prefix
    if new[0] is not prefix[0] or new[n - 1] is not prefix[n - 1]:
        return False
    try:
        return new[:n] == prefix
    except Exception:  # an item whose ``==`` is not a truth value
        return all(map(operator.is_, new, prefix))


def chunks_extend(new: list[Any], old: list[Any]) -> bool:
    """Whether a chunk list starts with another (bytes compared): for copying runs."""
    return len(new) >= len(old) and new[: len(old)] == old


def decode_channels(
    state: Any, versions: Mapping[str, Any] | None, loads: Any, known: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Channel values stored in ``state``; only those whose stored version is the one in
    ``versions`` when given (a checkpoint's ``channel_versions``). ``state``: a dict or an
    ExecutionContext (anything with ``get``). ``known``: values already at hand, by channel
    (not decoded again)."""
    meta: Mapping[str, Any] = state.get("m") or {}
    out: dict[str, Any] = {}
    for ch, ent in meta.items():
        if ent is None or ent[1] == EMPTY:
            continue
        if versions is not None and (ch not in versions or versions[ch] != ent[0]):
            continue
        if known is not None and ch in known:
            out[ch] = known[ch]
            continue
        chunks = state.get("c:" + ch) or []
        if ent[1] == LIST:
            value: list[Any] = []
            for t, b in chunks:
                value.extend(loads((t, b)))
            out[ch] = value
        elif chunks:
            t, b = chunks[0]
            out[ch] = loads((t, b))
    return out


def _items_in(chunk: Sequence[Any]) -> int | None:
    """How many items a list chunk holds, from its msgpack array header (no decoding);
    None for another serializer's bytes."""
    t, b = chunk
    if t != "msgpack" or not b:
        return None
    head = b[0]
    if 0x90 <= head <= 0x9F:
        return int(head & 0x0F)
    if head == 0xDC:
        return int.from_bytes(b[1:3], "big")
    if head == 0xDD:
        return int.from_bytes(b[1:5], "big")
    return None


def list_prefix(chunks: Sequence[Any], latest: Sequence[Any], items: Sequence[Any]) -> list[Any] | None:
    """The items of list ``chunks`` without decoding them, when they are the first chunks of
    the latest value (``latest``, whose items are ``items``): a list grown by appends is
    a prefix of what it became. None when that cannot be shown from the bytes."""
    k = len(chunks)
    if k > len(latest) or list(chunks) != list(latest[:k]):
        return None
    counts = [_items_in(c) for c in latest]
    if None in counts or sum(counts) != len(items):  # type: ignore[arg-type]
        return None
    return list(items[: sum(counts[:k])])  # type: ignore[arg-type]


def sort_writes(entries: Any) -> list[list[Any]]:
    """Pending writes in LangGraph's apply order: ``(task_path, task_id, idx)``."""
    return sorted(entries, key=lambda e: (e[6], e[1], e[2]))


def resolve_writes(entries: Sequence[list[Any]], state: Any, channel: str | None = None) -> list[list[Any]]:
    """``entries`` with the writes stored as a chunk reference (of ``channel``, or any) made
    whole again from the chunks in ``state`` (the state they were read with)."""
    out = []
    for e in entries:
        if e[4] == REF and (channel is None or e[3] == channel):
            t, b = state.get("c:" + e[3])[e[5]]
            e = [*e[:4], t, b, e[6]]
        out.append(e)
    return out


def record_of(state: Any, loads: Any) -> dict[str, Any]:
    """The checkpoint record stored in ``state``, its channel versions put back from ``m``
    (a record stored before they were left out still has its own)."""
    record: dict[str, Any] = loads(tuple(state.get("cp")))
    if "channel_versions" not in record:
        meta: Mapping[str, Any] = state.get("m") or {}
        record["channel_versions"] = {ch: ent[0] for ch, ent in meta.items() if ent is not None}
    return record


def before_put(state: Any, cid: str) -> dict[str, Any] | None:
    """The channels (``m``, ``c:*``) and record (``cp``) of checkpoint ``cid`` rebuilt from
    the state of the put that followed it (see ``p``); None when that put kept no such note."""
    p = state.get("p")
    if not p or p.get("id") != cid:
        return None
    meta = {**(state.get("m") or {}), **p["m"]}
    out: dict[str, Any] = {"m": meta, "cp": p["cp"]}
    for ch in meta:
        key = "c:" + ch
        if ch in p["c"]:
            out[key] = p["c"][ch]
        elif ch in p["n"]:
            out[key] = (state.get(key) or [])[: p["n"][ch]]
        elif key in state:
            out[key] = state.get(key)
    return out
