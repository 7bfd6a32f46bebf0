"""The load benchmarks run and print the harness's shape: ``bench_load_parts.py`` (every part,
the kept replay's copy among them) and ``bench_storage.py --only loads`` (a target per size)."""

from __future__ import annotations

import pytest

from tests.test_bench_storage_scripts import run_script, summary


@pytest.mark.slow
def test_bench_load_parts_quick() -> None:
    out = run_script("bench_load_parts.py", "--quick", "--kb", "1,20")
    for part in ("floor whole load", "chain statement", "copy of the kept replay", "SqliteStore.load"):
        assert "20 KB, " in out and part in out, part
    rows = summary(out)
    assert len(rows) == 2
    assert "1 KB: SqliteStore.load / floor" in rows[0] and "20 KB: SqliteStore.load / floor" in rows[1]


@pytest.mark.slow
def test_bench_storage_loads_quick() -> None:
    out = run_script("bench_storage.py", "--quick", "--only", "loads")
    assert "100 KB state: load latest, p50" in out and " us" in out
    rows = summary(out)
    assert any("100 KB state: load / floor" in row for row in rows)
    assert any("1 MB state: load / floor" in row for row in rows)
