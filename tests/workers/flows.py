"""Workflows the worker tests run in `tether worker` subprocesses (imported by name).

Each step appends ``RUN STEP`` to the file named by the input ``trace`` when it *starts*,
so a test counts how many times a step really ran, apart from what the store recorded.
``delay`` (or ``delay_<step>``) makes a step last; ``crash`` names a step that kills its
own process every time it runs.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

from tether.runtime import Step, StepContext, Workflow

STEPS = ["s1", "s2", "s3", "s4", "s5"]


def _step(name: str) -> Any:
    async def fn(sc: StepContext) -> dict[str, Any]:
        trace = sc.get("trace")
        if trace:
            with open(trace, "a", encoding="utf-8") as f:
                f.write(f"{sc.run_id} {name} {time.time():.3f} {os.getpid()}\n")
        if sc.get("crash") == name:
            os.kill(os.getpid(), signal.SIGKILL)
        delay = float(sc.get(f"delay_{name}", sc.get("delay", 0)) or 0)
        if delay:
            await asyncio.sleep(delay)
        return {f"{name}_output": f"{name} of {sc.get('label', '-')}", "total": int(sc.get("total", 0)) + 1}

    return fn


def five() -> Workflow:
    return Workflow([Step(id=s, fn=_step(s)) for s in STEPS], name="five")
