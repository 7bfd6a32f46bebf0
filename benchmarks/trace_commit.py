#!/usr/bin/env python
"""Which modules one run id passes through from ``Runner.start`` to its first commit.

    .venv/bin/python benchmarks/trace_commit.py [--all]

Profiles every call into tether's own modules (``sys.setprofile``) on an SQLite store,
collapses consecutive calls in one module into one stop, and prints the stops and, per
module, how many times the path came back to it after leaving it. ``--all`` prints every
stop (default: the store's part, from ``CheckpointStore.commit`` on).

Only calls count, not resumptions: when an awaited future completes (here the SQLite
backend's transaction, done on its DB thread), the task resumes every coroutine frame of its
await chain, from ``Runner.start`` down to the one that awaited, and the profiler reports
each as a "call". Those frames were already on the path and nothing new is called there,
so a frame reported a second time is skipped. The transaction's body itself runs on the DB
thread, which this profiler (set for the event loop's thread only) does not follow.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import sys
import tempfile
from types import FrameType
from typing import Any

from tether.runtime import Runner, Step, StepContext, Workflow
from tether.stores import open_store

_SUSPENDS = inspect.CO_COROUTINE | inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR


async def _step(sc: StepContext) -> dict[str, Any]:
    return {"messages": [{"role": "tool", "content": "ok"}]}


async def trace() -> tuple[list[str], int]:
    stops: list[str] = []
    commit_at = -1
    started: dict[int, FrameType] = {}  # coroutine frames seen (held, so no id is reused)

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal commit_at
        if event != "call":
            return
        if frame.f_code.co_flags & _SUSPENDS:
            if id(frame) in started:
                return  # a coroutine resumed after an await: no new call
            started[id(frame)] = frame
        module = str(frame.f_globals.get("__name__", ""))
        if not module.startswith("tether.") or module == "tether.errors":
            return
        if commit_at < 0 and module == "tether.stores.base" and frame.f_code.co_name == "commit":
            commit_at = len(stops)
        if not stops or stops[-1] != module:
            stops.append(module)

    with tempfile.TemporaryDirectory() as tmp:
        async with open_store(f"sqlite:///{tmp}/trace.db") as store:
            runner = Runner(Workflow([Step(id="a", fn=_step)]), store)
            real = store.commit

            async def first_commit(*args: Any, **kwargs: Any) -> int:
                version = await real(*args, **kwargs)
                sys.setprofile(None)
                return version

            store.commit = first_commit  # type: ignore[method-assign]
            sys.setprofile(profile)
            try:
                await runner.start("trace-run")
            finally:
                sys.setprofile(None)
    return stops, max(commit_at - 1, 0)


def returns(stops: list[str]) -> collections.Counter[str]:
    left: set[str] = set()
    back: collections.Counter[str] = collections.Counter()
    for prev, here in zip(stops, stops[1:], strict=False):
        left.add(prev)
        if here in left:
            back[here] += 1
    return back


def main() -> None:
    stops, commit_at = asyncio.run(trace())
    part = stops if "--all" in sys.argv else stops[commit_at:]
    print(f"{len(part)} stops: " + " -> ".join(s.removeprefix("tether.") for s in part))
    for module, count in returns(part).most_common():
        print(f"  back to {module}: {count}")


if __name__ == "__main__":
    main()
