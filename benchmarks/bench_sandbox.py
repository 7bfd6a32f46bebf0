"""Sandbox start overhead per command against a bare subprocess, measured in the same run.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_sandbox.py            # 3 runs of 60 rounds
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_sandbox.py --quick    # 1 run of 25 rounds

Each round runs, in turn (the harness's interleaving: a burst of host noise lands on every
line alike), through ``LocalSession``:

* ``true`` without a sandbox (the floor: a bare subprocess), in the sandbox offline (the
  default: a new network namespace) and in the sandbox with the network;
* ``cat`` of a seeded log file (corpus log lines, about 12 KB) without and with the sandbox
  (offline): a command with real output, to show that the overhead is the start alone.

Printed per line: the median and the p90 per command, and the median overhead over the bare
line. Target: sandbox start overhead (``true``, offline, median minus the bare median)
<= 20 ms per command. The session starts the next command's launcher (a shell already in
the session's pids cgroup) while a command runs, so back-to-back commands, as here,
measure what an agent's next command costs.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
from pathlib import Path

from harness import Report, ainterleave, corpus, percentile

from tether.tools import LocalSession
from tether.tools.sandbox import Sandbox

TARGET_MS = 20.0


async def one_run(rep: Report, work: Path, rounds: int) -> None:
    sandbox = Sandbox.detect()  # one per session: closing the session removes its private /tmp
    assert sandbox is not None
    bare = LocalSession(str(work))
    boxed = LocalSession(str(work), sandbox=sandbox)
    try:

        async def check(session: LocalSession, command: str, **kw: bool) -> None:
            result = await session.run(command, **kw)  # type: ignore[arg-type]
            assert result.exit_code == 0, f"{command!r} failed: {result}"

        times = await ainterleave(
            {
                "true, bare subprocess (floor)": lambda: check(bare, "true"),
                "true, sandbox offline": lambda: check(boxed, "true"),
                "true, sandbox with network": lambda: check(boxed, "true", network=True),
                "cat build.log, bare subprocess": lambda: check(bare, "cat logs/build.log"),
                "cat build.log, sandbox offline": lambda: check(boxed, "cat logs/build.log"),
            },
            rounds=rounds,
            warmup=3,
        )
    finally:
        await boxed.close()
        await bare.close()
    med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    for name, samples in times.items():
        floor = med[
            "cat build.log, bare subprocess" if name.startswith("cat") else "true, bare subprocess (floor)"
        ]
        rep.line(
            f"{name}: median",
            med[name],
            "ms",
            note=f"p90 {percentile(samples, 90) * 1e3:.1f} ms, overhead {med[name] - floor:+.1f} ms",
        )
    rep.target(
        "sandbox start overhead (true, offline, median)",
        med["true, sandbox offline"] - med["true, bare subprocess (floor)"],
        goal=TARGET_MS,
        unit="ms",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 run of 25 rounds")
    parser.add_argument("--runs", type=int, default=None, help="repetitions (default 3; 1 with --quick)")
    parser.add_argument(
        "--rounds", type=int, default=None, help="commands per line (default 60; 25 with --quick)"
    )
    args = parser.parse_args()
    rep = Report("bench_sandbox", "sandbox start overhead per command against a bare subprocess")
    sandbox = Sandbox.detect()
    if sandbox is None:
        rep.line("no working bwrap here: install the bubblewrap package (nothing measured)", 0)
        return rep.finish()
    rep.line("pids cgroup enforced", int(sandbox.process_limit_enforced), note="1 yes, 0 no")
    sandbox.close()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "logs").mkdir()
        log = corpus.log_lines(random.Random(34), 130)
        (work / "logs" / "build.log").write_text(log + "\n")
        rep.line("logs/build.log", len(log) / 1e3, "KB", note="130 seeded corpus log lines")
        for _ in rep.runs(args.runs or (1 if args.quick else 3)):
            asyncio.run(one_run(rep, work, args.rounds or (25 if args.quick else 60)))
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
