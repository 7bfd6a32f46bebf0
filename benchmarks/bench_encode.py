#!/usr/bin/env python
"""How a full checkpoint's state is encoded: msgspec (a state holding no datetime) against
ormsgpack (the baseline: what tether uses when a datetime is held, and used for every
payload before).

    .venv/bin/python benchmarks/bench_encode.py                      # 1 KB to 10 MB, 3 runs
    .venv/bin/python benchmarks/bench_encode.py --quick              # 1 run, fewer reps
    .venv/bin/python benchmarks/bench_encode.py --sizes 1MB,10MB --runs 5

Both write the same MessagePack bytes for everything but a datetime; this checks that on
each state before timing it. Each encode gets a fresh copy of the state (made untimed, a
collection before the call), as a save does: encoding one object over and over is not what a
save sees (the encoder's caches stay warm). The states are seeded corpus chats packed to
each size; the two encoders are timed interleaved, in a turning order, with a third line,
the floor: one copy of the encoded bytes (what producing that many bytes costs at least).
Small states are timed as a batch of fresh copies per call.

Targets, the claim of ``pack_plain``'s docstring (the reason ``state/serde.py`` encodes a
state holding no datetime with msgspec): msgspec / ormsgpack <= 0.5 from 100 KB up (it
says "about a third"), <= 1.1 below (it says "the same").
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from typing import Any

import ormsgpack
from harness import Report, corpus

from tether.state.serde import pack_plain
from tether.state.values import copy_value

SIZES = {"1KB": 1 << 10, "100KB": 100 << 10, "1MB": 1 << 20, "10MB": 10 << 20}
REPS = {"1KB": 501, "100KB": 101, "1MB": 31, "10MB": 11}
GOAL = 0.5
GOAL_SMALL = 1.1


def measure(rep: Report, name: str, reps: int) -> None:
    messages = corpus.packed_messages(SIZES[name], SIZES[name])
    head: dict[str, Any] = {"v": 1, "kind": "full", "node": None, "meta": {}, "executed": []}
    payload = {**head, "state": {"messages": messages}}
    slow = pack_plain(payload)  # ormsgpack, with tether's datetime extension hook
    if pack_plain(payload, datetimes=False) != slow or ormsgpack.unpackb(slow) != payload:
        raise SystemExit(f"{name}: the two encoders disagree")
    lines = {"ormsgpack (baseline)": True, "msgspec (tether)": False}
    floor = "floor: one copy of the encoded bytes"
    times: dict[str, list[float]] = {k: [] for k in (*lines, floor)}
    order = list(times)
    number = max(1, (64 << 10) // SIZES[name])  # small states: a batch of fresh copies per call
    for r in range(reps + 1):  # the first round warms up
        for key in order[r % 3 :] + order[: r % 3]:
            fresh = [{**head, "state": {"messages": copy_value(messages)}} for _ in range(number)]
            gc.collect()
            if key in lines:
                datetimes = lines[key]
                t0 = time.perf_counter()
                for one in fresh:
                    pack_plain(one, datetimes=datetimes)
            else:
                t0 = time.perf_counter()
                for _ in fresh:
                    bytearray(slow)
            elapsed = (time.perf_counter() - t0) / number
            if r:
                times[key].append(elapsed)
    ms = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    rep.line(f"{name}: state packed", len(slow), "bytes")
    for k, v in ms.items():
        rep.line(f"{name}: {k}", v, "ms", note=f"median of {reps}")
    goal = GOAL_SMALL if SIZES[name] < 100 << 10 else GOAL
    rep.target(f"{name}: msgspec / ormsgpack", ms["msgspec (tether)"] / ms["ormsgpack (baseline)"], goal=goal)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=",".join(SIZES), help="from " + ",".join(SIZES))
    ap.add_argument("--runs", type=int, default=0, help="repeats (default 3; 1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="one short run: checks the script works")
    args = ap.parse_args()
    names = [s.strip().upper() for s in args.sizes.split(",") if s.strip()]
    if unknown := [n for n in names if n not in SIZES]:
        ap.error(f"unknown size {unknown[0]}; known: {', '.join(SIZES)}")
    rep = Report("bench_encode", "msgspec against ormsgpack encoding a full state (fresh copy each call)")
    for _ in rep.runs(args.runs or (1 if args.quick else 3)):
        for name in names:
            measure(rep, name, max(3, REPS[name] // 5) if args.quick else REPS[name])
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
