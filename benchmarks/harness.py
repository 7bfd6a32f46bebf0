"""What every benchmark prints, so anyone can rerun it and read the answer the same way.

A benchmark script makes a :class:`Report`, repeats its measurement with
:meth:`Report.runs`, times the tether line, its baseline and its floor *interleaved* within
each round (:func:`interleave` / :func:`ainterleave`: a burst of host noise hits every line
alike), and records each target with :meth:`Report.target`. :meth:`Report.finish` prints
the summary: each target met or not, with the number of runs it held in. A target counts as
met when it holds in at least two of three runs (two thirds of the runs in general).

The header and the footer print the commit (with ``+dirty`` for uncommitted changes), the
Python, the cores, the load average and a fixed CPU-loop noise probe, at the start and at the
end: when the probe or the load moved between the two, the host was busy and the figures
should be rerun, not tuned. The header also prints what touching a fresh page of memory
costs on the host (:func:`fault_probe`): a new process pays it for every page it fills, and
on some virtual machines it is many times what it is on others, which moves every figure
made in a new process (a cold read) by more than the CPU probe says.

Usage::

    from harness import Report, interleave, corpus
    rep = Report("bench_x", "what it measures")
    for _ in rep.runs(3):
        t = interleave({"tether": f, "floor": g}, rounds=5)
        rep.target("tether / floor", median(t["tether"]) / median(t["floor"]), goal=1.5)
    rep.finish()
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
import mmap
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import corpus

__all__ = [
    "Report",
    "ainterleave",
    "corpus",
    "fault_probe",
    "interleave",
    "load_average",
    "noise_probe",
    "percentile",
]

_ROOT = Path(__file__).resolve().parent.parent


def commit() -> str:
    """The checked-out commit, ``+dirty`` when the work tree differs from it."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short=10", "HEAD"], cwd=_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return rev + ("+dirty" if dirty else "")


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def noise_probe() -> float:
    """Milliseconds for a fixed pure-Python CPU loop (best of 5): the same number on a quiet
    host run after run, larger when other work takes the core."""
    best = math.inf
    for _ in range(7):  # the first passes warm the interpreter's caches up
        t0 = time.perf_counter()
        acc = 0
        for i in range(300_000):
            acc = (acc + i * i) % 1_000_003
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def fault_probe(pages: int = 2048) -> tuple[float, float]:
    """Microseconds the first touch of a 4 KiB page of memory costs: the page fault that
    maps it, less the cost of touching a page already mapped. Two figures: the first of four
    passes over 8 MiB (memory this process had not used yet) and the best of the other
    three (memory the pass before just gave back). A new process fills every page it uses
    this way, so its figures move with these from one host to the next (bare metal maps a
    page far faster than a virtual machine whose free memory goes back to its host), where
    a warm loop's do not."""
    size = pages * mmap.PAGESIZE
    costs = []
    for _ in range(4):
        with mmap.mmap(-1, size) as m:
            t0 = time.perf_counter()
            for at in range(0, size, mmap.PAGESIZE):
                m[at] = 1
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            for at in range(0, size, mmap.PAGESIZE):
                m[at] = 2
            again = time.perf_counter() - t0
        costs.append(max(first - again, 0.0) / pages * 1e6)
    return costs[0], min(costs[1:])


