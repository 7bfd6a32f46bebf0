"""Prompt records: what each model call was sent, stored as a delta against the call before.

"What exactly did the model see at iteration 37?" is the first question when a long run
goes wrong. A full copy of every prompt would grow a run's storage quadratically, so each
call stores only how its message list differs from the previous call's: ranges copied from
the previous list (``[start, count]``) and the messages that are new (a dict with the
message and the context item it came from). The model, the settings, the tokens per layer
and the reply ride along. :func:`rebuild` replays the records to get back the exact
messages of any call; :func:`diff_prompts` says what entered, left or was compressed
between two calls.

Records are plain JSON-like dicts, appended to a run's state (``prompt_log``), so they are
checkpointed, rolled back and resumed with everything else. Nothing here does I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.errors import ContextError

__all__ = [
    "PROMPT_LOG_KEY",
    "RECORD_VERSION",
    "PromptCall",
    "PromptDiff",
    "PromptRecorder",
    "delta_ops",
    "diff_prompts",
    "find_record",
    "make_record",
    "rebuild",
    "rebuild_all",
]

PROMPT_LOG_KEY = "prompt_log"
"""The state key the agent loop appends its records to (``append`` reducer)."""
RECORD_VERSION = 1


@dataclass(frozen=True, slots=True)
class PromptCall:
    """One call rebuilt from the records: the exact messages plus where each came from."""

    index: int
    """Position of the call in the run's record list (0-based)."""
    record: Mapping[str, Any]
    """The stored record (without its delta ops it says model, settings, layers, reply)."""
    messages: list[dict[str, Any]]
    """The exact messages sent, as the model received them."""
    meta: list[dict[str, Any]]
    """Per message: ``id``, ``layer``, ``kind``, ``tokens`` of the context item behind it."""

    @property
    def iteration(self) -> int | None:
        value = self.record.get("iteration")
        return int(value) if value is not None else None

    def summary(self) -> dict[str, Any]:
        """The record without its delta: what a listing shows."""
        return {k: v for k, v in self.record.items() if k != "ops"} | {"messages": len(self.messages)}


@dataclass(frozen=True, slots=True)
class PromptDiff:
    """What changed between two calls' prompts, by context item."""

    entered: list[dict[str, Any]] = field(default_factory=list)
    """Items in the later prompt only."""
    left: list[dict[str, Any]] = field(default_factory=list)
    """Items dropped without a summary taking their place."""
    compressed: list[dict[str, Any]] = field(default_factory=list)
    """Items dropped while a summary entered or changed: folded into it."""
    changed: list[dict[str, Any]] = field(default_factory=list)
    """Items in both whose text changed (a reminder refreshed, an output trimmed)."""
    kept: int = 0
    """Items in both, unchanged."""
    tokens_before: int = 0
    tokens_after: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "entered": self.entered,
            "left": self.left,
            "compressed": self.compressed,
            "changed": self.changed,
            "kept": self.kept,
            "tokensBefore": self.tokens_before,
            "tokensAfter": self.tokens_after,
        }


