#!/usr/bin/env python
"""Whether a new process's work costs more on this host the later it starts: the same
decode in a new process, straight after the process's imports and after a sleep or busy CPU.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/probe_idle.py            # 8 processes a line, 3 runs
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/probe_idle.py --quick    # 4 a line, 1 run

The work: ``bench_langgraph``'s 1 MB chat (corpus messages as LangChain messages), decoded
by LangGraph's own serializer from the bytes it stores, with the cyclic collector off, in a
new process each time. Lines: the decode straight after the imports, after a ``time.sleep``
of 1 ms, after 50 ms of busy CPU, after a 1 s sleep, after 1 s of busy CPU, and after a
0.5 s sleep then 50 ms busy (about what ``bench_langgraph`` runs between a cold read's
opening and its timed ``get_state``). The processes of the lines take turns, so the host's
noise hits them alike.

No target: this says how to read cold-read figures. On a host where a sleep costs nothing
every line reads about the same. On some virtual machines the later lines read higher, a
sleep or busy CPU alike: a new process fills every page it uses, and memory the machine
freed a moment before (the previous process's) is cheap to take again where memory freed a
while ago is not. A measured call in a new process then costs more the later it starts.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_langgraph as bl  # (also the modules a cold read has imported)
from harness import Report
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

WAITS = {
    "straight after the imports": (0.0, 0.0),
    "after a 1 ms sleep": (0.001, 0.0),
    "after 50 ms of busy CPU": (0.0, 0.05),
    "after a 1 s sleep": (1.0, 0.0),
    "after 1 s of busy CPU": (0.0, 1.0),
    # bench_langgraph's wait before a cold read's timed get_state (its opening taking no time)
    f"after a {bl.READ_AT:g} s sleep, then {bl.BUSY_BEFORE_READ * 1e3:g} ms busy": (
        bl.READ_AT,
        bl.BUSY_BEFORE_READ,
    ),
}


def child(path: str, sleep: float, spin: float) -> None:
    """Decode the chat at ``path`` after sleeping ``sleep`` s then keeping busy ``spin`` s;
    prints the decode's seconds."""
    serde = JsonPlusSerializer()
    data = Path(path).read_bytes()
    gc.disable()
    if sleep:
        time.sleep(sleep)
    bl.busy(spin)
    t0 = time.perf_counter()
    messages = serde.loads_typed(("msgpack", data))
    took = time.perf_counter() - t0
    if len(messages) < 100:
        raise SystemExit(f"decoded {len(messages)} messages; the chat has hundreds")
    print(took)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="4 processes a line, 1 run")
    ap.add_argument("--processes", type=int, default=None, help="new processes a line (8; 4 with --quick)")
    ap.add_argument("--runs", type=int, default=None, help="runs (3; 1 with --quick)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], float(args.child[1]), float(args.child[2]))
        return
    n = args.processes or (4 if args.quick else 8)
    runs = args.runs or (1 if args.quick else 3)
    rep = Report("probe_idle", "the same decode in a new process, straight away and later")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "chat.msgpack"
        kind, data = JsonPlusSerializer().dumps_typed(bl.chat(bl.MB))
        path.write_bytes(data)
        print(
            f"# the work: LangGraph's serializer decoding a {len(data):,}-byte chat ({kind}), collector off"
        )
        for _ in rep.runs(runs):
            times: dict[str, list[float]] = {name: [] for name in WAITS}
            names = list(WAITS)
            for i in range(n):
                for name in names[i % len(names) :] + names[: i % len(names)]:
                    sleep, spin = WAITS[name]
                    out = subprocess.run(
                        [sys.executable, __file__, "--child", str(path), str(sleep), str(spin)],
                        check=True,
                        capture_output=True,
                        text=True,
                    )
                    times[name].append(float(out.stdout.split()[0]))
            straight = statistics.median(times["straight after the imports"])
            for name, ts in times.items():
                m = statistics.median(ts)
                rep.line(f"decode {name}", m * 1e3, "ms", note=f"{m / straight:.2f}x straight away")
    rep.finish()


if __name__ == "__main__":
    main()
