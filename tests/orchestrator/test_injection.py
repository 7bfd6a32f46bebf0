"""The design's core cases: summaries, layered injection, the semantic history window,
sub-agents' history context and FINISH_CHECK with full reports (and its downgrades)."""

from __future__ import annotations

import logging
import os

from tether.context.reports import extract_verdict_fast
from tether.orchestrator import Blackboard, PromptConfig, SummaryStore
from tether.orchestrator.history import add_history, render_history
from tether.orchestrator.prompts import build_finish_check_prompt, build_main_prompt, build_role_prompt
from tether.orchestrator.summaries import inject_report

TEST_REPORT = """iteration: 3
结论：FAIL
阻塞：tests/test_stats.py::test_median_even - assert 3 == 2.5
命令：python -m pytest -q

## 失败用例
- tests/test_stats.py::test_median_even

coverage: 87%

## 证据
```
{body}
```
"""
DEV_REPORT = "iteration: 2\n结论：PASS\n阻塞：无\n\n## 关键变更\n- median() averages\n\n## 修改文件\n- stats.py\n\n自测：pytest ok\n{body}"
REVIEW_REPORT = (
    "iteration: 4\n结论：PASS\n阻塞：无\n\n## 证据来源\n- stats.py\n\n验证方式：read the code\n{body}"
)
FINISH_REPORT = "iteration: 5\n结论：PASS\n阻塞：无\n\n## 问题清单\n- P1: docs missing\n{body}"


def board_with_reports(tmp_path, body_lines=200):
    board = Blackboard(tmp_path)
    body = "\n".join(f"log line {i} " + "x" * 60 for i in range(body_lines))
    latest = {}
    for role, it, text in [
        ("TEST", 3, TEST_REPORT),
        ("DEV", 2, DEV_REPORT),
        ("REVIEW", 4, REVIEW_REPORT),
        ("FINISH_REVIEW", 5, FINISH_REPORT),
    ]:
        path = board.write(f"reports/report_{role.lower()}_{it}.md", text.format(body=body))
        latest[role] = {"iteration": it, "path": board.relative(path), "verdict": "", "blockers": []}
    history = {}
    for i in range(1, 31):
        history = add_history(
            history,
            i,
            "TEST",
            ["next_agent: TEST", f"reason: round {i} " + "r" * 200, "dev_plan: 1 tasks"],
            "FINISH attempt #1" if i == 7 else "",
        )
    board.write("project_history.md", render_history(history))
    state = {
        "task": "fix median",
        "iteration": 31,
        "dev_plan": [{"id": "t1", "title": "fix", "status": "DOING"}],
        "latest": latest,
    }
    return board, state


def test_summaries_per_type_levels_defaults_and_cache(tmp_path, caplog):
    """Case 2: per-type fields; level 1 < 10 lines, level 2 < 50; defaults; the cache."""
    caplog.set_level(logging.INFO, logger="tether.orchestrator")
    board, state = board_with_reports(tmp_path)
    store = SummaryStore(board)
    test = board.path(state["latest"]["TEST"]["path"])
    summary = store.get(test, agent="TEST", iteration=3)
    assert summary.verdict == "FAIL" and summary.iteration == 3
    assert summary.blockers == ("tests/test_stats.py::test_median_even - assert 3 == 2.5",)
    assert "command: python -m pytest -q" in summary.details
    assert "coverage: 87%" in summary.details
    dev = store.get(board.path(state["latest"]["DEV"]["path"]), agent="DEV", iteration=2)
    assert "files: stats.py" in dev.details and "self-test: pytest ok" in dev.details
    review = store.get(board.path(state["latest"]["REVIEW"]["path"]), agent="REVIEW", iteration=4)
    assert "evidence sources: stats.py" in review.details and "verification: read the code" in review.details
    fin = store.get(board.path(state["latest"]["FINISH_REVIEW"]["path"]), agent="FINISH_REVIEW", iteration=5)
    assert fin.details == ("issues: P1: docs missing",)
    level1 = inject_report(store, test, agent="TEST", iteration=3, level=1)
    level2 = inject_report(store, test, agent="TEST", iteration=3, level=2)
    assert len(level1.splitlines()) < 10 and len(level2.splitlines()) < 50
    assert len(inject_report(store, test, agent="TEST", iteration=3, level=3)) > 10 * len(level2)
    # a report without the standard header: defaults and a warning, never an exception
    bad = board.write("reports/report_dev_9.md", "did some stuff\n")
    empty = store.get(bad, agent="DEV", iteration=9)
    assert (empty.verdict, empty.iteration, empty.blockers) == ("UNKNOWN", 0, ())
    assert store.failures == 1 and "no PASS/FAIL/BLOCKED verdict" in caplog.text
    missing = store.get(board.path("reports/nope.md"), agent="DEV", iteration=10)
    assert missing.verdict == "UNKNOWN"
    # the cache: a hit while the mtime holds, persisted, invalidated by a new mtime
    hits = store.hits
    store.get(test, agent="TEST", iteration=3)
    assert store.hits == hits + 1
    assert "summary_extract agent=TEST level=2 cache_hit=true" in caplog.text
    store.flush()
    again = SummaryStore(board)
    again.get(test, agent="TEST", iteration=3)
    assert (again.hits, again.misses) == (1, 0)
    test.write_text(TEST_REPORT.replace("结论：FAIL", "结论：PASS").format(body=""))
    os.utime(test, ns=(1, 1))
    assert again.get(test, agent="TEST", iteration=3).verdict == "PASS" and again.misses == 1
    assert extract_verdict_fast(test) == "PASS"
    padded = board.write("reports/late.md", "\n" * 12 + "结论：FAIL\n")
    assert extract_verdict_fast(padded) == "UNKNOWN"  # only the first 10 lines are read