def percentile(xs: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation, like numpy's default."""
    if not xs:
        return math.nan
    s = sorted(xs)
    k = (len(s) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def interleave(
    funcs: Mapping[str, Callable[[], object]],
    *,
    rounds: int = 5,
    warmup: int = 1,
    before: Callable[[], object] | None = None,
    rotate: bool = False,
) -> dict[str, list[float]]:
    """Seconds per call of each function, called in turn within every round (A B C, A B C,
    ...), so that host noise lands on every line alike. ``warmup`` rounds are not kept.
    ``before`` runs untimed ahead of every call (``gc.collect``: no line pays for the
    garbage another one left); ``rotate`` turns the order each round (B C A, C A B, ...), so
    that no line always runs first, right after another's work."""
    out: dict[str, list[float]] = {name: [] for name in funcs}
    for r in range(warmup + rounds):
        for name, fn in _turn(funcs, r if rotate else 0):
            if before is not None:
                before()
            t0 = time.perf_counter()
            fn()
            elapsed = time.perf_counter() - t0
            if r >= warmup:
                out[name].append(elapsed)
    return out


async def ainterleave(
    funcs: Mapping[str, Callable[[], Awaitable[object]]],
    *,
    rounds: int = 5,
    warmup: int = 1,
    before: Callable[[], object] | None = None,
    rotate: bool = False,
) -> dict[str, list[float]]:
    """:func:`interleave` for coroutine functions (awaited one at a time)."""
    out: dict[str, list[float]] = {name: [] for name in funcs}
    for r in range(warmup + rounds):
        for name, fn in _turn(funcs, r if rotate else 0):
            if before is not None:
                before()
            t0 = time.perf_counter()
            await fn()
            elapsed = time.perf_counter() - t0
            if r >= warmup:
                out[name].append(elapsed)
    return out


def _turn(funcs: Mapping[str, Any], r: int) -> list[tuple[str, Any]]:
    items = list(funcs.items())
    k = r % len(items) if items else 0
    return items[k:] + items[:k]


_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": lambda v, g: v <= g,
    "<": lambda v, g: v < g,
    ">=": lambda v, g: v >= g,
    ">": lambda v, g: v > g,
    "==": lambda v, g: v == g,
}


@dataclass(slots=True)
class _Target:
    name: str
    goal: float
    op: str
    unit: str
    values: list[float] = field(default_factory=list)
    met: list[bool] = field(default_factory=list)


class Report:
    """The header, the figures and the met / not met summary of one benchmark script.

    ``json_path`` (or the environment variable ``TETHER_BENCH_JSON``) also writes every line
    and target as JSON, for tables in the docs.
    """

    def __init__(self, name: str, description: str, *, json_path: str | None = None) -> None:
        self.name = name
        self.description = description
        self.json_path = json_path or os.environ.get("TETHER_BENCH_JSON")
        self.run = 0
        self.n_runs = 1
        self._targets: dict[str, _Target] = {}
        self._lines: list[dict[str, Any]] = []
        self._t0 = time.perf_counter()
        fresh_us, reused_us = fault_probe()
        self.header = {
            "benchmark": name,
            "commit": commit(),
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "python": platform.python_version(),
            "cores": os.cpu_count(),
            "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "load_start": load_average(),
            "noise_start_ms": round(noise_probe(), 2),
            "fault_fresh_us": round(fresh_us, 2),
            "fault_reused_us": round(reused_us, 2),
        }
        h = self.header
        print(f"# {name}: {description}")
        print(f"# commit {h['commit']} · python {h['python']} · {h['cores']} cores · {h['started']}")
        print(f"# command: {h['command']}")
        print(
            f"# load average at start: {h['load_start']} · CPU noise probe {h['noise_start_ms']:.1f} ms"
            f" · page-fault probe {h['fault_fresh_us']:.1f} µs a page ({h['fault_reused_us']:.1f} reused)"
        )
        sys.stdout.flush()

    def runs(self, n: int = 3) -> Iterator[int]:
        """Repeat a measurement ``n`` times (run numbers from 1); targets count per run."""
        self.n_runs = n
        for i in range(1, n + 1):
            self.run = i
            print(f"\n## run {i} of {n} (load average {load_average()})")
            sys.stdout.flush()
            yield i

    def section(self, title: str) -> None:
        print(f"\n### {title}")

    def line(self, name: str, value: float, unit: str = "", *, note: str = "") -> None:
        """A figure worth printing that is not a target (a baseline, a floor, a count)."""
        self._lines.append({"run": self.run, "name": name, "value": value, "unit": unit, "note": note})
        tail = f"  ({note})" if note else ""
        print(f"  {name:<58} {_fmt(value):>12} {unit}{tail}")
        sys.stdout.flush()

    def target(
        self, name: str, value: float, *, goal: float, op: str = "<=", unit: str = "x", echo: bool = True
    ) -> bool:
        """Record ``value`` against ``goal`` (``value op goal`` is met) for the current run.
        ``echo=False`` records it without a line, for a script whose own table already shows
        the verdict row by row (it still counts in the summary)."""
        if op not in _OPS:
            raise ValueError(f"op must be one of {sorted(_OPS)}, not {op!r}")
        t = self._targets.setdefault(name, _Target(name, goal, op, unit))
        ok = _OPS[op](value, goal) if not math.isnan(value) else False
        t.values.append(value)
        t.met.append(ok)
        if not echo:
            return ok
        print(
            f"  {name:<58} {_fmt(value):>12} {unit}  goal {op} {_fmt(goal)} {unit}: {'met' if ok else 'NOT met'}"
        )
        sys.stdout.flush()
        return ok

    def finish(self) -> int:
        """Print the footer and the summary; returns 0 (a benchmark reports, it never fails)."""
        load_end, noise_end = load_average(), noise_probe()
        seconds = time.perf_counter() - self._t0
        print(
            f"\n# load average at end: {load_end} · CPU noise probe {noise_end:.1f} ms "
            f"(start {self.header['noise_start_ms']:.1f}) · {seconds:.0f} s in all"
        )
        if noise_end > 1.3 * self.header["noise_start_ms"] or self.header["noise_start_ms"] > 1.3 * noise_end:
            print("# the noise probe moved by more than 30% during the run: the host was busy, rerun it")
        summary = []
        if self._targets:
            print("\n## targets")
            for t in self._targets.values():
                k, n = sum(t.met), len(t.met)
                verdict = "MET" if n and 3 * k >= 2 * n else "NOT MET"
                vals = ", ".join(_fmt(v) for v in t.values)
                print(
                    f"  {verdict:<8} {t.name}: goal {t.op} {_fmt(t.goal)} {t.unit}; "
                    f"held in {k} of {n} runs ({vals})"
                )
                summary.append(
                    {
                        "name": t.name,
                        "goal": t.goal,
                        "op": t.op,
                        "unit": t.unit,
                        "values": t.values,
                        "met_runs": k,
                        "runs": n,
                        "met": verdict == "MET",
                    }
                )
        if self.json_path:
            payload = {
                **self.header,
                "load_end": load_end,
                "noise_end_ms": round(noise_end, 2),
                "seconds": round(seconds, 1),
                "lines": self._lines,
                "targets": summary,
            }
            Path(self.json_path).write_text(json.dumps(payload, indent=2))
            print(f"# written: {self.json_path}")
        sys.stdout.flush()
        return 0

    @staticmethod
    def run_async(coro: Awaitable[Any]) -> Any:
        """``asyncio.run`` for scripts that measure coroutines."""
        return asyncio.run(coro)  # type: ignore[arg-type]


def _fmt(v: float) -> str:
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) >= 100):
        return f"{int(v):,}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}" if abs(v) < 0.01 else f"{v:.2f}"


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else math.nan
