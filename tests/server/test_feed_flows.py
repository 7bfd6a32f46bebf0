"""The workflow the live-view tests execute with ``tether run`` in another process (a
module of its own, light to import: no test machinery, no browser)."""

from __future__ import annotations

import time
from typing import Any

from tether.runtime import Step, StepContext, Workflow


def _sleep(sc: StepContext) -> dict[str, Any]:
    time.sleep(float(sc.state.get("delay", 0.3)))
    return {"done": sc.step.id}


def steps() -> Workflow:
    """Three steps of ``delay`` seconds (from the run's input) each."""
    return Workflow([Step(id=f"step{i}", fn=_sleep) for i in range(3)], name="feed-live")
