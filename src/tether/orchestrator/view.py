"""What the dashboard's orchestrator view shows, read from a run's state and its blackboard.

:func:`orchestration_view` gives the dev plan with each item's state, each role's latest
report as a summary (verdict, blockers, key changes, evidence), the sub-loop's round and
result, the milestones of the project history and MAIN's last decision. The full text of a
report is read on demand (:func:`report_text`). Reports live on the blackboard, in the
run's working directory: when it is not on this machine (a run executed elsewhere), the
summary falls back to what the state holds, and the full text is unavailable.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.context.reports import read_report_summary
from tether.errors import BlackboardPathError
from tether.orchestrator.blackboard import ROLES, Blackboard
from tether.orchestrator.prompts import plan_counts

__all__ = ["is_orchestration", "orchestration_view", "report_text"]


def is_orchestration(state: Mapping[str, Any]) -> bool:
    """An orchestrator run's state (the keys :func:`~tether.orchestrator.engine.initial_state` sets)."""
    return all(k in state for k in ("task", "dev_plan", "latest", "subloop", "workdir"))


def _board(state: Mapping[str, Any]) -> Blackboard | None:
    workdir = Path(str(state.get("workdir") or ""))
    if not str(state.get("workdir") or "") or not workdir.is_dir():
        return None
    return Blackboard(workdir)


def _report(board: Blackboard | None, role: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "role": role,
        "iteration": int(entry.get("iteration") or 0),
        "path": str(entry.get("path") or ""),
        "verdict": str(entry.get("verdict") or "UNKNOWN"),
        "blockers": list(entry.get("blockers") or []),
        "subloop": int(entry.get("subloop") or 0),
        "keyChanges": [],
        "evidence": "",
        "available": False,
    }
    if board is None or not out["path"]:
        return out
    try:
        path = board.path(out["path"])
    except BlackboardPathError:
        return out
    if not path.is_file():
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
    board = _board(state)
    plan = [
        {"id": str(t.get("id", "")), "title": str(t.get("title", "")), "status": str(t.get("status", "TODO"))}
        for t in state.get("dev_plan") or []
    ]
    latest = state.get("latest") or {}
    reports = [_report(board, role, latest[role]) for role in ROLES if isinstance(latest.get(role), Mapping)]
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
        "lastStage": str(state.get("last_stage") or ""),
        "lastDecision": dict(state.get("last_decision") or {}),
        "pendingQuestion": state.get("pending_question"),
        "finishAttempts": int(state.get("finish_attempts") or 0),
        "plan": plan,
        "planCounts": plan_counts(plan),
        "reports": reports,
        "subloop": subloop,
        "subloopResult": dict(state.get("subloop_result") or {}) or None,
        "milestones": milestones,
        "workdirAvailable": board is not None,
    }


def report_text(state: Mapping[str, Any], role: str) -> dict[str, Any] | None:
    """The full latest report of ``role`` (None when the run has none or it is not here)."""
    role = role.upper()
    entry = (state.get("latest") or {}).get(role) if is_orchestration(state) else None
    board = _board(state)
    if role not in ROLES or not isinstance(entry, Mapping) or board is None:
        return None
    try:
        path = board.path(str(entry.get("path") or ""))
    except BlackboardPathError:
        return None
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    return {
        "role": role,
        "iteration": int(entry.get("iteration") or 0),
        "path": str(entry["path"]),
        "text": text,
    }
