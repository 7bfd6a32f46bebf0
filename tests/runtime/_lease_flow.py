"""A runner in a child process for the lease tests: three steps, the middle one long.

    python -m tests.runtime._lease_flow URL RUN_ID start|resume TTL KIND SECONDS LOG

KIND says what the middle step (``long``) does for SECONDS: ``await`` (asyncio.sleep),
``sleep`` (time.sleep in an async step: the event loop is blocked), ``gil`` (a C loop
holding the GIL: no thread of the process can run) or ``none`` (returns at once).
Every step appends ``start:<id>`` / ``end:<id>`` to LOG; the process prints ``in:long``
when the long step begins and, at the end, the run's status or ``LEASE_LOST <held>
<current>`` (exit code 3).
"""

from __future__ import annotations

import asyncio
import sys
import time

from tether.errors import LeaseLost
from tether.runtime import Runner, Step, StepContext, Workflow
from tether.stores import create_store

STEPS = ["prepare", "long", "finish"]


def _hold_gil(seconds: float) -> None:
    """Burn ``seconds`` inside C calls (``sum`` over a range holds the GIL throughout): one
    call sized to last them all, and another for what a busy host made it fall short of."""
    began = time.perf_counter()
    sum(range(2_000_000))
    per = (time.perf_counter() - began) / 2_000_000
    while (left := seconds - (time.perf_counter() - began)) > 0.05:
        sum(range(int(left / per)))


STORE = None


async def _renewed(run_id: str, timeout: float) -> None:
    """Wait for the sidecar's first renewal (its start-up on a loaded machine can take a
    while; a real lease is minutes long)."""
    assert STORE is not None
    first = (await STORE.get_run(run_id)).lease_until
    deadline = time.monotonic() + timeout
    while (await STORE.get_run(run_id)).lease_until == first:
        assert time.monotonic() < deadline, "no heartbeat"
        await asyncio.sleep(0.05)


def make_workflow(kind: str, seconds: float, log: str) -> Workflow:
    def make(step_id: str):
        async def fn(sc: StepContext) -> dict:
            with open(log, "a") as f:
                f.write(f"start:{step_id}\n")
            if step_id == "prepare" and kind in ("sleep", "gil"):
                await _renewed(sc.run_id, seconds)  # the heartbeat is up before the long step
            if step_id == "long":
                print("in:long", flush=True)
                began = time.monotonic()
                if kind == "await":
                    await asyncio.sleep(seconds)
                elif kind == "sleep":
                    time.sleep(seconds)  # blocks the event loop on purpose
                elif kind == "gil":
                    _hold_gil(seconds)
                with open(log, "a") as f:
                    f.write(f"lasted:{time.monotonic() - began:.2f}\n")
            with open(log, "a") as f:
                f.write(f"end:{step_id}\n")
            return {f"{step_id}_output": step_id}

        return fn

    return Workflow.plan([Step(id=s, fn=make(s)) for s in STEPS])


async def main(url: str, run_id: str, mode: str, ttl: str, kind: str, seconds: str, log: str) -> int:
    global STORE
    store = STORE = create_store(url)
    await store.setup()
    runner = Runner(make_workflow(kind, float(seconds), log), store, lease_ttl=float(ttl))
    try:
        if mode == "start":
            result = await runner.start(run_id, {"user_input": "go"})
        else:
            result = await runner.resume(run_id)
        print(result.status, flush=True)
        return 0
    except LeaseLost as exc:
        print(f"LEASE_LOST {exc.held} {exc.current}", flush=True)
        return 3
    finally:
        await store.aclose()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:])))
