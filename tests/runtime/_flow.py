"""A 5-step workflow run in a child process that can SIGKILL itself at a chosen point.

    python -m tests.runtime._flow URL RUN_ID start|resume SIDE_EFFECT_FILE [STEP:WHEN]

WHEN: ``start`` (the step begins: a boundary after the previous checkpoint), ``mid``
(inside the step, after its first side effect) or ``after`` (its checkpoint is saved).
Every step appends ``start:<id>`` and ``end:<id>`` to SIDE_EFFECT_FILE.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from tether.runtime import Runner, Step, StepContext, Workflow
from tether.stores import create_store

STEPS = ["fetch", "analyze", "build", "test", "deploy"]


def make_workflow(log_path: str, crash: str | None) -> Workflow:
    crash_step, _, when = (crash or "::").partition(":")

    def make(step_id: str):
        def fn(sc: StepContext) -> dict:
            if step_id == crash_step and when == "start":
                os.kill(os.getpid(), signal.SIGKILL)
            with open(log_path, "a") as f:
                f.write(f"start:{step_id}\n")
            if step_id == crash_step and when == "mid":
                os.kill(os.getpid(), signal.SIGKILL)
            n = len(sc.get("messages", []))
            with open(log_path, "a") as f:
                f.write(f"end:{step_id}\n")
            return {f"{step_id}_output": {"n": n, "step": step_id}, "messages": [f"{step_id} done"]}

        return fn

    return Workflow.plan([Step(id=s, fn=make(s), phase="p1" if i < 2 else "p2") for i, s in enumerate(STEPS)])


async def main(url: str, run_id: str, mode: str, log_path: str, crash: str | None = None) -> None:
    store = create_store(url)
    await store.setup()
    crash_step, _, when = (crash or "::").partition(":")

    def on_event(event) -> None:
        if event.kind == "step_done" and event.step == crash_step and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)

    runner = Runner(make_workflow(log_path, crash), store, on_event=on_event)
    try:
        if mode == "start":
            result = await runner.start(run_id, {"user_input": "ship it"})
        else:
            result = await runner.resume(run_id)
        print(result.status, flush=True)
    finally:
        await store.aclose()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
