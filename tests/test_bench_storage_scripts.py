"""The storage benchmark scripts run and print the harness's shape (header, lines, footer,
met / not met summary), and the shared corpus and harness do what the scripts rely on.

Each script runs as the README says (``PYTHONPATH=src:benchmarks``), in its quick mode cut
down further by its own flags, so that a script broken by a change in the code it measures
fails here and not in the lead's quiet-host rerun."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

import corpus  # noqa: E402
import harness  # noqa: E402

from tests.bench_scripts import run_bench  # noqa: E402


def run_script(name: str, *args: str, timeout: float = 240) -> str:
    out = run_bench(name, *args, timeout=timeout)
    assert out.startswith(f"# {name.removesuffix('.py')}: "), out[:300]
    for part in (
        "# commit ",
        "# load average at start: ",
        "CPU noise probe",
        "## run 1 of 1",
        "# load average at end: ",
    ):
        assert part in out, (part, out[-2000:])
    return out


def summary(out: str) -> list[str]:
    """The summary lines: one per target, ``MET`` or ``NOT MET`` and the runs it held in."""
    assert "\n## targets\n" in out, out[-2000:]
    lines = out.split("\n## targets\n", 1)[1].splitlines()
    rows = [line.strip() for line in lines if line.strip().startswith(("MET ", "NOT MET "))]
    assert rows and all(" of 1 runs (" in row for row in rows), rows
    return rows


@pytest.mark.slow
def test_bench_checksum_quick() -> None:
    out = run_script("bench_checksum.py", "--quick", "--sizes", "1KB,1MB", "--reps", "2")
    assert "1MB: floor: CRC-32 of the body + one copy" in out
    assert {r.split(":")[0].split()[-1] for r in summary(out)} == {"1MB"}


@pytest.mark.slow
def test_bench_encode_quick() -> None:
    out = run_script("bench_encode.py", "--quick", "--sizes", "1KB,100KB")
    rows = summary(out)
    assert any("100KB, fresh process: msgspec / ormsgpack: goal <= 0.60" in r for r in rows), rows
    assert any("100KB, warm allocator: msgspec / ormsgpack: goal <= 1.10" in r for r in rows), rows
    assert "### warm allocator" in out
    assert any("100KB, saves, fresh process: msgspec / ormsgpack: goal <= 1.05" in r for r in rows), rows
    assert "page faults)" in out


@pytest.mark.slow
def test_bench_decode_gc_quick() -> None:
    out = run_script(
        "bench_decode_gc.py", "--quick", "--mb", "0.5", "--heap-mb", "1", "--iters", "3", "--rounds", "1"
    )
    assert "floor: unpackb, collector off" in out
    assert "tether, no pause: Codec.decode" in out
    assert "tether (Codec.decode) / baseline" in out
    assert any("tether / tether without the pause" in r for r in summary(out))


@pytest.mark.slow
def test_bench_sqlite_wal_quick() -> None:
    out = run_script("bench_sqlite_wal.py", "--quick", "--sizes", "100KB", "--steps", "10", "--think", "1")
    assert "100KB: save, floor, median" in out
    assert len(summary(out)) == 2


@pytest.mark.slow
def test_bench_stores_quick(tmp_path: Path) -> None:
    out = run_script(
        "bench_stores.py",
        "--quick",
        "--backends",
        "memory,sqlite",
        "--sizes",
        "1KB",
        "--sections",
        "latency,growth,small",
        "--growth-steps",
        "12",
        "--lg-growth-steps",
        "3",
        "--json",
        str(tmp_path / "stores.json"),
    )
    for table in ("== 1. Save", "== 3. Storage growth", "== 3c. Storage growth"):
        assert table in out
    rows = summary(out)
    assert any("sqlite growth 12 steps: stored bytes / state: goal <= 2.00" in r for r in rows), rows
    assert any("sqlite growth 12 steps: SQLite file / state: goal <= 2.50" in r for r in rows), rows
    assert (tmp_path / "stores.json").exists()


@pytest.mark.slow
def test_compare_commits_quick() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = run_script("compare_commits.py", "HEAD", "--quick", "--backends", "memory", "--skip-runtime")
    rows = summary(out)
    assert any("memory 1KB load / floor: HEAD / base" in r for r in rows), rows


def test_trace_commit_prints_the_path_and_its_rule() -> None:
    out = run_script("trace_commit.py", "--quick")
    assert "HEAD: stops" in out and "stores.base" in out
    assert summary(out) == [r for r in summary(out) if "most returns to one module it left: goal <= 2" in r]


def test_packed_messages_are_seeded_sized_and_varied() -> None:
    import ormsgpack

    first = corpus.packed_messages(5, 100 * 1024)
    assert first == corpus.packed_messages(5, 100 * 1024)  # the same bytes on every run
    assert abs(len(ormsgpack.packb({"messages": first})) - 100 * 1024) <= 8
    roles = {m["role"] for m in first}
    assert roles == {"user", "assistant", "tool"}
    assert any("tool_calls" in m for m in first)
    for m in first:  # never one repeated character
        assert len(set(m["content"])) > 5, m
    rng = random.Random(1)
    sizes = {corpus.packed_size(corpus.packed_message(rng, i, 1024)) for i in range(20)}
    assert sizes <= {1022, 1023, 1024, 1025, 1026}, sizes


def test_interleave_turns_the_order_and_runs_before_untimed() -> None:
    calls: list[str] = []
    before: list[int] = []
    out = harness.interleave(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b"), "c": lambda: calls.append("c")},
        rounds=2,
        warmup=1,
        rotate=True,
        before=lambda: before.append(1),
    )
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert len(before) == 9 and all(len(v) == 2 for v in out.values())


def test_a_quiet_target_still_counts_in_the_summary(capsys: pytest.CaptureFixture[str]) -> None:
    rep = harness.Report("t", "quiet targets")
    for i in rep.runs(3):
        rep.target("ratio", 1.0 if i < 3 else 2.0, goal=1.5, echo=False)
    rep.finish()
    out = capsys.readouterr().out
    assert "goal <= 1.50 x: met" not in out  # no line per run
    assert "MET      ratio: goal <= 1.50 x; held in 2 of 3 runs (1.00, 1.00, 2.00)" in out
