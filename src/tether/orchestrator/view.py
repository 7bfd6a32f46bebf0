"""What the dashboard's orchestrator view shows, read from a run's state and its blackboard.

:func:`orchestration_view` gives the dev plan with each item's state, each role's latest
report as a summary (verdict, blockers, key changes, evidence), the sub-loop's round and
result, the milestones of the project history and MAIN's last decision. The full text of a
report is read on demand (:func:`report_text`). Reports live on the blackboard, in the
run's working directory: when it is not on this machine (a run executed elsewhere), the
summary falls back to what the state holds, and the full text is unavailable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.context.reports import read_report_summary
from tether.orchestrator.blackboard import ROLES
from tether.orchestrator.history import last_decision
from tether.orchestrator.prompts import plan_counts, report_file
from tether.orchestrator.stage import last_stage

__all__ = ["is_orchestration", "orchestration_view", "report_text"]


def is_orchestration(state: Mapping[str, Any]) -> bool:
    """An orchestrator run's state (the keys :func:`~tether.orchestrator.engine.initial_state` sets)."""
    return all(k in state for k in ("task", "dev_plan", "latest", "subloop", "workdir"))


REPORT_NAME = re.compile(r"reports/report_[a-z_]+?(?:_\d+)?(?:_final|_subloop_\d+)?\.md")
"""The only files the view reads: the blackboard's reports (a state says where they are, and
a state can be edited: nothing else of the host is served)."""


def _root(state: Mapping[str, Any]) -> Path | None:
    """The run's working directory when it is an orchestrator's blackboard on this machine."""
    raw = str(state.get("workdir") or "")
    if not raw:
        return None
    root = Path(raw)
    return root.resolve() if (root / ".tether").is_dir() and (root / "reports").is_dir() else None


def _file(root: Path | None, rel: str) -> Path | None:
    """The report ``rel`` inside ``root``'s reports folder (never a path leading elsewhere)."""
    if root is None or not REPORT_NAME.fullmatch(rel):
        return None
    path = (root / rel).resolve()
    return path if path.parent == root / "reports" and path.is_file() else None


def _report(root: Path | None, role: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "role": role,
        "iteration": int(entry.get("iteration") or 0),
        "path": report_file(role, entry),
        "verdict": str(entry.get("verdict") or "UNKNOWN"),
        "blockers": list(entry.get("blockers") or []),
        "subloop": int(entry.get("subloop") or 0),
        "keyChanges": [],
        "evidence": "",
        "available": False,
    }
    path = _file(root, out["path"])
    if path is None:
        return out
    summary = read_report_summary(path, agent=role)
    out |= {
        "verdict": summary.verdict,
        "blockers": list(summary.blockers),
        "keyChanges": list(summary.key_changes),
        "evidence": summary.evidence,
        "available": True,
    }
    return out


def orchestration_view(state: Mapping[str, Any]) -> dict[str, Any]:
    """The orchestrator view of a run (``{"orchestration": False}`` for any other run)."""
    if not is_orchestration(state):
        return {"orchestration": False}
    root = _root(state)
    plan = [
        {"id": str(t.get("id", "")), "title": str(t.get("title", "")), "status": str(t.get("status", "TODO"))}
        for t in state.get("dev_plan") or []
    ]
    latest = state.get("latest") or {}
    reports = [_report(root, role, latest[role]) for role in ROLES if isinstance(latest.get(role), Mapping)]
    history = state.get("history") or {}
    milestones = [
        {
            "iteration": int(h.get("iteration", 0)),
            "title": str(h.get("title", "")),
            "milestone": h["milestone"],
        }
        for _, h in sorted(history.items(), key=lambda kv: int(kv[0]))
        if isinstance(h, Mapping) and h.get("milestone")
    ]
    sub = state.get("subloop") if isinstance(state.get("subloop"), Mapping) else None
    subloop = None
    if sub:
        keys = ("active", "iteration", "sub_iteration", "stage", "entry_reason", "exit_condition")
        subloop = {k: sub.get(k) for k in keys}
    return {
        "orchestration": True,
        "task": str(state.get("task", "")),
        "iteration": int(state.get("iteration") or 0),
        "lastStage": last_stage(state),
        "lastDecision": last_decision(state),
        "pendingQuestion": state.get("pending_question"),
        "finishAttempts": int(state.get("finish_attempts") or 0),
        "plan": plan,
        "planCounts": plan_counts(plan),
        "reports": reports,
        "subloop": subloop,
        "subloopResult": dict(state.get("subloop_result") or {}) or None,
        "milestones": milestones,
        "workdirAvailable": root is not None,
    }


def report_text(state: Mapping[str, Any], role: str) -> dict[str, Any] | None:
    """The full latest report of ``role`` (None when the run has none or it is not here)."""
    role = role.upper()
    entry = (state.get("latest") or {}).get(role) if is_orchestration(state) else None
    if role not in ROLES or not isinstance(entry, Mapping):
        return None
    path = _file(_root(state), report_file(role, entry))
    if path is None:
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    return {
        "role": role,
        "iteration": int(entry.get("iteration") or 0),
        "path": report_file(role, entry),
        "text": text,
    }
