"""The orchestrator in a child process that SIGKILLs itself inside the sub-loop.

    python -m tests.orchestrator._crash_flow DB_URL WORKDIR RUN_ID start|resume|retry LOG [CRASH]

DEV's fix depends on the sub-loop round (round 1 changes nothing, round 2 fixes the bug),
so a resumed process behaves as the killed one would have. CRASH=dev2 kills the process
in the middle of round 2's DEV; CRASH=test1 in the middle of round 1's TEST; CRASH=after-dev1
once round 1's DEV report is on the blackboard, before the checkpoint records it. ``retry``
resumes with that decision (DEV is not idempotent: a crash inside it pauses the run).
A PAUSED run prints its report's error on a second line.
Every role call appends ``start:ROLE:ROUND`` and ``end:ROLE:ROUND`` to LOG.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from tether.orchestrator import Orchestrator, ScriptedMain, ScriptedRunner
from tether.orchestrator.demo import (
    BUG_FIX,
    dev_role,
    finish_review_role,
    review_role,
    rule_main,
    run_tests_role,
)
from tether.stores import create_store


def logged(name: str, fn, log: str, crash: str):
    async def run(request):
        tag = f"{name}:{request.subloop_round}"
        with open(log, "a") as f:
            f.write(f"start:{tag}\n")
        if crash == f"{name.lower()}{request.subloop_round}":
            os.kill(os.getpid(), signal.SIGKILL)
        out = fn(request)
        if asyncio.iscoroutine(out):
            out = await out
        with open(log, "a") as f:
            f.write(f"end:{tag}\n")
        return out

    return run


def dev_by_round(request):
    return dev_role((BUG_FIX,) if request.subloop_round >= 2 else ())(request)


async def main(url: str, workdir: str, run_id: str, mode: str, log: str, crash: str) -> None:
    store = create_store(url)
    await store.setup()
    runners = ScriptedRunner(
        {
            "TEST": logged("TEST", run_tests_role, log, crash),
            "DEV": logged("DEV", dev_by_round, log, crash),
            "REVIEW": logged("REVIEW", review_role, log, crash),
            "FINISH_REVIEW": logged("FINISH_REVIEW", finish_review_role, log, crash),
        }
    )

    def on_event(event) -> None:
        detail = event.detail
        if (
            crash == "after-dev1"
            and detail.get("stage") == "SUBLOOP_DEV"
            and detail.get("subloop_round") == 1
        ):
            os.kill(os.getpid(), signal.SIGKILL)

    orch = Orchestrator(workdir, store, main=ScriptedMain(rule_main), runners=runners, on_event=on_event)
    if mode == "start":
        result = await orch.start(run_id, "fix the median")
    else:
        result = await orch.resume(run_id, decision="retry" if mode == "retry" else None)
    print(result.status.value)
    if result.report is not None and result.status.value == "PAUSED":
        print(result.report.error)
    await store.aclose()


if __name__ == "__main__":
    url, workdir, run_id, mode, log, *rest = sys.argv[1:]
    asyncio.run(main(url, workdir, run_id, mode, log, rest[0] if rest else ""))
