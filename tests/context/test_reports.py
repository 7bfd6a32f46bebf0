from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tether.context import (
    ReportCache,
    ReportSummary,
    choose_level,
    extract_report_summary,
    format_report,
    read_report_summary,
)

REPORT = """# TEST report
iteration: 12
agent: TEST
结论：FAIL
阻塞：login returns 500; session cookie missing
timestamp: 2026-01-20T10:00:00Z

## 关键变更
- src/auth/login.py: retry on timeout
- tests/test_login.py: new case

## 证据
pytest -q tests/test_login.py -> 1 failed, 12 passed (AssertionError: 500 != 200)
"""


def test_extracts_the_seed_fields() -> None:
    """iteration, agent, verdict, blockers, key changes, evidence, timestamp."""
    s = extract_report_summary(REPORT)
    assert s == ReportSummary(
        iteration=12,
        agent="TEST",
        verdict="FAIL",
        blockers=("login returns 500", "session cookie missing"),
        key_changes=("src/auth/login.py: retry on timeout", "tests/test_login.py: new case"),
        evidence="pytest -q tests/test_login.py -> 1 failed, 12 passed (AssertionError: 500 != 200)",
        timestamp="2026-01-20T10:00:00Z",
    )


def test_english_labels_and_no_blockers() -> None:
    """Verdict: PASS and 'Blockers: none' give an empty blocker list."""
    s = extract_report_summary("Iteration: 3\nVerdict: **PASS**\nBlockers: none\nEvidence: " + "x" * 500)
    assert (s.iteration, s.verdict, s.blockers) == (3, "PASS", ())
    assert len(s.evidence) < 200


def test_verdict_only_from_the_first_ten_lines(caplog: pytest.LogCaptureFixture) -> None:
    """A verdict on line 11 is not a verdict (seed: fast check of the first 10 lines)."""
    late = "\n" * 10 + "结论：PASS\n"
    assert extract_report_summary(late).verdict == "UNKNOWN"
    assert "no PASS/FAIL/BLOCKED verdict" in caplog.text
    assert extract_report_summary("\n" * 9 + "结论：BLOCKED\n").verdict == "BLOCKED"


@pytest.mark.parametrize("text", ["", "\x00\x01garbage", "# title only", "阻塞：\n" * 100, "结论：MAYBE"])
def test_malformed_reports_never_raise(text: str, caplog: pytest.LogCaptureFixture) -> None:
    """Empty or garbled text gives defaults and a warning."""
    s = extract_report_summary(text)
    assert s.verdict == "UNKNOWN" and s.blockers == ()
    assert "no PASS/FAIL/BLOCKED verdict" in caplog.text


def test_missing_and_binary_files_never_raise(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A missing file or non-UTF-8 bytes still give a summary."""
    s = read_report_summary(tmp_path / "report_dev.md")
    assert s.verdict == "UNKNOWN" and s.agent == "DEV"
    assert "unreadable" in caplog.text
    bad = tmp_path / "report_review_3.md"
    bad.write_bytes(b"\xff\xfe\x00 verdict: PASS\n")
    got = read_report_summary(bad)
    assert got.verdict == "PASS" and got.agent == "REVIEW" and got.timestamp


def test_levels_respect_their_line_limits() -> None:
    """Level 1 ≤ 10 lines, level 2 ≤ 50 lines, level 3 the full text."""
    many = REPORT.replace("## 关键变更\n", "## 关键变更\n" + "".join(f"- change {i}\n" for i in range(80)))
    s = extract_report_summary(many)
    one, two = format_report(s, 1), format_report(s, 2)
    assert len(one.splitlines()) <= 10 and len(two.splitlines()) <= 50
    assert one.splitlines()[0] == "[TEST #12] verdict: FAIL"
    assert one.splitlines()[1] == "blockers: login returns 500; session cookie missing"
    assert format_report(s, 3, full_text=many) == many
    assert len(one) < len(two)


def test_level_downgrades_past_80_percent() -> None:
    """Over 80% of the prompt limit, any level becomes 1."""
    assert choose_level(3, prompt_tokens=79, limit=100) == 3
    assert choose_level(2, prompt_tokens=81, limit=100) == 1
    assert choose_level(3, prompt_tokens=81, limit=100) == 1
    with pytest.raises(ValueError):
        choose_level(4, prompt_tokens=0, limit=100)


def test_cache_is_invalidated_by_mtime(tmp_path: Path) -> None:
    """Unchanged files are served from cache; a rewrite is re-read."""
    path = tmp_path / "report_test.md"
    path.write_text(REPORT, encoding="utf-8")
    cache = ReportCache()
    assert cache.get(path).verdict == "FAIL"
    assert cache.get(path).verdict == "FAIL"
    assert (cache.hits, cache.misses) == (1, 1)
    path.write_text(REPORT.replace("FAIL", "PASS"), encoding="utf-8")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert cache.get(path).verdict == "PASS"
    assert cache.misses == 2
    restored = ReportCache.from_dict(cache.to_dict())
    assert restored.get(path).verdict == "PASS" and restored.hits == 1


def test_batch_extraction_of_200_reports_is_fast(tmp_path: Path) -> None:
    """Seed 001: extracting every report at start-up stays well under 100 ms."""
    paths = []
    for i in range(200):
        p = tmp_path / f"report_test_{i}.md"
        p.write_text(REPORT.replace("12", str(i)) + "filler line\n" * 400, encoding="utf-8")
        paths.append(p)
    cache = ReportCache()
    start = time.perf_counter()
    summaries = cache.batch(paths)
    elapsed = time.perf_counter() - start
    assert [s.iteration for s in summaries] == list(range(200))
    assert elapsed < 5.0  # a sanity bound on a loaded host; the benchmark measures the real figure
