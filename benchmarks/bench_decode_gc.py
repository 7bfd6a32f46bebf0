"""Why big payloads decode with the cyclic GC paused (``tether.state.serde._unpack``).

A loop shaped like an agent's: a process holding other state decodes a big checkpoint
payload, then does a little work that allocates. Timed end to end per iteration, so the
collections a decode triggers count wherever they land (a paused decode leaves one young
collection for later; an unpaused one runs ~140 during the decode, some of them older
generations that scan the whole heap).

    .venv/bin/python benchmarks/bench_decode_gc.py [--mb 10] [--heap-mb 40] [--iters 60]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ormsgpack

from tether.state.serde import Codec, _ext_hook

sys.path.insert(0, str(Path(__file__).parent))
from bench_stores import conversation  # the store bench's chat messages


def loop(decode: Callable[[bytes], Any], body: bytes, iters: int) -> float:
    keep: list[Any] = []
    t0 = time.perf_counter()
    for _ in range(iters):
        keep.append(decode(body))
        keep = keep[-2:]
        _work = [[j] for j in range(2000)]  # what the agent does next allocates too
    return (time.perf_counter() - t0) / iters * 1000.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=10.0, help="payload size")
    ap.add_argument("--heap-mb", type=float, default=40.0, help="other live state in the process")
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rng = random.Random(7)
    heap = [conversation(rng, int(args.heap_mb * 1e6 / 4)) for _ in range(4)]
    codec = Codec()
    body = codec.encode(
        {"v": 1, "kind": "full", "state": {"messages": conversation(rng, int(args.mb * 1e6))}}
    )

    def unpaused(data: bytes) -> Any:
        return ormsgpack.unpackb(data, ext_hook=_ext_hook)

    def tether(data: bytes) -> Any:
        return codec.decode(data)

    base: list[float] = []
    ours: list[float] = []
    for _ in range(args.rounds):
        gc.collect()
        base.append(loop(unpaused, body, args.iters))
        gc.collect()
        ours.append(loop(tether, body, args.iters))
    b, t = statistics.median(base), statistics.median(ours)
    print(f"payload {len(body) / 1e6:.1f} MB, other live state ~{args.heap_mb:.0f} MB ({len(heap)} lists)")
    print(f"decode + work, collector running:  {b:.2f} ms per iteration (rounds: {base})")
    print(f"decode + work, Codec.decode:       {t:.2f} ms per iteration")
    print(f"ratio Codec.decode / unpaused: {t / b:.2f}x")


if __name__ == "__main__":
    main()
