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
``cp``           the checkpoint without its channel values (id, ts, versions...).
``ix``           one entry per checkpoint of the namespace, in the order written:
                 ``[checkpoint_id, version, parent_id, meta_type, meta_bytes]``.
``w``            pending writes of the latest checkpoint (and of ones not put yet), a
                 list of ``[cid, task_id, idx, channel, type, bytes, task_path]``, unique
                 by ``cid|task_id|idx``. Reads pick a checkpoint's writes by its id. Writes
                 may wait for the next put and be stored in its commit, so the writes of
                 checkpoint X are read from the version of the put after it; a put drops
                 writes older than its parent's once there are enough (32 or 32 KiB).
``ow``           writes that arrived for an older checkpoint after a newer one existed
                 (replaying from an old checkpoint): ``{cid: {key: entry}}``.
``r``            the LangGraph run id of the latest checkpoint (for ``delete_for_runs``).
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Mapping, Sequence
from typing import Any

from tether.state.reducers import ReducerRegistry

__all__ = [
    "EMPTY",
    "LIST",
    "REDUCERS",
    "VALUE",
    "chunks_extend",
    "decode_channels",
    "extends",
    "ns_key",
    "run_index_key",
    "sort_writes",
    "thread_index_key",
]

VALUE, LIST, EMPTY = 0, 1, 2

REDUCERS = (
    ReducerRegistry()
    .register("c:*", "append")
    .register("ix", "append")
    .register("k", "append")
    .register("m", "merge")
    .register("w", "append")
    .register("ow", "merge")
)

_MAX_KEY = 180  # MySQL keys a run id in VARCHAR(191)


def _key(prefix: str, *parts: str) -> str:
    raw = prefix + ":" + "".join(f"{len(p)}:{p}" for p in parts)
    if len(raw) <= _MAX_KEY:
        return raw
    return prefix + "#" + hashlib.sha256(raw.encode()).hexdigest()


def ns_key(thread_id: str, ns: str, prefix: str = "lg") -> str:
    """The tether run id of one namespace of a thread (unambiguous; hashed when long)."""
    return _key(prefix, thread_id, ns)


def thread_index_key(thread_id: str, prefix: str = "lg") -> str:
    """The run that lists a thread's namespaces."""
    return _key(prefix + "t", thread_id)


def run_index_key(run_id: str, prefix: str = "lg") -> str:
    """The run that lists the namespaces holding checkpoints of one LangGraph run id."""
    return _key(prefix + "r", run_id)


def extends(new: list[Any], old: Sequence[Any], *, equal: bool = False) -> bool:
    """Whether ``new`` starts with the items of ``old``: the same objects (what LangGraph's
    reducers produce), or with ``equal``, equal ones (values decoded afresh, as an
    import reads them)."""
    n = len(old)
    if len(new) < n:
        return False
    if all(map(operator.is_, new, old)):  # C-speed: stops at the shorter, old
        return True
    return equal and new[:n] == list(old)


def chunks_extend(new: list[Any], old: list[Any]) -> bool:
    """Whether a chunk list starts with another (bytes compared): for copying runs."""
    return len(new) >= len(old) and new[: len(old)] == old


def decode_channels(state: Any, versions: Mapping[str, Any] | None, loads: Any) -> dict[str, Any]:
    """Channel values stored in ``state``; only those whose stored version is the one in
    ``versions`` when given (a checkpoint's ``channel_versions``). ``state``: a dict or an
    ExecutionContext (anything with ``get``)."""
    meta: Mapping[str, Any] = state.get("m") or {}
    out: dict[str, Any] = {}
    for ch, ent in meta.items():
        if ent is None or ent[1] == EMPTY:
            continue
        if versions is not None and (ch not in versions or versions[ch] != ent[0]):
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


def sort_writes(entries: Any) -> list[list[Any]]:
    """Pending writes in LangGraph's apply order: ``(task_path, task_id, idx)``."""
    return sorted(entries, key=lambda e: (e[6], e[1], e[2]))
