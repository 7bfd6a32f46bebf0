"""A looping workflow in a child process that can SIGKILL itself inside a routed step.

    python -m tests.runtime._loop_flow DB_URL RUN_ID start|resume LOG [CRASH_AT]

``decide`` picks ``left`` or ``right`` at random (so a re-decision after a crash would
show as a different path) and loops back to itself until four work steps are done.
CRASH_AT=N kills the process in the middle of the N-th work step.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys

from tether.runtime import Runner, Step, StepContext, Workflow
from tether.stores import create_store

ROUNDS = 4


def make_workflow(log_path: str, crash_at: int, idempotent: bool = True) -> Workflow:
    def log(line: str) -> None:
        with open(log_path, "a") as f:
            f.write(line + "\n")

    def decide(sc: StepContext) -> dict:
        done = int(sc.get("work_done", 0))
        if done >= ROUNDS:
            sc.finish("COMPLETED", f"{done} rounds")
            return {}
        choice = random.choice(["left", "right"])
        sc.goto(choice, "decide", reason=f"round {done + 1}")
        log(f"decide:{done + 1}:{choice}")
        return {}

    def work(name: str):
        def fn(sc: StepContext) -> dict:
            n = int(sc.get("work_done", 0)) + 1
            log(f"start:{name}:{n}")
            if n == crash_at:
                os.kill(os.getpid(), signal.SIGKILL)
            log(f"end:{name}:{n}")
            return {"work_done": n, "path": [*sc.get("path", []), name]}

        return fn

    return Workflow(
        [
            Step(id="decide", fn=decide, max_visits=ROUNDS + 1),
            Step(id="left", fn=work("left"), idempotent=idempotent),
            Step(id="right", fn=work("right"), idempotent=idempotent),
        ]
    )


async def main(url: str, run_id: str, mode: str, log_path: str, crash_at: int, flags: str = "") -> None:
    store = create_store(url)
    await store.setup()
    runner = Runner(make_workflow(log_path, crash_at, idempotent="nonidem" not in flags), store)
    if mode == "start":
        result = await runner.start(run_id)
    else:
        result = await runner.resume(run_id, decision="retry" if "retry" in flags else None)
    print(result.status.value)
    await store.aclose()


if __name__ == "__main__":
    url, run_id, mode, log_path, *rest = sys.argv[1:]
    asyncio.run(
        main(url, run_id, mode, log_path, int(rest[0]) if rest else 0, rest[1] if len(rest) > 1 else "")
    )
