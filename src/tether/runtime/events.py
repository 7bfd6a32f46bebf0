"""Events a run emits: the CLI renders them, the server streams them, tests collect them.

Rollback actions and decisions are also appended to the run's event log (in its state,
under the reserved ``_tether`` key), so they are checkpointed with the run.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Event"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One thing that happened in a run."""

    kind: str
    """run_started, run_resumed, step_started, step_retry, step_done, step_failed,
    rollback_action, rollback_failed, state_restored, decision, replanned, phase_done,
    paused, completed, cancelled, failed."""
    run_id: str
    step: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    ts: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat())

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "step": self.step, "detail": self.detail, "ts": self.ts}
