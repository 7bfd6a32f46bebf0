"""A run whose steps crash (SIGKILL) inside a chosen attempt, for durable retries and
interrupted side effects.

    python -m tests.runtime._attempts_flow URL RUN_ID start|resume LOG SCENARIO [DECISION]

SCENARIO ``flaky``: step ``call`` fails (transient) on attempt 1, is killed inside
attempt 2 on the first process, and succeeds on any later attempt. ``always``: ``call``
fails on every attempt, killed inside attempt 2. ``charge``: the non-idempotent step
``charge`` is killed after its side effect on the first process. Every attempt appends
``<step>:<attempt>`` to LOG; the process prints the run's final status.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from tether.runtime import RetryPolicy, Runner, Step, StepContext, Workflow
from tether.stores import create_store


def workflow(log: str, scenario: str, crash: bool) -> Workflow:
    def note(sc: StepContext) -> None:
        with open(log, "a") as f:
            f.write(f"{sc.step.id}:{sc.attempt}\n")

    def call(sc: StepContext) -> dict:
        note(sc)
        if sc.attempt == 2 and crash:
            os.kill(os.getpid(), signal.SIGKILL)
        if sc.attempt == 1 or scenario == "always":
            raise TimeoutError("upstream timed out")
        return {"call_output": sc.attempt}

    def charge(sc: StepContext) -> dict:
        note(sc)  # the side effect
        if crash:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"charge_output": "charged"}

    def ok(sc: StepContext) -> dict:
        note(sc)
        return {"messages": [sc.step.id]}

    retry = RetryPolicy(attempts=3, initial=0.01, maximum=0.02, jitter=0)
    if scenario == "charge":
        steps = [
            Step(id="prepare", fn=ok),
            Step(id="charge", fn=charge, idempotent=False),
            Step(id="notify", fn=ok),
        ]
    else:
        steps = [Step(id="prepare", fn=ok), Step(id="call", fn=call, retry=retry), Step(id="notify", fn=ok)]
    return Workflow.plan(steps)


async def main(url: str, run_id: str, mode: str, log: str, scenario: str, decision: str = "") -> None:
    store = create_store(url)
    await store.setup()
    try:
        runner = Runner(workflow(log, scenario, crash=mode == "start"), store)
        if mode == "start":
            result = await runner.start(run_id)
        else:
            result = await runner.resume(run_id, decision=decision or None)
        print(result.status, flush=True)
    finally:
        await store.aclose()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
