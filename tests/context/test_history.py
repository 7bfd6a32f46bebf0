from __future__ import annotations

from tether.context import (
    HistoryEntry,
    TiktokenTokenizer,
    build_history_window,
    detect_milestones,
    parse_history,
)


def history(n: int) -> str:
    parts = []
    for i in range(1, n + 1):
        title = ""
        body = (
            f"next_agent: DEV\nreason: fix bug {i}\ndev_plan: 2 tasks changed\nlog line {i}\n"
            + "detail " * 40
        )
        if i == 5:
            body = "TEST verdict: PASS\nnext_agent: REVIEW\nreason: first green\n" + "detail " * 40
        if i == 12:
            title = " [MILESTONE] 用户决策 - 选择方案A"
        if i == 20:
            body = "next_agent: FINISH\nreason: all done\n" + "detail " * 40
        if i == 25:
            body = "dev_plan: 7 tasks changed\nreason: replan\n" + "detail " * 40
        parts.append(f"## Iteration {i}:{title}\n{body}")
    return "\n".join(parts)


TOK = TiktokenTokenizer()


def test_parse_and_detect_milestones() -> None:
    """Marked headings, first TEST PASS, FINISH attempts and big plan changes."""
    entries = detect_milestones(parse_history(history(30)))
    reasons = {e.iteration: e.milestone_reason for e in entries if e.milestone}
    assert reasons == {
        5: "first TEST PASS",
        12: "用户决策 - 选择方案A",
        20: "FINISH attempt #1",
        25: "big plan change",
    }


def test_window_is_recent_union_milestones() -> None:
    """Last N iterations plus milestones; old non-milestones are compressed."""
    win = build_history_window(
        parse_history(history(30)), tokenizer=TOK, max_tokens=100_000, last_n=4, min_recent=2
    )
    assert win.recent_iterations == (27, 28, 29, 30)
    assert win.milestone_iterations == (5, 12, 20, 25)
    assert "## Iteration 12:" in win.text and "log line 29" in win.text and "log line 30" in win.text
    assert "log line 27" not in win.text and "reason: fix bug 27" in win.text  # compressed
    assert "## Iteration 3:" not in win.text
    assert win.compression_ratio < 1.0


def test_window_respects_the_token_budget_but_keeps_min_recent() -> None:
    """Over budget: drop compressed recents, then milestones; never the newest ones."""
    entries = parse_history(history(30))
    full = build_history_window(entries, tokenizer=TOK, max_tokens=100_000, last_n=6, min_recent=2)
    tight = build_history_window(
        entries, tokenizer=TOK, max_tokens=full.total_tokens // 2, last_n=6, min_recent=2
    )
    assert tight.total_tokens <= full.total_tokens // 2
    assert TOK.count(tight.text) <= tight.total_tokens
    assert {29, 30} <= set(tight.recent_iterations)
    tiny = build_history_window(entries, tokenizer=TOK, max_tokens=10, last_n=6, min_recent=2)
    assert tiny.recent_iterations == (29, 30) and tiny.milestone_iterations == ()


def test_no_milestones_degrades_to_a_fixed_window() -> None:
    """Without cues, the window is just the last N."""
    entries = [HistoryEntry(iteration=i, text=f"## Iteration {i}\nnext_agent: DEV") for i in range(1, 11)]
    win = build_history_window(entries, tokenizer=TOK, max_tokens=10_000, last_n=3)
    assert win.recent_iterations == (8, 9, 10) and win.milestone_iterations == ()
    assert build_history_window([], tokenizer=TOK, max_tokens=100).text == ""
