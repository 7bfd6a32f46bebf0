#!/usr/bin/env python
"""What a graph step pays on the state TetherSaver hands out: LangGraph's ``add_messages`` on
the copy a ``get_tuple`` returns, against the same copy with its message ids shared with the
saver's objects, and against the saver's objects themselves.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_handout.py            # 1 MB and 10 MB, 3 runs
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_handout.py --quick    # 1 MB, 1 run

Every step of a graph whose state has a ``messages`` channel runs ``add_messages``, which
reads the id of every message of the chat (it indexes the list by id) before appending the
step's message. From the second read of a thread on, the list it works on is the copy the
saver handed out (the caller's own objects, see docs/langgraph.md). The chat is
``bench_langgraph``'s (seeded corpus text: user prose, assistant tool calls, tool results of
JSON rows, logs or code), its message ids made in three ways (``--ids``, see ``SHAPES``),
which place the saver's ids differently in memory. Three lines, interleaved round by round
in a turning order, each the median time of one ``add_messages`` of a ~1 KB answer:

- baseline: a copy whose ids are the saver's own strings (how copies were made before each
  got ids of its own);
- tether: the copy as ``get_tuple`` hands it out (``_handout.copied``);
- floor: the saver's objects themselves (what a graph would read with no copy at all).

Beside them, the copy itself (paid once per ``invoke``) and the part of it that makes the
ids afresh. Target, at 10 MB for each id shape: tether / floor <= 1.0 (a graph's steps cost
no more on the copy than on the saver's own objects). Not a target: tether / baseline, what
ids of the copy's own gain.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from typing import Any

import bench_langgraph as bl
from harness import Report, corpus

GOAL = 1.0
SIZES = {"1MB": 1 << 20, "10MB": 10 << 20}


SHAPES: dict[str, Callable[[int], str] | None] = {
    "state": None,
    "built": bl.message_id,
    "short": lambda i: f"m-{i}",
}
"""The message ids of ``--ids``: ``state``, as a LangGraph state holds them and
``bench_langgraph``'s chat has them (the assistant's made with each message, the others'
given as they enter the state, after them); ``built``, every message's made with it, in
LangChain's shape (``run-<uuid>-0``); ``short`` (``m-<n>``), made with each message, as
``bench_langgraph``'s chat had them before."""


def shared_ids(copy: list[Any], saver: list[Any]) -> list[Any]:
    """``copy`` with each message's id replaced by the saver's object's own string."""
    for mine, theirs in zip(copy, saver, strict=True):
        mine.__dict__["id"] = theirs.id
    return copy


def per_call(fn: Callable[[], Any], number: int) -> float:
    """Milliseconds per call of ``fn``: the best of 3 repeats of ``number`` calls."""
    return min(timeit.repeat(fn, number=number, repeat=3)) / number * 1e3


def run_size(rep: Report, size: str, ids: str, rounds: int) -> None:
    from langchain_core.messages import AIMessage
    from langgraph.graph.message import add_messages

    from tether.integrations.langgraph._handout import _own_ids, copied

    saver = bl.chat(SIZES[size], SHAPES[ids])
    answer = AIMessage(content=corpus.prose(random.Random(1), 1024), id="run-answer-0")
    lines = {
        "baseline: copy sharing the saver's ids": shared_ids(copied(saver), saver),
        "tether: the copy handed out": copied(saver),
        "floor: the saver's objects": saver,
    }
    if not all(a.id == b.id for a, b in zip(lines["tether: the copy handed out"], saver, strict=True)):
        raise SystemExit("the handed-out copy's ids differ from the saver's")
    number = max(3, 20_000 // len(saver))
    ms: dict[str, list[float]] = {k: [] for k in lines}
    order = list(lines)
    for r in range(rounds):
        for name in order[r % len(order) :] + order[: r % len(order)]:
            items = lines[name]
            ms[name].append(per_call(lambda items=items: add_messages(items, [answer]), number))
    med = {k: statistics.median(v) for k, v in ms.items()}
    rep.line(f"{size}: messages", len(saver), "")
    for name, v in med.items():
        rep.line(f"{size}: add_messages, {name}", v, "ms", note=f"median of {rounds} rounds")
    t0 = time.perf_counter()
    twin = copied(saver)
    whole = time.perf_counter() - t0
    t0 = time.perf_counter()
    _own_ids(twin)
    made = time.perf_counter() - t0
    rep.line(
        f"{size}: the copy, once per invoke",
        whole * 1e3,
        "ms",
        note=f"its ids made afresh {made * 1e3:.2f} ms",
    )
    tether = med["tether: the copy handed out"]
    rep.line(
        f"{size}: tether / baseline",
        tether / med["baseline: copy sharing the saver's ids"],
        "x",
        note="what ids of the copy's own gain; not a target",
    )
    name = f"{size}: add_messages on the copy handed out / on the saver's objects ({ids} ids)"
    if size == "10MB":
        rep.target(name, tether / med["floor: the saver's objects"], goal=GOAL)
    else:
        rep.line(name, tether / med["floor: the saver's objects"], "x", note="not a target")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="", help="1MB, 10MB or both (default both; 1MB with --quick)")
    ap.add_argument("--rounds", type=int, default=0, help="rounds per run (default 7; 3 with --quick)")
    ap.add_argument("--runs", type=int, default=0, help="repeats (default 3; 1 with --quick)")
    ap.add_argument(
        "--ids",
        default=",".join(SHAPES),
        help=f"message ids, comma-separated: {', '.join(SHAPES)} (default all)",
    )
    ap.add_argument("--quick", action="store_true", help="one short run: checks the script works")
    args = ap.parse_args()
    sizes = (args.sizes or ("1MB" if args.quick else "1MB,10MB")).split(",")
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        raise SystemExit(f"--sizes: unknown size {unknown[0]!r}; use 1MB, 10MB or both")
    shapes = args.ids.split(",")
    if any(s not in SHAPES for s in shapes):
        raise SystemExit(f"--ids: use {', '.join(SHAPES)} (comma-separated), not {args.ids!r}")
    rounds = args.rounds or (3 if args.quick else 7)
    rep = Report("bench_handout", "add_messages on the state TetherSaver hands out")
    for _ in rep.runs(args.runs or (1 if args.quick else 3)):
        for ids in shapes:
            rep.section(f"message ids: {ids}")
            for size in sizes:
                run_size(rep, size, ids, rounds)
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main())
