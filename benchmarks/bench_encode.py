"""How a full checkpoint's state is encoded: msgspec (a state holding no datetime) against
ormsgpack (what tether used for every payload, and still uses when a datetime is held).

Both write the same MessagePack bytes for everything but a datetime; this checks that on
each state before timing it. Each encode gets a fresh copy of the state (made untimed, a
collection before the call), as a save does: encoding one object over and over is not
what a save sees (ormsgpack then ran 0.14 ms at 1 MB, against 1.6 ms on a fresh copy).
Printed: the median of N encodes each, interleaved, and msgspec / ormsgpack.

    .venv/bin/python benchmarks/bench_encode.py [--sizes 1KB,100KB,1MB,10MB]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from pathlib import Path

import ormsgpack

from tether.state.serde import pack_plain
from tether.state.values import copy_value

sys.path.insert(0, str(Path(__file__).parent))
from bench_stores import ALL_SIZES, conversation  # the store bench's chat messages

REPS = {"1KB": 501, "100KB": 101, "1MB": 31, "10MB": 11}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=",".join(ALL_SIZES))
    args = ap.parse_args()
    print(f"{'size':>6}  {'reps':>4}  {'ormsgpack ms':>12}  {'msgspec ms':>10}  {'msgspec/ormsgpack':>17}")
    for name in (s.strip().upper() for s in args.sizes.split(",")):
        messages = conversation(random.Random(1), ALL_SIZES[name])
        head = {"v": 1, "kind": "full", "node": None, "meta": {}, "executed": []}
        payload = {**head, "state": {"messages": messages}}
        slow = pack_plain(payload)  # ormsgpack, with tether's datetime extension hook
        if pack_plain(payload, datetimes=False) != slow or ormsgpack.unpackb(slow) != payload:
            raise SystemExit(f"{name}: the two encoders disagree")
        times: dict[bool, list[float]] = {True: [], False: []}
        for rep in range(REPS[name]):
            for datetimes in (True, False) if rep % 2 else (False, True):
                fresh = {**head, "state": {"messages": copy_value(messages)}}
                gc.collect()
                t0 = time.perf_counter()
                pack_plain(fresh, datetimes=datetimes)
                times[datetimes].append(time.perf_counter() - t0)
        old, new = (statistics.median(times[d]) * 1e3 for d in (True, False))
        print(f"{name:>6}  {REPS[name]:>4}  {old:12.4f}  {new:10.4f}  {new / old:16.2f}x")


if __name__ == "__main__":
    main()
