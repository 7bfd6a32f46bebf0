"""The session layer stays inside its budget on long runs; the policy reports what it did."""

from __future__ import annotations

import pytest

from tether.context import SUMMARY_ID, ContextWindow, Layer, new_item
from tether.context.planted import generate_agent_transcript
from tether.context.policy import ContextPolicy
from tether.context.session import bound_summary, fold_lines, paragraph_text


def test_bound_summary_folds_oldest_lines_then_merges_paragraphs() -> None:
    """Oldest lines become paragraphs first; newest lines stay; paragraphs merge when needed."""
    lines = [f"$ docker build -t reg/app:{k} . → exit 0: reg/app:{k}" for k in range(60)]
    count = lambda text: len(text) // 4  # noqa: E731 - a stand-in tokenizer keeps it exact
    history, kept = bound_summary([], lines, budget=400, count=count)
    assert kept == lines[-len(kept) :] and len(kept) >= 6
    assert sum(p["ops"] for p in history) + len(kept) == 60
    total = sum(count(x) + 2 for x in kept) + sum(count(paragraph_text(p)) + 2 for p in history)
    assert total <= 400
    tight, kept2 = bound_summary(history, kept, budget=150, count=count)
    assert len(tight) < len(history) and sum(p["ops"] for p in tight) + len(kept2) == 60
    assert fold_lines(["$ npm ci → exit 1: ✗ EACCES", "$ npm ci → exit 0"]) == {
        "ops": 2, "failed": 1, "programs": {"npm ci": 2}, "facts": []}  # fmt: skip


def _steps(items):
    step = []
    for item in items:
        if item.kind == "tool_call" and any(i.kind == "tool_call" for i in step):
            yield step
            step = []
        step.append(item)
    yield step


@pytest.mark.slow
def test_a_long_run_keeps_the_session_layer_and_prompt_bounded() -> None:
    """300 operations at a 12k budget: never over budget, compressions rare, protected kept."""
    tr = generate_agent_transcript(seed=41, operations=300)
    window = ContextWindow("gpt-4o", budget=12_000)
    policy = ContextPolicy()
    session_budget = window.layer_budgets[Layer.SESSION]
    working_budget = window.layer_budgets[Layer.WORKING]
    compressions = []
    for n, step in enumerate(_steps(tr.items)):
        for item in step:
            window.add(item)
        events = policy.before_call(window)
        usage = window.usage()
        assert usage.tokens <= window.budget, n
        assert usage.layers[Layer.SESSION].tokens <= session_budget, n
        if any(e.kind == "context_compressed" for e in events):  # budgets bound layers when it compresses
            assert usage.layers[Layer.WORKING].tokens <= working_budget, n
        else:  # and a layer alone never compresses a window that fits
            assert usage.ratio <= 0.85 or usage.layers[Layer.WORKING].tokens <= working_budget, n
        compressions += [n for e in events if e.kind == "context_compressed"]
    late = [n for n in compressions if n >= 50]
    assert late and len(late) <= (n - 50) / 5
    summary = window.get(SUMMARY_ID)
    assert summary is not None and summary.metadata["history"]  # older lines became paragraphs
    kept = tr.retention(window.render())
    for column in ("goal", "constraint", "todo", "decision"):
        assert kept[column][0] == kept[column][1], column


def test_protected_items_over_the_session_budget_are_reported_not_dropped() -> None:
    """Decisions alone overflow the session layer: all kept, and the policy says so."""
    window = ContextWindow("gpt-4o", budget=6_000)
    for k in range(220):
        window.add(new_item("decision", f"Decision {k}: use mirror-{k}.example.com for packages"))
    for k in range(20):
        window.add(new_item("tool_call", "", tool_call_id=f"c{k}", metadata={"name": "sh", "arguments": {"command": f"make {k}"}}))  # fmt: skip
        window.add(new_item("tool_result", "ok\n" * 40, tool_call_id=f"c{k}"))
    events = ContextPolicy().before_call(window)
    kinds = [e.kind for e in events]
    assert "context_session_over" in kinds
    assert len([i for i in window.items() if i.kind == "decision"]) == 220
    assert any("protected items" in w for e in events for w in e.warnings)


def _command_pairs(window: ContextWindow, n: int, lines: int) -> None:
    for k in range(n):
        args = {"command": f"make target-{k}"}
        window.add(
            new_item("tool_call", "", tool_call_id=f"c{k}", metadata={"name": "sh", "arguments": args})
        )
        window.add(
            new_item("tool_result", f"step {k} built artefact-{k}.tar\n" * lines, tool_call_id=f"c{k}")
        )


def test_a_working_layer_over_its_own_budget_is_bounded_only_when_the_window_compresses() -> None:
    """Below the thresholds a working layer past its own budget borrows room and nothing is
    compressed; once usage crosses 85%, the compression bounds it to its share."""
    window = ContextWindow("gpt-4o", budget=40_000)
    working_budget = window.layer_budgets[Layer.WORKING]
    _command_pairs(window, 30, 40)
    before = window.usage()
    assert before.layers[Layer.WORKING].tokens > working_budget
    assert before.ratio < 0.70  # no threshold of the whole window is crossed
    policy = ContextPolicy()
    assert policy.before_call(window) == []
    assert window.usage() == before
    window.budget = round(before.tokens / 0.87)  # the same window, now at 87% of its budget
    window.layer_budgets[Layer.WORKING] = working_budget
    events = policy.before_call(window)
    assert [e.kind for e in events] == ["context_warning", "context_compressed"]
    assert events[1].level == "standard" and "standard threshold" in events[1].reason
    working = window.usage().layers[Layer.WORKING].tokens
    assert working <= round(working_budget * 0.60)
    assert "c29" in {i.tool_call_id for i in window.items(Layer.WORKING)}  # the newest stays in detail
    summary = window.get(SUMMARY_ID)
    assert summary is not None and "make target-0" in summary.content  # the oldest folded, not lost


def test_a_newest_operation_larger_than_the_working_budget_is_reported() -> None:
    window = ContextWindow("gpt-4o", budget=4_000, layer_budgets={Layer.SYSTEM: 500, Layer.SESSION: 1_500, Layer.WORKING: 600, Layer.INSTANT: 400})  # fmt: skip
    _command_pairs(window, 3, 120)
    result = window.compress("standard")
    assert "c2" in {i.tool_call_id for i in window.items(Layer.WORKING)}
    assert any("working layer" in w and "over its budget of 600" in w for w in result.warnings)


def test_checkpoint_hook_compresses_what_precedes_it_and_can_be_turned_off() -> None:
    """An orchestrator reports a passed checkpoint: what came before it folds (standard
    rules), later items stay; with checkpoint_compression off nothing changes."""
    window = ContextWindow("gpt-4o", budget=40_000)
    _command_pairs(window, 30, 40)
    small = window.usage()
    assert small.ratio < 0.35 and ContextPolicy().on_checkpoint(window, "cp-0") == []  # little to gain
    window.budget = round(small.tokens / 0.5)  # the same window at half its budget
    before = window.usage()
    assert ContextPolicy(checkpoint_compression=False).on_checkpoint(window, "cp-1") == []
    assert window.usage() == before
    events = ContextPolicy().on_checkpoint(window, "cp-1")
    assert [e.kind for e in events] == ["context_compressed"] and events[0].level == "checkpoint"
    assert events[0].reason == "checkpoint cp-1 passed"
    assert window.usage().tokens < before.tokens
    summary = window.get(SUMMARY_ID)
    assert summary is not None and "make target-0" in summary.content
