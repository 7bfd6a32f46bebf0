"""What the rows' checksum costs: encode and decode of a chat-like state with the CRC-32 frame
(what tether writes now) against the bare MessagePack body it wrote before (the baseline,
measured in the same process, interleaved rep by rep).

    .venv/bin/python benchmarks/bench_checksum.py [--sizes 1KB,1MB,10MB] [--reps 21]

Prints medians in milliseconds and the ratio framed / bare. Encode = ``Codec.encode`` of a full
payload (pack, CRC, one copy into the frame) against ``pack_plain`` alone; decode =
``Codec.decode`` of each form (the bare body takes the pre-checksum fast path).
"""

from __future__ import annotations

import argparse
import functools
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

from tether.state.serde import Codec, pack_plain

SIZES = {"1KB": 1 << 10, "100KB": 100 << 10, "1MB": 1 << 20, "10MB": 10 << 20}


def chat_state(size: int) -> dict[str, Any]:
    """Messages of mixed prose until the packed state is ``size`` bytes."""
    words = ["the", "agent", "reads", "the", "log", "and", "retries", "the", "step", "again"]
    messages: list[dict[str, Any]] = []
    i = 0
    while len(pack_plain({"messages": messages})) < size:
        text = " ".join(words[(i + k) % len(words)] for k in range(20 + i % 200))
        messages.append({"role": "user" if i % 2 else "assistant", "content": f"{i}: {text}"})
        i += 1
    return {"v": 2, "kind": "full", "node": "n", "status": "RUNNING", "ts": 0.0, "meta": {},
            "executed": [], "state": {"messages": messages}}  # fmt: skip


def timed(fn: Callable[[], object]) -> float:
    gc.collect()
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1KB,1MB,10MB")
    parser.add_argument("--reps", type=int, default=21)
    args = parser.parse_args()
    codec = Codec()
    print(f"{'size':>6} {'op':>7} {'bare ms':>9} {'crc ms':>9} {'crc/bare':>9}")
    for name in args.sizes.split(","):
        payload = chat_state(SIZES[name])
        bare = pack_plain(payload, datetimes=False)
        framed = codec.encode(payload, datetimes=False)
        assert codec.decode(framed) == codec.decode(bare)
        reps = args.reps * (20 if SIZES[name] < 1 << 20 else 1)
        samples: dict[str, list[float]] = {k: [] for k in ("enc-bare", "enc-crc", "dec-bare", "dec-crc")}
        calls: dict[str, Callable[[], object]] = {
            "enc-bare": functools.partial(pack_plain, payload, datetimes=False),
            "enc-crc": functools.partial(codec.encode, payload, datetimes=False),
            "dec-bare": functools.partial(codec.decode, bare),
            "dec-crc": functools.partial(codec.decode, framed),
        }
        for _ in range(reps):
            for key, call in calls.items():
                samples[key].append(timed(call))
        for op in ("enc", "dec"):
            b = statistics.median(samples[f"{op}-bare"])
            c = statistics.median(samples[f"{op}-crc"])
            print(f"{name:>6} {op + 'ode':>7} {b:9.3f} {c:9.3f} {c / b:9.2f}")


if __name__ == "__main__":
    main()
