#!/usr/bin/env python
"""Why big payloads decode with the cyclic collector paused (``tether.state.serde._unpack``).

    .venv/bin/python benchmarks/bench_decode_gc.py                 # 10 MB payload, 40 MB heap, 3 runs
    .venv/bin/python benchmarks/bench_decode_gc.py --quick         # 2 MB payload, 8 MB heap, 1 run
    .venv/bin/python benchmarks/bench_decode_gc.py --mb 10 --heap-mb 40 --iters 60 --rounds 3

A loop shaped like an agent's: a process holding other live state (``--heap-mb`` of corpus
chats) decodes a big checkpoint payload (a corpus chat, ``--mb``), then does a little work
that allocates. Timed end to end per iteration, so the collections a decode triggers count
wherever they land (a paused decode leaves one young collection for later; an unpaused one
runs a collection every 700 new containers, now and then an older generation's that scans
the whole heap). Four lines, interleaved loop by loop in a turning order:

- baseline: ``ormsgpack.unpackb`` of the bare body with the collector running (what a decode
  was before the pause and the checksum);
- tether: ``Codec.decode`` of the stored, checksummed row;
- tether, no pause: the same ``Codec.decode`` with the pause turned off (``_BULK_BYTES``
  raised for the loop): what the pause is measured against;
- floor: the baseline's decode with the collector off for the whole loop (no collection at
  all).

Target: tether / tether without the pause <= 1.0 (the pause pays for itself). tether /
baseline is printed too, not a target: it adds the CRC-32 of the row (about 1.5 ms at 10 MB,
``bench_checksum.py``) to the pause's gain, which grows with the other live state (the full
collections the baseline runs walk it all), so it is under 1 with 40 MB of other state and
about 1 with 10 MB.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import ormsgpack
from harness import Report, corpus

import tether.state.serde as serde
from tether.state.serde import Codec, _ext_hook, pack_plain

GOAL = 1.0


def loop(decode: Callable[[], Any], iters: int, *, collector: bool = True) -> float:
    """Milliseconds per iteration of decode-then-work."""
    keep: list[Any] = []
    if not collector:
        gc.disable()
    try:
        t0 = time.perf_counter()
        for _ in range(iters):
            keep.append(decode())
            keep = keep[-2:]
            _work = [[j] for j in range(2000)]  # what the agent does next allocates too
        return (time.perf_counter() - t0) / iters * 1e3
    finally:
        gc.enable()


def unpaused(decode: Callable[[], Any]) -> Callable[[], Any]:
    """``decode`` with serde's pause off: no body is big enough for it during the call."""

    def call() -> Any:
        bulk, serde._BULK_BYTES = serde._BULK_BYTES, 1 << 62
        try:
            return decode()
        finally:
            serde._BULK_BYTES = bulk

    return call


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=0, help="payload size (default 10; 2 with --quick)")
    ap.add_argument("--heap-mb", type=float, default=0, help="other live state (default 40; 8 with --quick)")
    ap.add_argument("--iters", type=int, default=0, help="iterations per loop (default 60; 20 with --quick)")
    ap.add_argument("--rounds", type=int, default=3, help="loops of each line per run")
    ap.add_argument("--runs", type=int, default=0, help="repeats (default 3; 1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="one short run: checks the script works")
    args = ap.parse_args()
    mb = args.mb or (2.0 if args.quick else 10.0)
    heap_mb = args.heap_mb or (8.0 if args.quick else 40.0)
    iters = args.iters or (20 if args.quick else 60)
    rep = Report("bench_decode_gc", "decoding a big payload with the cyclic collector paused")
    heap = [corpus.packed_messages(100 + i, int(heap_mb * 1e6 / 4)) for i in range(4)]
    codec = Codec()
    payload = {"v": 1, "kind": "full", "state": {"messages": corpus.packed_messages(7, int(mb * 1e6))}}
    row = codec.encode(payload)
    bare = pack_plain(payload)
    if codec.decode(row) != ormsgpack.unpackb(bare, ext_hook=_ext_hook):
        raise SystemExit("the stored row and the bare body decode differently")
    lines: dict[str, Callable[[], float]] = {
        "baseline: unpackb, collector running": lambda: loop(
            lambda: ormsgpack.unpackb(bare, ext_hook=_ext_hook), iters
        ),
        "tether: Codec.decode": lambda: loop(lambda: codec.decode(row), iters),
        "tether, no pause: Codec.decode": lambda: loop(unpaused(lambda: codec.decode(row)), iters),
        "floor: unpackb, collector off": lambda: loop(
            lambda: ormsgpack.unpackb(bare, ext_hook=_ext_hook), iters, collector=False
        ),
    }
    order = list(lines)
    for _ in rep.runs(args.runs or (1 if args.quick else 3)):
        rep.line("payload (stored row)", len(row) / 1e6, "MB")
        rep.line("other live state", sum(corpus.packed_size(h) for h in heap) / 1e6, "MB")
        ms: dict[str, list[float]] = {k: [] for k in lines}
        for r in range(args.rounds):
            for name in order[r % len(order) :] + order[: r % len(order)]:
                gc.collect()
                ms[name].append(lines[name]())
        med = {k: statistics.median(v) for k, v in ms.items()}
        for k, v in med.items():
            rep.line(f"decode + work, {k}", v, "ms/iter", note=f"median of {args.rounds} loops of {iters}")
        base = med["baseline: unpackb, collector running"]
        rep.line("floor / baseline", med["floor: unpackb, collector off"] / base, "x")
        rep.line("tether (Codec.decode) / baseline", med["tether: Codec.decode"] / base, "x")
        rep.target(
            "tether / tether without the pause",
            med["tether: Codec.decode"] / med["tether, no pause: Codec.decode"],
            goal=GOAL,
        )
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
