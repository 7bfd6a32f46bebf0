"""project_history as the run's state holds it, and its markdown (pure functions).

The history is a dict ``{str(iteration): {iteration, title, milestone, lines}}`` kept with
the :data:`HISTORY` reducer: a stage's checkpoint holds only the entries it changed (its
:func:`delta`), or, for a stage that adds a line to an entry (most of them), the entry's key
and the line; ``project_history.md`` is rendered from the whole of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.errors import InvalidStateValue
from tether.state.reducers import replayable

__all__ = [
    "HISTORY",
    "History",
    "add_history",
    "add_line",
    "add_lines",
    "delta",
    "history_of",
    "last_decision",
    "mark_milestone",
    "render_history",
]

History = dict[str, dict[str, Any]]
"""project_history in the state: {str(iteration): {iteration, title, milestone, lines}}, kept
with a dict-merge reducer so that a stage's checkpoint holds only the entries it changed."""


def history_of(state: Mapping[str, Any], update: Mapping[str, Any] | None = None) -> History:
    """The whole history: the state's entries with those of a pending ``update`` over them."""
    history = state.get("history") or {}
    change = (update or {}).get("history")
    return add_lines(history, change) if change else dict(history)


def delta(state: Mapping[str, Any], history: History) -> History | list[Any]:
    """What a stage writes for ``history``: the entries that differ from the state's, or
    ``[key, line, ...]`` when all it changed is lines added to one entry (see :func:`add_lines`)."""
    old = state.get("history") or {}
    changed = {k: v for k, v in history.items() if old.get(k) != v}
    if len(changed) != 1:
        return changed
    ((key, entry),) = changed.items()
    before = old.get(key)
    if not isinstance(before, Mapping) or not isinstance(entry.get("lines"), list):
        return changed
    lines, n = entry["lines"], len(before.get("lines") or [])
    if len(lines) > n and {**before, "lines": lines} == entry and lines[:n] == before.get("lines"):
        return [key, *lines[n:]]
    return changed


def add_lines(old: Any, update: Any) -> History:
    """``history``'s reducer: a dict merges entries (new or changed ones); ``[key, line, ...]``
    adds lines to the entry ``key``, so a stage that notes one line stores the line, not the
    entry's other lines again nor the names of its fields."""
    history = dict(old) if type(old) is dict else {}
    if type(update) is dict:
        history.update(update)
        return history
    if type(update) is list and len(update) >= 2 and type(update[0]) is str:
        entry = history.get(update[0])
        if type(entry) is dict:
            history[update[0]] = {**entry, "lines": [*(entry.get("lines") or []), *update[1:]]}
            return history
    raise InvalidStateValue(f"history takes entries or [key, line, ...] of an entry it has, got {update!r}")


HISTORY = replayable("tether.orchestrator.history:lines", add_lines)


def add_history(
    history: History, iteration: int, title: str, lines: list[str], milestone: str = ""
) -> History:
    entry = {"iteration": iteration, "title": title, "milestone": milestone, "lines": list(lines)}
    return {**history, str(iteration): entry}


def add_line(history: History, line: str) -> History:
    if not history:
        return {"0": {"iteration": 0, "title": "setup", "milestone": "", "lines": [line]}}
    key = max(history, key=int)
    last = history[key]
    return {**history, key: {**last, "lines": [*last["lines"], line]}}


def mark_milestone(history: History, iteration: int, reason: str) -> History:
    entry = history.get(str(iteration))
    if entry is None or entry.get("milestone"):
        return history
    return {**history, str(iteration): {**entry, "milestone": reason}}


def last_decision(state: Mapping[str, Any]) -> dict[str, str]:
    """MAIN's last decision, ``{"next_agent", "reason"}`` (empty before the first).

    Read from the history entry MAIN wrote for it (``next_agent: …``, ``reason: …``) rather
    than kept as a state key of its own: a key rewritten with a new reason every round would
    store each reason twice. A run written before that still holds ``last_decision``."""
    kept = state.get("last_decision")
    if isinstance(kept, Mapping) and kept:
        return {str(k): str(v) for k, v in kept.items()}
    history = state.get("history") or {}
    for key in sorted(history, key=int, reverse=True):
        lines = (history[key] or {}).get("lines") or []
        if lines and str(lines[0]).startswith("next_agent: "):
            reason = next((str(x)[8:] for x in lines[1:] if str(x).startswith("reason: ")), "")
            return {"next_agent": str(lines[0])[12:], "reason": reason}
    return {}


def render_history(history: History) -> str:
    blocks = []
    for key in sorted(history, key=int):
        h = history[key]
        mark = f"[MILESTONE] {h['milestone']} - " if h.get("milestone") else ""
        body = "\n".join(f"- {line}" for line in h["lines"])
        blocks.append(f"## Iteration {h['iteration']}: {mark}{h['title']}\n{body}")
    return "# project_history\n\n" + "\n\n".join(blocks) + "\n"
