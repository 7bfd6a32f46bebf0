#!/usr/bin/env python
"""How a full checkpoint's state is encoded: msgspec (a state holding no datetime) against
ormsgpack (the baseline: what tether uses when a datetime is held, and used for every
payload before), in the two states glibc's allocator can be in.

    .venv/bin/python benchmarks/bench_encode.py                      # 1 KB to 10 MB, 3 runs
    .venv/bin/python benchmarks/bench_encode.py --quick              # 1 run, fewer reps
    .venv/bin/python benchmarks/bench_encode.py --sizes 1MB,10MB --runs 5

Both write the same MessagePack bytes for everything but a datetime; this checks that on
each state before timing it. Each encode gets a fresh copy of the state (made untimed, a
collection before the call), as a save does. The states are seeded corpus chats packed to
each size; the two encoders are timed interleaved, in a turning order, with a third line,
the floor: one copy of the encoded bytes. Small states are timed as a batch of fresh copies
per call. Each line also counts the minor page faults of a call (``getrusage``).

Where the encoders differ most is not their encoding but their output buffer. ormsgpack
grows it by doubling, so it ends up to twice the state's size; glibc serves a block that big
with a fresh ``mmap`` (a page fault for every 4 KB written, returned to the OS when freed)
until the process has freed a bigger block, which raises glibc's mmap threshold for good
(up to 32 MiB). msgspec grows its buffer in place at the top of the heap, whose pages
stay. So the ratio depends on what the process freed before (measured in one process, runs
1 to 3 gave 0.34, 1.25 and 1.39 at 100 KB: runs 2 and 3 came after run 1's 10 MB frees),
and each run measures three states, each in a child process of its own, sizes in ascending
order:

- fresh process: glibc's default, as in a process that has not yet freed a bigger block;
- warm allocator: the child first frees a 30 MiB block, as a long-lived process that has
  handled big rows has: neither encoder page-faults, so this is the encoding work alone;
- saves, fresh process: ``Codec.encode`` (pack, CRC-32, the frame's copy) with either
  encoder, what a save costs; its rows are checked equal first.

Targets, the claims of ``pack_plain``'s docstring: fresh process, msgspec / ormsgpack
<= 0.6 from 100 KB up (a quarter to a half), <= 1.1 below; warm allocator, <= 1.1 at every
size (msgspec is not slower when neither page-faults); saves, <= 1.05 at every size.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

import ormsgpack
from harness import Report, corpus

from tether.state.serde import Codec, pack_plain
from tether.state.values import copy_value

SIZES = {"1KB": 1 << 10, "100KB": 100 << 10, "1MB": 1 << 20, "10MB": 10 << 20}
REPS = {"1KB": 501, "100KB": 101, "1MB": 31, "10MB": 11}
GOAL = 0.6
GOAL_SMALL = 1.1
GOAL_WARM = 1.1
GOAL_SAVE = 1.05
WARM_BLOCK = 30 << 20
"""Freed once by a warm child: raises glibc's dynamic mmap threshold above every buffer here."""
REGIMES = {"fresh process": "fresh", "warm allocator": "warm", "saves, fresh process": "saves"}
ORM, MSG, FLOOR = "ormsgpack (baseline)", "msgspec (tether)", "floor: one copy of the encoded bytes"
SAVE_ORM, SAVE_MSG = "save, ormsgpack: Codec.encode", "save, msgspec (tether): Codec.encode"


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def measure(name: str, reps: int, *, saves: bool) -> dict[str, list[float]]:
    """Median ms and page faults per call of each line, for one size (in a child):
    ``pack_plain`` with either encoder, or ``Codec.encode`` with either (``saves``)."""
    messages = corpus.packed_messages(SIZES[name], SIZES[name])
    head: dict[str, Any] = {"v": 1, "kind": "full", "node": None, "meta": {}, "executed": []}
    payload = {**head, "state": {"messages": messages}}
    slow = pack_plain(payload)  # ormsgpack, with tether's datetime extension hook
    if pack_plain(payload, datetimes=False) != slow or ormsgpack.unpackb(slow) != payload:
        raise SystemExit(f"{name}: the two encoders disagree")
    codec = Codec()
    if saves and codec.encode(payload, datetimes=False) != codec.encode(payload):
        raise SystemExit(f"{name}: the two encoders' rows differ")
    encode = codec.encode if saves else pack_plain
    lines = {SAVE_ORM: True, SAVE_MSG: False} if saves else {ORM: True, MSG: False}
    samples: dict[str, list[tuple[float, int]]] = {k: [] for k in (*lines, FLOOR)}
    order = list(samples)
    number = max(1, (64 << 10) // SIZES[name])  # small states: a batch of fresh copies per call
    for r in range(reps + 1):  # the first round warms up
        for key in order[r % 3 :] + order[: r % 3]:
            fresh = [{**head, "state": {"messages": copy_value(messages)}} for _ in range(number)]
            gc.collect()
            out: list[Any] = []
            if key in lines:
                datetimes = lines[key]
                f0, t0 = _faults(), time.perf_counter()
                for one in fresh:
                    out.append(encode(one, datetimes=datetimes))
            else:
                f0, t0 = _faults(), time.perf_counter()
                for _ in fresh:
                    out.append(bytearray(slow))
            elapsed, faults = (time.perf_counter() - t0) / number, (_faults() - f0) / number
            del out
            if r:
                samples[key].append((elapsed, faults))
    return {
        k: [statistics.median(t for t, _ in v) * 1e3, statistics.median(f for _, f in v)]
        for k, v in samples.items()
    }


def child(names: list[str], reps: dict[str, int], regime: str) -> None:
    if regime == "warm":
        block = bytearray(WARM_BLOCK)  # mmapped; freeing it raises the threshold to its size
        del block
    print(json.dumps({n: measure(n, reps[n], saves=regime == "saves") for n in names}))


def in_child(names: list[str], reps: dict[str, int], regime: str) -> dict[str, dict[str, list[float]]]:
    args = [sys.executable, __file__, "--child", regime, "--sizes", ",".join(names)]
    args += ["--reps", ",".join(str(reps[n]) for n in names)]
    done = subprocess.run(args, capture_output=True, text=True, check=True, env=os.environ.copy())
    result: dict[str, dict[str, list[float]]] = json.loads(done.stdout.splitlines()[-1])
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=",".join(SIZES), help="from " + ",".join(SIZES))
    ap.add_argument("--runs", type=int, default=0, help="repeats (default 3; 1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="one short run: checks the script works")
    ap.add_argument("--child", choices=tuple(REGIMES.values()), help=argparse.SUPPRESS)
    ap.add_argument("--reps", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    names = [s.strip().upper() for s in args.sizes.split(",") if s.strip()]
    if unknown := [n for n in names if n not in SIZES]:
        ap.error(f"unknown size {unknown[0]}; known: {', '.join(SIZES)}")
    names.sort(key=SIZES.__getitem__)  # ascending: a smaller size never runs after a bigger one's frees
    if args.child:
        child(names, dict(zip(names, map(int, args.reps.split(",")), strict=True)), args.child)
        return 0
    reps = {n: max(3, REPS[n] // 5) if args.quick else REPS[n] for n in names}
    rep = Report("bench_encode", "msgspec against ormsgpack encoding a full state (fresh copy each call)")
    for _ in rep.runs(args.runs or (1 if args.quick else 3)):
        for regime, mode in REGIMES.items():
            rep.section(regime)
            result = in_child(names, reps, mode)
            for name in names:
                ms = result[name]
                for k, (t, faults) in ms.items():
                    rep.line(f"{name}: {k}", t, "ms", note=f"median of {reps[name]}; {faults:g} page faults")
                if mode == "saves":
                    ratio, goal = ms[SAVE_MSG][0] / ms[SAVE_ORM][0], GOAL_SAVE
                else:
                    ratio = ms[MSG][0] / ms[ORM][0]
                    goal = GOAL_WARM if mode == "warm" else GOAL_SMALL if SIZES[name] < 100 << 10 else GOAL
                rep.target(f"{name}, {regime}: msgspec / ormsgpack", ratio, goal=goal)
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
