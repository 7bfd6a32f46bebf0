"""An agent run's JSON log (the deployment agent's record of every step), read from the store."""

from __future__ import annotations

from typing import Any

from tether.state import RunStatus
from tether.stores.base import CheckpointStore

__all__ = ["run_log"]


async def run_log(store: CheckpointStore, run_id: str, **header: object) -> dict[str, Any]:
    """The run's log: ``header`` fields, its status, and its commands, questions and
    answers in iteration order ({} for an unknown run)."""
    cp = await store.load(run_id)
    if cp is None:
        return {}
    info = await store.get_run(run_id)
    stored = info.status if info else cp.status
    status = {RunStatus.COMPLETED: "success", RunStatus.FAILED: "failed"}.get(stored, str(stored).lower())
    steps: list[dict[str, Any]] = [
        {
            "iteration": h["iteration"],
            "timestamp": h.get("timestamp"),
            "action": "execute",
            "command": h["command"],
            "reasoning": h.get("reasoning"),
            "result": {k: h.get(k) for k in ("success", "exit_code", "stdout", "stderr")},
        }
        for h in cp.state.get("command_history", [])
    ]
    answers = {a.get("iteration"): a.get("answer") for a in cp.state.get("user_interactions", [])}
    for entry in cp.state.get("actions", []):
        entry = dict(entry)
        if entry.get("action") == "ask_user" and entry["iteration"] in answers:
            entry["answer"] = answers[entry["iteration"]]
        steps.append(entry)
    steps.sort(key=lambda e: int(e.get("iteration") or 0))  # stable: a command before its failure
    return {
        **header,
        "run_id": run_id,
        "end_time": cp.timestamp.isoformat(),
        "status": status,
        "final_output": cp.state.get("final_output"),
        "steps": steps,
        "user_interactions": cp.state.get("user_interactions", []),
    }
