"""The difference between two states, as a reviewer wants to read it.

Keys added, removed and changed; a list whose old value is a prefix of its new one
(messages, history: the append reducers' work) shows only what was appended, and a
dict shows which of its keys changed. Without ``before`` (a patch, what a client that
holds the old state needs to make the new one) the old values are left out.
"""

from __future__ import annotations

from typing import Any

__all__ = ["diff_states", "diff_value"]


def diff_states(before: dict[str, Any], after: dict[str, Any], *, with_before: bool = True) -> dict[str, Any]:
    added = {k: after[k] for k in after.keys() - before.keys()}
    removed = sorted(before.keys() - after.keys())
    changed: dict[str, Any] = {}
    for key in sorted(before.keys() & after.keys()):
        old, new = before[key], after[key]
        if old == new:
            continue
        changed[key] = diff_value(old, new, with_before=with_before)
    return {"added": dict(sorted(added.items())), "removed": removed, "changed": changed}


def diff_value(old: Any, new: Any, *, with_before: bool = True) -> dict[str, Any]:
    """One value's change: ``append`` (a list that grew at its end, equal lists too),
    ``merge`` (a dict's keys) or ``set``."""
    if isinstance(old, list) and isinstance(new, list) and len(new) >= len(old) and new[: len(old)] == old:
        return {"op": "append", "appended": new[len(old) :]}
    if isinstance(old, dict) and isinstance(new, dict):
        return {
            "op": "merge",
            "added": {k: new[k] for k in sorted(new.keys() - old.keys())},
            "removed": sorted(old.keys() - new.keys()),
            "changed": {
                k: {"before": old[k], "after": new[k]} if with_before else {"after": new[k]}
                for k in sorted(old.keys() & new.keys())
                if old[k] != new[k]
            },
        }
    return {"op": "set", "before": old, "after": new} if with_before else {"op": "set", "after": new}
