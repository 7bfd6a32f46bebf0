"""How a full checkpoint's state is encoded: msgspec (a state holding no datetime) against
ormsgpack (what tether used for every payload, and still uses when a datetime is held).

Both write the same MessagePack bytes for everything but a datetime; this checks that on
each state before timing it. Printed: the median of 7 timings (each of N encodes, the
collector left on, as a save runs) and msgspec / ormsgpack.

    .venv/bin/python benchmarks/bench_encode.py [--sizes 1KB,100KB,1MB,10MB]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import timeit
from pathlib import Path
from typing import Any

import ormsgpack

from tether.state.serde import pack_plain

sys.path.insert(0, str(Path(__file__).parent))
from bench_stores import ALL_SIZES, conversation  # the store bench's chat messages


def median_ms(payload: dict[str, Any], number: int, *, datetimes: bool) -> float:
    runs = timeit.repeat(lambda: pack_plain(payload, datetimes=datetimes), number=number, repeat=7)
    return statistics.median(runs) / number * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=",".join(ALL_SIZES))
    args = ap.parse_args()
    print(f"{'size':>6}  {'ormsgpack ms':>12}  {'msgspec ms':>10}  {'msgspec/ormsgpack':>17}")
    for name in (s.strip().upper() for s in args.sizes.split(",")):
        state = {"messages": conversation(random.Random(1), ALL_SIZES[name])}
        payload = {"v": 1, "kind": "full", "node": None, "meta": {}, "executed": [], "state": state}
        slow = pack_plain(payload)  # ormsgpack, with tether's datetime extension hook
        if pack_plain(payload, datetimes=False) != slow or ormsgpack.unpackb(slow) != payload:
            raise SystemExit(f"{name}: the two encoders disagree")
        number = max(1, int(2e7 // len(slow)))

        old, new = (median_ms(payload, number, datetimes=d) for d in (True, False))
        print(f"{name:>6}  {old:12.4f}  {new:10.4f}  {new / old:16.2f}x")


if __name__ == "__main__":
    main()