def _key(message: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    return json.dumps([message, meta.get("id"), meta.get("layer")], sort_keys=True, ensure_ascii=False)


def delta_ops(
    previous: Sequence[tuple[str, Any]],
    current: Sequence[tuple[str, dict[str, Any]]],
) -> list[Any]:
    """The ops that turn ``previous`` into ``current``: ``[start, count]`` runs copied from
    ``previous``, and each new entry as a dict.

    Both sequences hold ``(key, entry)`` pairs; equal keys mean equal entries. Linear in
    the lengths: each current entry is matched to the first unused previous one with its
    key, and consecutive matches merge into one run.
    """
    where: dict[str, list[int]] = {}
    for i, (key, _entry) in enumerate(previous):
        where.setdefault(key, []).append(i)
    ops: list[Any] = []
    run_start = run_len = -1
    for key, entry in current:
        slots = where.get(key)
        if slots:
            i = slots.pop(0)
            if run_len > 0 and run_start + run_len == i:
                run_len += 1
                continue
            if run_len > 0:
                ops.append([run_start, run_len])
            run_start, run_len = i, 1
            continue
        if run_len > 0:
            ops.append([run_start, run_len])
            run_start = run_len = -1
        ops.append(entry)
    if run_len > 0:
        ops.append([run_start, run_len])
    return ops


def _entry(message: dict[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
    return {"m": message, **{k: v for k, v in meta.items() if v is not None}}


def make_record(
    previous: Sequence[tuple[str, Any]],
    messages: Sequence[dict[str, Any]],
    meta: Sequence[Mapping[str, Any]],
    **fields: Any,
) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """A record of a call that sent ``messages`` (``meta`` per message), against the
    previous call's keyed entries; returns the record and this call's keyed entries (the
    ``previous`` of the next call).

    ``fields`` are stored as given (iteration, model, settings, layers, reply, usage, …).
    """
    if len(messages) != len(meta):
        raise ContextError(f"{len(messages)} messages but {len(meta)} meta entries")
    current = [(_key(m, mt), _entry(m, mt)) for m, mt in zip(messages, meta, strict=True)]
    record = {"v": RECORD_VERSION, **fields, "count": len(current), "ops": delta_ops(previous, current)}
    return record, current


def _apply(previous: Sequence[Mapping[str, Any]], record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for op in record.get("ops") or ():
        if isinstance(op, list):
            start, count = int(op[0]), int(op[1])
            if start < 0 or start + count > len(previous):
                raise ContextError(
                    f"prompt record {record.get('iteration')}: copy {op} outside the previous prompt"
                )
            out.extend(previous[start : start + count])
        elif isinstance(op, Mapping):
            out.append(op)
        else:
            raise ContextError(f"prompt record {record.get('iteration')}: unknown op {op!r}")
    if "count" in record and len(out) != int(record["count"]):
        where = f"prompt record {record.get('iteration')}"
        raise ContextError(f"{where}: rebuilt {len(out)} messages, recorded {record['count']}")
    return out


def _call(index: int, record: Mapping[str, Any], entries: Sequence[Mapping[str, Any]]) -> PromptCall:
    messages = [json.loads(json.dumps(e["m"])) for e in entries]  # the caller may edit them freely
    meta = [{k: v for k, v in e.items() if k != "m"} for e in entries]
    return PromptCall(index=index, record=record, messages=messages, meta=meta)


def rebuild(records: Sequence[Mapping[str, Any]], index: int) -> PromptCall:
    """The call at position ``index`` of ``records`` (negative counts from the end).

    Replays the deltas from the first record: a hot path (see benchmarks/bench_prompts.py,
    "rebuild"), which copies references only and decodes nothing.
    """
    if not records:
        raise ContextError("this run has no prompt records (it made no model call through the agent loop)")
    if index < 0:
        index += len(records)
    if not 0 <= index < len(records):
        raise ContextError(f"no model call #{index}: the run recorded {len(records)}")
    entries: list[Mapping[str, Any]] = []
    for record in records[: index + 1]:
        entries = _apply(entries, record)
    return _call(index, records[index], entries)


def rebuild_all(records: Sequence[Mapping[str, Any]]) -> Iterable[PromptCall]:
    """Every call in order, rebuilding each from the one before (one pass)."""
    entries: list[Mapping[str, Any]] = []
    for i, record in enumerate(records):
        entries = _apply(entries, record)
        yield _call(i, record, entries)


def find_record(records: Sequence[Mapping[str, Any]], iteration: int) -> int:
    """Position of the last record of ``iteration`` (a retried call records once more)."""
    for i in range(len(records) - 1, -1, -1):
        if records[i].get("iteration") == iteration:
            return i
    have = sorted({int(r["iteration"]) for r in records if r.get("iteration") is not None})
    shown = f"{have[0]}–{have[-1]}" if have else "none"
    raise ContextError(f"no model call recorded at iteration {iteration} (recorded iterations: {shown})")


def _described(meta: Mapping[str, Any], message: Mapping[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    flat = " ".join(str(text or "").split())
    return {
        "id": meta.get("id"),
        "kind": meta.get("kind"),
        "layer": meta.get("layer"),
        "tokens": meta.get("tokens"),
        "preview": flat[:160] + ("…" if len(flat) > 160 else ""),
    }


def _summary_ids(call: PromptCall) -> dict[str, str]:
    return {
        str(m.get("id")): json.dumps(msg, sort_keys=True)
        for m, msg in zip(call.meta, call.messages, strict=True)
        if m.get("kind") == "summary"
    }


def diff_prompts(before: PromptCall, after: PromptCall) -> PromptDiff:
    """What entered, left, was compressed or changed between two calls, by context item.

    An item that left while a summary entered or changed counts as compressed (folded into
    the summary); otherwise it simply left (trimmed, or a reminder cleared).
    """
    old = {str(m.get("id")): (m, msg) for m, msg in zip(before.meta, before.messages, strict=True)}
    new = {str(m.get("id")): (m, msg) for m, msg in zip(after.meta, after.messages, strict=True)}
    old_summaries, new_summaries = _summary_ids(before), _summary_ids(after)
    summarised = any(old_summaries.get(i) != text for i, text in new_summaries.items())
    diff = PromptDiff(
        tokens_before=int(before.record.get("tokens") or 0), tokens_after=int(after.record.get("tokens") or 0)
    )
    kept = 0
    for item_id, (meta, msg) in new.items():
        if item_id not in old:
            diff.entered.append(_described(meta, msg))
        elif old[item_id][1] != msg:
            diff.changed.append(_described(meta, msg))
        else:
            kept += 1
    for item_id, (meta, msg) in old.items():
        if item_id not in new:
            (diff.compressed if summarised and meta.get("kind") != "summary" else diff.left).append(
                _described(meta, msg)
            )
    return PromptDiff(
        entered=diff.entered,
        left=diff.left,
        compressed=diff.compressed,
        changed=diff.changed,
        kept=kept,
        tokens_before=diff.tokens_before,
        tokens_after=diff.tokens_after,
    )


class PromptRecorder:
    """Keeps each run's last prompt in memory so that a record costs a diff, not a replay.

    After a resume in a new process, or a rollback that removed records, the cached prompt
    no longer matches the run's record count and is rebuilt once from the records.
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, list[tuple[str, dict[str, Any]]]]] = {}

    def record(
        self,
        run_id: str,
        records: Sequence[Mapping[str, Any]],
        messages: Sequence[dict[str, Any]],
        meta: Sequence[Mapping[str, Any]],
        **fields: Any,
    ) -> dict[str, Any]:
        """The record of a call that sent ``messages``, after ``records`` (the run's so far)."""
        cached = self._last.get(run_id)
        if cached is not None and cached[0] == len(records):
            previous = cached[1]
        elif records:
            call = rebuild(records, -1)
            previous = [(_key(m, mt), _entry(m, mt)) for m, mt in zip(call.messages, call.meta, strict=True)]
        else:
            previous = []
        record, current = make_record(previous, messages, meta, **fields)
        self._last[run_id] = (len(records) + 1, current)
        return record

    def forget(self, run_id: str) -> None:
        self._last.pop(run_id, None)
