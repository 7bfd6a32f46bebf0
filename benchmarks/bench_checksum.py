#!/usr/bin/env python
"""What the rows' checksum costs: encode and decode of a chat state with the CRC-32 frame
(what tether writes) against the bare MessagePack body (the baseline), beside the frame's
floor (one pass of the CRC-32 the frame uses over the body, and one copy of it), and that
CRC-32 against ``zlib.crc32`` (the same value).

    .venv/bin/python benchmarks/bench_checksum.py                        # 1 KB, 1 MB, 10 MB; 3 runs
    .venv/bin/python benchmarks/bench_checksum.py --quick                # 1 run, fewer reps
    .venv/bin/python benchmarks/bench_checksum.py --sizes 1KB,1MB --reps 21

The state is a seeded corpus chat (prose, tool calls, JSON rows, log lines, code) packed to
each size. Encode = ``Codec.encode`` of a full payload (pack, CRC, one copy into the frame)
against ``pack_plain`` alone; decode = ``Codec.decode`` of the framed row against the bare
body (which takes the unframed path). The lines are timed interleaved, a collection before
each call.

Target, at 1 MB and up (below that the difference of two medians is noise): what the frame
adds (framed - bare) <= 1.5x its floor, for encode and decode: the frame costs one pass and
one copy of the body, nothing more.
"""

from __future__ import annotations

import argparse
import functools
import gc
import statistics
import sys
import zlib
from collections.abc import Callable

from harness import Report, corpus, interleave

from tether.state.serde import Codec, frame_crc, pack_plain

SIZES = {"1KB": 1 << 10, "100KB": 100 << 10, "1MB": 1 << 20, "10MB": 10 << 20}
GOAL = 1.5


def payload_of(size: int) -> dict[str, object]:
    return {
        "v": 2,
        "kind": "full",
        "node": "n",
        "status": "RUNNING",
        "ts": 0.0,
        "meta": {},
        "executed": [],
        "state": {"messages": corpus.packed_messages(size, size)},
    }


def measure(rep: Report, codec: Codec, name: str, reps: int) -> None:
    payload = payload_of(SIZES[name])
    bare = pack_plain(payload, datetimes=False)
    framed = codec.encode(payload, datetimes=False)
    if codec.decode(framed) != codec.decode(bare):
        raise SystemExit(f"{name}: the framed and the bare row decode differently")
    number = max(1, (1 << 20) // SIZES[name] // 4)  # small states: a batch per timed call

    def batch(fn: Callable[[], object]) -> Callable[[], None]:
        return functools.partial(_repeat, fn, number)

    calls = {
        "encode, bare (pack_plain)": batch(functools.partial(pack_plain, payload, datetimes=False)),
        "encode, framed (Codec.encode)": batch(functools.partial(codec.encode, payload, datetimes=False)),
        "decode, bare body": batch(functools.partial(codec.decode, bare)),
        "decode, framed row (Codec.decode)": batch(functools.partial(codec.decode, framed)),
        "floor: CRC-32 of the body + one copy": batch(functools.partial(_crc_and_copy, bare)),
        "CRC-32 of the body, zlib.crc32": batch(functools.partial(zlib.crc32, bare)),
        "CRC-32 of the body, serde's": batch(functools.partial(frame_crc, bare, 0)),
    }
    t = interleave(calls, rounds=reps, warmup=1, before=gc.collect, rotate=True)
    ms = {k: statistics.median(v) / number * 1e3 for k, v in t.items()}
    rep.line(f"{name}: state packed", len(bare), "bytes")
    for k, v in ms.items():
        rep.line(f"{name}: {k}", v, "ms")
    floor = ms["floor: CRC-32 of the body + one copy"]
    rep.line(
        f"{name}: zlib.crc32 / serde's CRC-32",
        ms["CRC-32 of the body, zlib.crc32"] / ms["CRC-32 of the body, serde's"],
        "x",
        note="the same value; ISA-L's where the isal wheel is installed",
    )
    for op in ("encode", "decode"):
        keys = [k for k in ms if k.startswith(op)]
        bare_ms, framed_ms = ms[keys[0]], ms[keys[1]]
        rep.line(f"{name}: {op} framed / bare", framed_ms / bare_ms, "x")
        extra = (framed_ms - bare_ms) / floor
        if SIZES[name] >= 1 << 20:
            rep.target(f"{name}: {op}, what the frame adds / its floor", extra, goal=GOAL)
        else:
            rep.line(f"{name}: {op}, what the frame adds / its floor", extra, "x", note="noise at this size")


def _repeat(fn: Callable[[], object], number: int) -> None:
    for _ in range(number):
        fn()


def _crc_and_copy(body: bytes) -> bytearray:
    frame_crc(body, 0)  # the CRC-32 the frame's own code computes
    return bytearray(body)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1KB,1MB,10MB", help="from " + ",".join(SIZES))
    parser.add_argument(
        "--reps", type=int, default=0, help="timed rounds per run (default 21; 7 with --quick)"
    )
    parser.add_argument("--runs", type=int, default=0, help="repeats (default 3; 1 with --quick)")
    parser.add_argument("--quick", action="store_true", help="one short run: checks the script works")
    args = parser.parse_args()
    names = [s.strip().upper() for s in args.sizes.split(",") if s.strip()]
    if unknown := [n for n in names if n not in SIZES]:
        parser.error(f"unknown size {unknown[0]}; known: {', '.join(SIZES)}")
    rep = Report("bench_checksum", "the rows' CRC-32 frame against the bare body and the frame's floor")
    codec = Codec()
    for _ in rep.runs(args.runs or (1 if args.quick else 3)):
        for name in names:
            measure(rep, codec, name, args.reps or (7 if args.quick else 21))
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
