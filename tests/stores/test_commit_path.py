"""How far one commit wanders: the path rule of docs/architecture.md, measured by
``benchmarks/trace_commit.py`` (every call into tether's modules from ``store.commit`` on)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

TRACER = Path(__file__).resolve().parents[2] / "benchmarks" / "trace_commit.py"


def _tracer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trace_commit", TRACER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_a_commit_returns_to_a_module_it_left_at_most_twice() -> None:
    tracer = _tracer()
    stops, commit_at = await tracer.trace()
    part = stops[commit_at:]
    assert "tether.stores.base" in part and "tether.stores._sql" in part  # the commit was traced
    assert "tether.runtime.runner" not in part  # a resumed await chain is no call
    back = tracer.returns(part)
    assert max(back.values()) <= 2, back


def test_returns_counts_each_coming_back() -> None:
    back = _tracer().returns(["a", "b", "a", "c", "a", "b"])
    assert back == {"a": 2, "b": 1}
