"""A LangGraph thread that runs for thousands of steps: what a step costs as the chat grows,
on TetherSaver, on the floor and on ``SqliteSaver``, window by window.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_langgraph_long.py             # 8 windows of 250 steps
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_langgraph_long.py --quick     # 3 windows of 40 steps
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_langgraph_long.py --only tether --windows 16

An agent that runs for hours makes thousands of checkpoints of one thread, and its chat grows
by a message or more at each. ``bench_langgraph`` times steps on a chat of a fixed size; this
one starts a thread on a small chat (``--start`` bytes of the seeded corpus) and runs it for
``--windows`` invokes of ``--steps`` steps each, every step appending a ~1 KB message (the
same graph and messages as ``bench_langgraph``). The subjects take turns window by window,
each on its own thread, so a slow minute of the host falls on all of them.

Each thread makes a few untimed steps first (a first invoke's caches and prepared
statements). Per window and subject: the puts' CPU (the thread LangGraph runs them in, the
median over the window's puts) and the step's wall time (the invoke's, over its steps: the
graph's own work, the puts and the ``get_tuple`` an invoke starts with). At the end, per subject, the last
window's put CPU over the first's (a saver that writes what changed stays near 1x however
long the thread; one that writes the whole state at each step grows with it), and the last
window's step over the floor's on the same backend (``SqliteSaver``'s: SQLite's), when that
floor runs too. The floor is ``bench_langgraph``'s: a checkpointer that stores nothing, plus
serialising the step's delta and one raw durable write. No targets: the figures say how a
step's cost moves over a thread's life.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bench_langgraph as bl
import trace_langgraph as tl
from harness import Report

SUBJECTS = (*tl.SUBJECTS, "sqlitesaver")
DEFAULT = "tether-sqlite,floor-sqlite,sqlitesaver"


@contextlib.contextmanager
def opened(subject: str, tmp: Path, raw: bl.RawWrites) -> Iterator[Any]:
    """The saver of ``subject``, open (its database files in ``tmp``)."""
    if subject == "sqlitesaver":
        with bl.sqlite_saver(str(tmp / "langgraph.db")) as saver:
            yield saver
        return
    with tl.opened(subject, tmp, raw) as saver:
        yield saver


class Thread:
    """One subject's graph and thread, and what each of its windows measured."""

    def __init__(self, subject: str, saver: Any, initial: list[Any], steps: int) -> None:
        self.subject = subject
        self.saver = saver
        self.rec = tl.Recorder(saver)
        self.graph, self.cfg = tl.seeded(saver, initial, steps)
        self.steps = steps
        # untimed: a first invoke's caches and prepared statements are not the thread's length
        self.graph.invoke({"left": min(steps, 10)}, self.cfg)
        tl.flush(saver)
        self.put_cpu: list[float] = []  # µs, one median per window
        self.step: list[float] = []  # ms, one per window

    def window(self) -> None:
        self.rec.clear()
        t0 = time.perf_counter()
        self.graph.invoke({"left": self.steps}, self.cfg)
        tl.flush(self.saver)
        self.step.append((time.perf_counter() - t0) / self.steps * 1e3)
        self.put_cpu.append(statistics.median(p[2] for p in self.rec.puts) * 1e6)


def measure(report: Report, subjects: list[str], args: argparse.Namespace, tmp: Path) -> None:
    initial = bl.chat(args.start)
    raw = bl.RawWrites(tmp)
    try:
        with contextlib.ExitStack() as stack:
            threads = [
                Thread(s, stack.enter_context(opened(s, tmp, raw)), initial, args.steps) for s in subjects
            ]
            for w in range(1, args.windows + 1):
                report.section(
                    f"window {w} of {args.windows}: steps {(w - 1) * args.steps + 1}-{w * args.steps}"
                )
                for t in threads if w % 2 else reversed(threads):  # a turning order
                    t.window()
                for t in threads:
                    report.line(
                        f"{t.subject}: put CPU (median)",
                        t.put_cpu[-1],
                        "µs",
                        note=f"step {t.step[-1]:.2f} ms",
                    )
    finally:
        raw.close()
    report.section(f"over {args.windows * args.steps} steps")
    by_name = {t.subject: t for t in threads}
    for t in threads:
        report.line(
            f"{t.subject}: put CPU, last window / first",
            t.put_cpu[-1] / t.put_cpu[0],
            "x",
            note=f"{t.put_cpu[0]:,.0f} then {t.put_cpu[-1]:,.0f} µs; every window within "
            f"{min(t.put_cpu):,.0f}-{max(t.put_cpu):,.0f}",
        )
        # a saver against the floor on its own backend (SqliteSaver: SQLite's)
        floor = by_name.get("floor-sqlite" if t.subject == "sqlitesaver" else tl.floor_of(t.subject))
        if floor is not None and t is not floor:
            report.line(
                f"{t.subject}: step, last window / {floor.subject}'s",
                t.step[-1] / floor.step[-1],
                "x",
                note=f"{t.step[-1]:.2f} against {floor.step[-1]:.2f} ms; first window "
                f"{t.step[0] / floor.step[0]:.2f}x",
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 windows of 40 steps")
    ap.add_argument("--windows", type=int, default=None, help="invokes per subject (8; quick 3)")
    ap.add_argument("--steps", type=int, default=None, help="steps per invoke (250; quick 40)")
    ap.add_argument("--start", type=int, default=20_000, help="bytes of chat the thread starts with (20,000)")
    ap.add_argument(
        "--only",
        default=DEFAULT,
        help=f"comma-separated subject name parts ({DEFAULT}); from {', '.join(SUBJECTS)}",
    )
    args = ap.parse_args()
    if args.windows is None:
        args.windows = 3 if args.quick else 8
    if args.steps is None:
        args.steps = 40 if args.quick else 250
    if args.windows < 2 or args.steps < 1 or args.start < 0:
        raise SystemExit(
            "--windows must be 2 or more (the first is compared with the last), --steps 1 or more, "
            "--start 0 or more"
        )
    subjects = tl.picked(SUBJECTS, args.only)
    if not subjects:
        raise SystemExit(f"--only {args.only!r} names none of {', '.join(SUBJECTS)}")
    report = Report("bench_langgraph_long", "a LangGraph thread over thousands of steps, window by window")
    print(f"# {bl.MESSAGE_MODEL}")
    print(f"# the thread starts on {args.start:,} bytes of chat; each step appends a ~1 KB message")
    with tempfile.TemporaryDirectory(prefix="bench-long-") as d:
        measure(report, subjects, args, Path(d))
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
