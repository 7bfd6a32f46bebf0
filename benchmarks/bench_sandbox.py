"""Sandbox start overhead per command against a bare subprocess, measured in the same run.

    .venv/bin/python benchmarks/bench_sandbox.py [--runs 40]

Runs ``true`` through ``LocalSession`` without a sandbox (the baseline), in the sandbox
offline (the default: new network namespace) and in the sandbox with the network, and
prints the median and p90 per command and the median overhead in milliseconds.
Target: overhead <= 20 ms per command (the median, offline). The session starts the next
command's launcher (a shell already in the session's pids cgroup) while a command runs, so
back-to-back commands, as here, measure what an agent's next command costs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

from tether.tools import LocalSession
from tether.tools.sandbox import Sandbox

TARGET_MS = 20.0


async def _times(session: LocalSession, runs: int, **kwargs: bool) -> list[float]:
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        await session.run("true", **kwargs)  # type: ignore[arg-type]
        out.append(time.perf_counter() - started)
    return out


async def main(runs: int) -> None:
    sandbox = Sandbox.detect()
    if sandbox is None:
        raise SystemExit("no working bwrap here: install the bubblewrap package")
    with tempfile.TemporaryDirectory() as work:
        bare = LocalSession(work)
        boxed = LocalSession(work, sandbox=sandbox)
        await _times(bare, 3)
        await _times(boxed, 3)
        rows: dict[str, list[float]] = {"bare subprocess": [], "sandbox, offline": [], "sandbox, network": []}
        for _ in range(runs // 10):  # interleaved, so load changes hit every column alike
            rows["bare subprocess"] += await _times(bare, 10)
            rows["sandbox, offline"] += await _times(boxed, 10)
            rows["sandbox, network"] += await _times(boxed, 10, network=True)
        await boxed.close()
    base = statistics.median(rows["bare subprocess"])
    print(f"{runs} runs of `true` each; pids cgroup: {sandbox.process_limit_enforced}")
    print(f"target: sandbox start overhead <= {TARGET_MS:.0f} ms per command (median, offline)")
    print(f"{'':18s} {'median':>9s} {'p90':>9s} {'overhead':>9s}")
    for name, samples in rows.items():
        p90 = sorted(samples)[int(0.9 * (len(samples) - 1))]
        med = statistics.median(samples)
        print(
            f"{name:18s} {med * 1e3:7.1f}ms {p90 * 1e3:7.1f}ms {(med - base) * 1e3:+7.1f}ms  ({med / base:.2f}x)"
        )
    overhead = (statistics.median(rows["sandbox, offline"]) - base) * 1e3
    verdict = "met" if overhead <= TARGET_MS else "NOT met"
    print(f"overhead {overhead:.1f} ms per command: target <= {TARGET_MS:.0f} ms {verdict}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    asyncio.run(main(parser.parse_args().runs))
