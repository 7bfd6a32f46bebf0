"""The orchestrator's metrics and the thresholds that raise warning events.

Kept in the run's state (so they survive a resume): MAIN prompt sizes, sub-loop trigger
and success rates, summary extraction failures, summary cache hit rate. A threshold
crossed (MAIN prompt > 200 KB, sub-loop success < 70%, extraction failures > 5%, cache
hit rate < 60%, sub-loop trigger rate > 50%) gives one warning event per crossing.

The ``metrics`` key changes on most stages (a prompt size, a few counters), so a stage
does not write the metrics: it writes a :data:`RECORD` of what to add, a short list of
numbers, and the :data:`METRICS` reducer adds it. Written as the changed fields by name,
those changes were a tenth of an orchestration's stored bytes; as records, a fiftieth.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tether.errors import InvalidStateValue
from tether.state.reducers import replayable

__all__ = [
    "METRICS",
    "RECORD",
    "THRESHOLDS",
    "Threshold",
    "add_metrics",
    "check_thresholds",
    "empty_metrics",
    "metrics_of",
    "rates",
    "record",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Threshold:
    name: str
    level: str
    """warning | info (alert levels)."""
    message: str


THRESHOLDS: tuple[Threshold, ...] = (
    Threshold(name="main_prompt_bytes", level="warning", message="MAIN prompt above 200 KB"),
    Threshold(name="subloop_success_rate", level="warning", message="sub-loop success rate below 70%"),
    Threshold(
        name="extraction_failure_rate", level="warning", message="summary extraction failures above 5%"
    ),
    Threshold(name="cache_hit_rate", level="info", message="summary cache hit rate below 60%"),
    Threshold(
        name="subloop_trigger_rate", level="info", message="sub-loop triggered on more than 50% of TEST runs"
    ),
)
MIN_SAMPLES = 3
"""Rates are judged only once this many samples exist (one failed sub-loop is not a trend)."""
CACHE_WARMUP_ROUNDS = 5
"""MAIN rounds before the cache hit rate is judged: the first rounds miss by nature."""


def empty_metrics() -> dict[str, Any]:
    return {
        "main_prompt_bytes": [],
        "main_levels": [],
        "test_runs": 0,
        "subloop_entries": 0,
        "subloop_successes": 0,
        "extractions": 0,
        "extraction_failures": 0,
        "cache_hits": 0,
        "cache_misses": 0,
    }


SAMPLES = 100
"""MAIN prompt sizes (and levels) kept: the last ones."""
RECORD = (
    "extractions",
    "extraction_failures",
    "cache_hits",
    "cache_misses",
    "test_runs",
    "subloop_entries",
    "subloop_successes",
)
"""The counters a record adds, in its order, after MAIN's prompt size and level: ``[size,
level, extractions, …]`` (``None`` for no prompt; zeros at the end left out). The summary
cache's counts come first, as they change on most stages."""


def record(*, main_size: int | None = None, level: int | None = None, **add: int) -> list[Any]:
    """What a stage writes to ``metrics``: its prompt sample and the counts to add."""
    unknown = set(add) - set(RECORD)
    if unknown:
        raise ValueError(f"unknown metrics counters: {', '.join(sorted(unknown))}")
    out: list[Any] = [main_size, level, *(int(add.get(name, 0)) for name in RECORD)]
    while len(out) > 2 and not out[-1]:
        out.pop()
    return out


def metrics_of(state: Mapping[str, Any]) -> dict[str, Any]:
    """A run's metrics with every field (a run from before some field existed lacks it)."""
    return {**empty_metrics(), **dict(state.get("metrics") or {})}


def add_metrics(old: Any, update: Any) -> dict[str, Any]:
    """The metrics with a :func:`record` added; a dict replaces them (a whole value, as
    written before the records). Derived fields a run from before held are dropped: the
    rates (:func:`rates`) and the active warnings (:func:`check_thresholds`)."""
    if type(update) is dict:
        m = dict(update)
    elif type(update) is list and len(update) >= 2:
        m = {**empty_metrics(), **(old if type(old) is dict else {})}
        size, level, *counts = update
        if size is not None:
            m["main_prompt_bytes"] = [*m["main_prompt_bytes"], size][-SAMPLES:]
            m["main_levels"] = [*m["main_levels"], level][-SAMPLES:]
        for name, n in zip(RECORD, counts, strict=False):
            if n:
                m[name] = int(m[name]) + n
    else:
        raise InvalidStateValue(f"metrics take a record or a dict, got {update!r}")
    m.pop("rates", None)
    m.pop("active_warnings", None)
    return m


METRICS = replayable("tether.orchestrator.metrics:add", add_metrics)
"""The ``metrics`` key's reducer: a stage's :func:`record` stored as it is, then added."""


def rates(m: Mapping[str, Any]) -> dict[str, float]:
    lookups = int(m["cache_hits"]) + int(m["cache_misses"])
    return {
        "subloop_trigger_rate": m["subloop_entries"] / m["test_runs"] if m["test_runs"] else 0.0,
        "subloop_success_rate": m["subloop_successes"] / m["subloop_entries"]
        if m["subloop_entries"]
        else 1.0,
        "extraction_failure_rate": m["extraction_failures"] / m["extractions"] if m["extractions"] else 0.0,
        "cache_hit_rate": m["cache_hits"] / lookups if lookups else 1.0,
    }


def check_thresholds(m: Mapping[str, Any]) -> list[Threshold]:
    """The thresholds the metrics are past now."""
    r = rates(m)
    sizes = m.get("main_prompt_bytes") or []
    lookups = int(m["cache_hits"]) + int(m["cache_misses"])
    past = {
        "main_prompt_bytes": bool(sizes) and sizes[-1] > 200_000,
        "subloop_success_rate": m["subloop_entries"] >= MIN_SAMPLES and r["subloop_success_rate"] < 0.70,
        "extraction_failure_rate": m["extractions"] >= MIN_SAMPLES and r["extraction_failure_rate"] > 0.05,
        "cache_hit_rate": len(sizes) >= CACHE_WARMUP_ROUNDS and lookups >= 10 and r["cache_hit_rate"] < 0.60,
        "subloop_trigger_rate": m["test_runs"] >= MIN_SAMPLES and r["subloop_trigger_rate"] > 0.50,
    }
    return [t for t in THRESHOLDS if past[t.name]]
