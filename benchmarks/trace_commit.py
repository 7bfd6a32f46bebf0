#!/usr/bin/env python
"""Which modules one run id passes through from ``Runner.start`` to its first commit.

    .venv/bin/python benchmarks/trace_commit.py                    # the store's part of the path
    .venv/bin/python benchmarks/trace_commit.py --all              # every stop from Runner.start
    .venv/bin/python benchmarks/trace_commit.py --before 733a673   # beside an earlier commit's path
    .venv/bin/python benchmarks/trace_commit.py --quick            # the same (a trace is one run)

Profiles every call into tether's own modules (``sys.setprofile``) on an SQLite store,
collapses consecutive calls in one module into one stop, and prints the stops and, per
module, how many times the path came back to it after leaving it. The default part starts
at the caller's last stop before ``CheckpointStore.commit``. ``--before REV`` traces REV's
``src`` (extracted with ``git archive``, run in a child process) the same way, as the
baseline line.

Only calls count, not resumptions: when an awaited future completes (here the SQLite
backend's transaction, done on its DB thread), the task resumes every coroutine frame of its
await chain, from ``Runner.start`` down to the one that awaited, and the profiler reports
each as a "call". Those frames were already on the path and nothing new is called there,
so a frame reported a second time is skipped. The transaction's body itself runs on the DB
thread, which this profiler (set for the event loop's thread only) does not follow.

A trace is deterministic: one run, the same answer on every host. Target, the path rule of
``docs/architecture.md`` (``tests/stores/test_commit_path.py`` holds it too): a commit comes
back to a module it left at most twice.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import inspect
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

from tether.runtime import Runner, Step, StepContext, Workflow
from tether.stores import open_store

_SUSPENDS = inspect.CO_COROUTINE | inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR
_ROOT = Path(__file__).resolve().parent.parent
MAX_RETURNS = 2


async def _step(sc: StepContext) -> dict[str, Any]:
    result = {
        "role": "tool",
        "tool_call_id": "call_000001",
        "name": "run_tests",
        "content": "41 passed in 3.2 s",
    }
    return {"messages": [result]}


async def trace() -> tuple[list[str], int]:
    """The stops of one run's path to its first commit, and where the store's part starts."""
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
    """Per module, how many times the path came back to it after leaving it."""
    left: set[str] = set()
    back: collections.Counter[str] = collections.Counter()
    for prev, here in zip(stops, stops[1:], strict=False):
        left.add(prev)
        if here in left:
            back[here] += 1
    return back


def _before(rev: str, every: bool) -> list[str] | str:
    """REV's path, traced by this script in a child process on REV's ``src`` (or why not)."""
    with tempfile.TemporaryDirectory(prefix="tether-trace-") as tmp:
        archive = Path(tmp) / "src.tar"
        git = subprocess.run(
            ["git", "archive", "--format=tar", "-o", str(archive), rev, "src"], cwd=_ROOT, capture_output=True
        )
        if git.returncode:
            return f"git archive {rev} failed: {git.stderr.decode().strip()[:200]}"
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        env = {**os.environ, "PYTHONPATH": str(Path(tmp) / "src")}
        args = [sys.executable, __file__, "--stops-json", *(["--all"] if every else [])]
        child = subprocess.run(args, env=env, capture_output=True, text=True, cwd=tmp)
        if child.returncode:
            return f"the trace failed at {rev}: {child.stderr.strip().splitlines()[-1:]}"
        stops: list[str] = json.loads(child.stdout)
        return stops


def _part(every: bool) -> list[str]:
    stops, commit_at = asyncio.run(trace())
    return stops if every else stops[commit_at:]


def _print_path(rep: Any, label: str, part: list[str]) -> int:
    rep.line(f"{label}: stops", len(part), note=" -> ".join(s.removeprefix("tether.") for s in part))
    back = returns(part)
    for module, count in back.most_common():
        rep.line(f"{label}: back to {module.removeprefix('tether.')}", count)
    return max(back.values(), default=0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--all", action="store_true", help="every stop from Runner.start (default: the store's part)"
    )
    ap.add_argument("--before", metavar="REV", help="trace REV's src too, as the baseline line")
    ap.add_argument("--quick", action="store_true", help="accepted for uniformity: a trace is one short run")
    ap.add_argument("--stops-json", action="store_true", help=argparse.SUPPRESS)  # the child of --before
    args = ap.parse_args()
    if args.stops_json:
        print(json.dumps(_part(args.all)))
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from harness import Report

    rep = Report("trace_commit", "the modules one commit passes through (SQLite, from Runner.start)")
    for _ in rep.runs(1):
        if args.before:
            base = _before(args.before, args.all)
            if isinstance(base, str):
                rep.line(f"{args.before}: not traced", 0, note=base)
            else:
                _print_path(rep, args.before, base)
        worst = _print_path(rep, "HEAD", _part(args.all))
        rep.target("HEAD: most returns to one module it left", worst, goal=MAX_RETURNS, unit="")
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