def test_main_prompt_levels_and_downgrade(tmp_path, caplog):
    """Case 3: level 1 at least 50% smaller than level 3; over 80% of the limit → level 1."""
    caplog.set_level(logging.INFO, logger="tether.orchestrator")
    board, state = board_with_reports(tmp_path)
    store = SummaryStore(board)
    config = PromptConfig(max_prompt_bytes=1_000_000)
    p1, _ = build_main_prompt(store, state, config, level=1)
    p2, _ = build_main_prompt(store, state, config, level=2)
    p3, _ = build_main_prompt(store, state, config, level=3)
    assert len(p1.encode()) <= 0.5 * len(p3.encode())
    assert len(p1) < len(p2) < len(p3)
    assert "verdict: FAIL" in p2 and "log line 150" in p3 and "log line 150" not in p2
    default, level = build_main_prompt(store, state, config)
    assert level == 2 and default == p2
    tight = PromptConfig(max_prompt_bytes=int(len(p2.encode()) / 0.8) - 1)
    prompt, level = build_main_prompt(store, state, tight)
    assert level == 1 and prompt == p1
    assert f"orchestrator: prompt_size stage=MAIN size={len(p1.encode())} level=1" in caplog.text


def test_semantic_history_keeps_milestones_within_budget(tmp_path):
    """Case 4: recent iterations ∪ milestones, non-milestones compressed, bounded."""
    board, state = board_with_reports(tmp_path)
    store = SummaryStore(board)
    prompt, _ = build_main_prompt(store, state, PromptConfig(history_last_n=3, history_max_tokens=2_000))
    history = prompt.split("## Project history", 1)[1]
    assert "## Iteration 7: [MILESTONE] FINISH attempt #1" in history
    assert "## Iteration 30:" in history and "## Iteration 28:" in history
    assert "## Iteration 27:" not in history and "## Iteration 3:" not in history
    (tmp_path / "b").mkdir()
    plain = board_with_reports(tmp_path / "b")[0]
    plain.write("project_history.md", render_history(add_history({}, 1, "TEST", ["next_agent: TEST"])))
    text, _ = build_main_prompt(SummaryStore(plain), state, PromptConfig())
    assert "## Iteration 1: TEST" in text  # no milestones: the fixed window


def test_roles_see_the_related_recent_reports(tmp_path):
    """Case 5: DEV sees TEST's summary, TEST sees DEV's, REVIEW both; no history is fine."""
    board, state = board_with_reports(tmp_path)
    store = SummaryStore(board)
    state["report_index"] = {r: [[e["iteration"], e["path"]]] for r, e in state["latest"].items()}
    config = PromptConfig()
    dev = build_role_prompt(store, state, config, role="DEV", iteration=6)
    test = build_role_prompt(store, state, config, role="TEST", iteration=6)
    review = build_role_prompt(store, state, config, role="REVIEW", iteration=6)
    assert "[TEST #3] verdict: FAIL" in dev and "[DEV #2]" not in dev
    assert "[DEV #2] verdict: PASS" in test and "[TEST #3]" not in test
    assert "[TEST #3]" in review and "[DEV #2]" in review
    assert "log line 150" not in dev  # level 2, not the full report
    first = build_role_prompt(store, {"task": "t"}, config, role="DEV", iteration=1)
    assert "Recent related reports" not in first and "iteration: 1" in first


def test_finish_check_injects_full_reports_and_downgrades_review_then_dev(tmp_path, caplog):
    """Case 6: all four reports whole; over the limit REVIEW, then DEV, become summaries."""
    caplog.set_level(logging.INFO, logger="tether.orchestrator")
    board, state = board_with_reports(tmp_path)
    store = SummaryStore(board)
    full = build_finish_check_prompt(store, state, PromptConfig(finish_check_max_bytes=10_000_000))
    assert full.downgraded == ()
    assert full.text.count("log line 150") == 4  # TEST, DEV, REVIEW, FINISH_REVIEW whole
    assert "1 tasks: DOING 1" in full.text
    one = build_finish_check_prompt(store, state, PromptConfig(finish_check_max_bytes=full.size - 1000))
    assert one.downgraded == ("REVIEW",) and one.text.count("log line 150") == 3
    two = build_finish_check_prompt(store, state, PromptConfig(finish_check_max_bytes=one.size - 1000))
    assert two.downgraded == ("REVIEW", "DEV") and two.text.count("log line 150") == 2
    assert "[REVIEW #4] verdict: PASS" in two.text and "[DEV #2] verdict: PASS" in two.text
    tiny = build_finish_check_prompt(store, state, PromptConfig(finish_check_max_bytes=100))
    assert tiny.downgraded == ("REVIEW", "DEV") and tiny.text.count("log line 150") == 2  # never less
    assert "finish_check_downgrade report=REVIEW" in caplog.text
    assert "finish_check_downgrade report=DEV" in caplog.text
    assert f"prompt_size stage=FINISH_CHECK size={two.size} level=3" in caplog.text
