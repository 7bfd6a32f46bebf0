from __future__ import annotations

import asyncio
import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.context import (
    SUMMARY_ID,
    BackgroundCompressor,
    ContextItem,
    ContextWindow,
    InMemoryArtifactStore,
    ItemCounter,
    Layer,
    LLMSummarizer,
    StructuredSummarizer,
    SummaryRequest,
    TiktokenTokenizer,
    compress,
    compress_async,
    fit,
    group_units,
    load_archived_items,
    new_item,
)
from tether.context.testing import generate_transcript
from tether.errors import BudgetExceeded

COUNTER = ItemCounter(TiktokenTokenizer())


def uncounted(item: ContextItem) -> ContextItem:
    return dataclasses.replace(item, tokens=-1)


def contains(items: tuple[ContextItem, ...], item: ContextItem) -> bool:
    """Membership by value, ignoring the cached token count."""
    return uncounted(item) in [uncounted(i) for i in items]


def window_for(seed: int, operations: int) -> ContextWindow:
    w = ContextWindow("gpt-4", budget=10_000_000)
    w.add_many(generate_transcript(seed=seed, operations=operations).items)
    return w


def assert_protected_kept(before: list[ContextItem], after: tuple[ContextItem, ...]) -> None:
    by_id = {i.id: i for i in after}
    for item in before:
        if item.protected:
            assert item.id in by_id, item.id
            kept = by_id[item.id]
            assert kept.content == item.content  # byte-for-byte
            assert kept == item


def assert_pairs_intact(before: list[ContextItem], after: tuple[ContextItem, ...]) -> None:
    kept = {i.id for i in after}
    for unit in group_units(before):
        present = {i.id in kept for i in unit}
        assert len(present) == 1, [i.id for i in unit]


@pytest.mark.parametrize(("seed", "operations"), [(1, 80), (2, 150), (3, 300)])
@pytest.mark.parametrize(("level", "target"), [("standard", 0.60), ("deep", 0.30)])
def test_levels_land_near_their_target(seed: int, operations: int, level: str, target: float) -> None:
    """Standard keeps ~60%, deep ~30% (±10 points), and every rule holds."""
    w = window_for(seed, operations)
    before = w.items()
    result = compress(before, level, counter=w.counter)  # type: ignore[arg-type]
    assert abs(result.kept_ratio - target) <= 0.10
    assert_protected_kept(before, result.items)
    assert_pairs_intact(before, result.items)
    assert result.summary_id == SUMMARY_ID
    assert COUNTER.total(result.items) == result.after_tokens


def test_standard_keeps_last_three_operations_in_detail() -> None:
    """The three newest operations stay verbatim even when the target is tiny."""
    w = window_for(4, 60)
    before = w.items()
    result = compress(before, "standard", counter=w.counter, target_ratio=0.01)
    ops = [u for u in group_units(before) if u[0].kind in ("message", "tool_call", "tool_result", "error")]
    kept = {i.id: i for i in result.items}
    for unit in ops[-3:]:
        assert all(kept.get(i.id) == i for i in unit)
    assert not any(i.id in kept for i in ops[-4])


def test_planted_facts_survive_compression() -> None:
    """Goal, pinned, TODO and decisions: 100%; operation facts via the summary lines."""
    tr = generate_transcript(seed=7, operations=120)
    for level in ("standard", "deep"):
        w = ContextWindow("gpt-4", budget=10_000_000)
        w.add_many(tr.items)
        w.compress(level)  # type: ignore[arg-type]
        retention = tr.retention(w.render())
        for cat in ("system", "goal", "pinned", "todo", "decision", "operation"):
            kept, total = retention[cat]
            assert kept == total, (level, cat, kept, total)


def test_query_results_and_repeats_are_dropped() -> None:
    """Intermediate query results and duplicate outputs go; the latest copy stays."""
    items = [
        new_item("goal", "g", id="g", seq=1),
        new_item("query_result", "old search " * 50, id="q1", seq=2),
        new_item("operation", "same op", id="o1", seq=3),
        new_item("operation", "same op", id="o2", seq=4),
        new_item("operation", "later op", id="o3", seq=5),
        new_item("query_result", "current search", id="q2", seq=6),
    ]
    result = compress(items, "standard", counter=COUNTER)
    ids = {i.id for i in result.items}
    assert "q1" not in ids and "q1" in result.dropped_ids
    assert "o1" in result.dropped_ids and "o2" in ids
    assert "q2" in ids  # not yet used by any operation


def test_compression_is_deterministic() -> None:
    """Same input, same output, across fresh counters."""
    items = generate_transcript(seed=8, operations=90).items
    a = compress(items, "standard", counter=ItemCounter(TiktokenTokenizer()))
    b = compress(items, "standard", counter=ItemCounter(TiktokenTokenizer()))
    assert a == b
    assert compress(items, "deep", counter=COUNTER) == compress(items, "deep", counter=COUNTER)


def test_summary_follows_the_seed_template_and_rolls_forward() -> None:
    """Six sections in order; a second compression carries the earlier lines."""
    w = window_for(9, 80)
    w.compress("standard")
    summary = w.get(SUMMARY_ID)
    assert summary is not None
    text = summary.content
    headings = [
        "[Goal]",
        "[Completed work]",
        "[Current state]",
        "[Key decisions]",
        "[Next step]",
        "[Constraints]",
    ]
    positions = [text.index(h) for h in headings]
    assert positions == sorted(positions)
    first_lines = list(summary.metadata["completed"])
    more = generate_transcript(seed=10, operations=30).items[20:]
    w.add_many(dataclasses.replace(i, id=f"more-{i.id}", seq=0) for i in more)
    w.compress("deep")
    second = w.get(SUMMARY_ID)
    assert list(second.metadata["completed"])[: len(first_lines)] == first_lines


def test_pinned_operations_are_never_folded() -> None:
    """A pinned tool result keeps its call with it, untouched."""
    items = list(generate_transcript(seed=11, operations=40).items)
    idx = next(i for i, it in enumerate(items) if it.kind == "tool_result")
    pinned = dataclasses.replace(items[idx], pinned=True)
    items[idx] = pinned
    result = compress(items, "deep", counter=COUNTER)
    assert contains(result.items, pinned)
    call = next(i for i in items if i.tool_call_id == pinned.tool_call_id and i.kind == "tool_call")
    assert contains(result.items, call)


def test_archive_makes_compression_recoverable() -> None:
    """The full pre-compression history is written first and reads back exactly."""
    store = InMemoryArtifactStore()
    w = window_for(12, 50)
    before = w.snapshot()
    result = w.compress("deep", archive=store)
    assert result.archive_id is not None
    assert tuple(load_archived_items(store, result.archive_id)) == before
    assert result.archive_id in w.get(SUMMARY_ID).content


def test_phase_compression_folds_a_finished_phase() -> None:
    """One paragraph with status and artefact ids; decisions of the phase stay."""
    w = window_for(13, 40)
    decisions = [i for i in w if i.kind == "decision" and i.phase == "phase-1"]
    result = w.compress_phase("phase-1", status="done")
    paragraph = w.get("phase-summary:phase-1")
    assert paragraph is not None and paragraph.content.startswith("✅ phase phase-1 (20 items)")
    assert "log-00000" in paragraph.content and paragraph.metadata["artifacts"] == ["log-00000"]
    assert all(w.get(d.id) == d for d in decisions)
    assert not any(i.phase == "phase-1" and i.kind == "tool_result" for i in w)
    assert result.after_tokens < result.before_tokens
    assert w.compress_phase("phase-9").summarized_ids == ()


def test_checkpoint_compression_leaves_later_items_alone() -> None:
    """Only what precedes the checkpoint is compressed."""
    w = window_for(14, 60)
    cut = w.items(Layer.WORKING)[len(w.items(Layer.WORKING)) // 2].seq
    after_cut = [i for i in w if i.seq > cut]
    w.compress("checkpoint", before_seq=cut)
    assert all(w.get(i.id) == i for i in after_cut)
    with pytest.raises(ValueError):
        compress(w.items(), "checkpoint", counter=COUNTER)


def test_fit_reaches_the_budget_or_raises() -> None:
    """fit() escalates standard → deep → squeeze; pinned alone over budget raises."""
    items = generate_transcript(seed=15, operations=80).items
    total = COUNTER.total(items)
    for share in (0.7, 0.4, 0.2, 0.05):
        result = fit(items, int(total * share), counter=COUNTER)
        assert result.after_tokens <= int(total * share)
        assert_pairs_intact(list(items), result.items)
        assert all(contains(result.items, i) for i in items if i.pinned)
    assert fit(items, total, counter=COUNTER).level == "none"
    with pytest.raises(BudgetExceeded):
        fit(items, 50, counter=COUNTER)


@st.composite
def item_lists(draw: st.DrawFn) -> list[ContextItem]:
    kinds = ["goal", "todo", "decision", "operation", "query_result", "message", "error", "reminder", "state"]
    n = draw(st.integers(1, 40))
    items: list[ContextItem] = []
    for i in range(n):
        text = draw(st.text(alphabet="abc xyz\n字🚀", min_size=0, max_size=120))
        if draw(st.booleans()) and i + 1 < 60:
            call = f"t{i}"
            items.append(new_item("tool_call", text or "call", id=f"c{i}", tool_call_id=call, seq=2 * i + 1))
            items.append(
                new_item(
                    "tool_result",
                    text * 3,
                    id=f"r{i}",
                    tool_call_id=call,
                    seq=2 * i + 2,
                    pinned=draw(st.booleans()) and draw(st.booleans()),
                )
            )
        else:
            kind = draw(st.sampled_from(kinds))
            items.append(
                new_item(
                    kind,
                    text,
                    id=f"i{i}",
                    seq=2 * i + 1,  # type: ignore[arg-type]
                    pinned=draw(st.integers(0, 9)) == 0,
                    priority=draw(st.integers(0, 2)),
                )
            )
    return items


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=item_lists(), share=st.floats(0.0, 1.0))
def test_fit_never_exceeds_a_feasible_budget(items: list[ContextItem], share: float) -> None:
    """Property: whenever pinned items fit, the result fits, keeps them and keeps pairs."""
    total = COUNTER.total(items)
    floor = COUNTER.total(
        i
        for i in items
        if i.pinned or any(j.pinned for j in items if j.tool_call_id and j.tool_call_id == i.tool_call_id)
    )
    budget = floor + int((total - floor) * share)
    result = fit(items, budget, counter=COUNTER)
    assert COUNTER.total(result.items) <= budget
    assert all(contains(result.items, i) for i in items if i.pinned)
    assert_pairs_intact(items, result.items)


class FakeModel:
    def __init__(self, answer: str | Exception) -> None:
        self.answer = answer
        self.calls: list[list[dict]] = []

    async def complete(self, messages: list[dict]) -> str:
        self.calls.append(messages)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


async def test_llm_summarizer_uses_the_model_answer() -> None:
    """The model sees the template instructions and the folded material."""
    model = FakeModel("[Goal]\nship\n[Completed work]\n- all")
    items = generate_transcript(seed=16, operations=30).items
    result = await compress_async(items, "standard", counter=COUNTER, summarizer=LLMSummarizer(model))
    summary = next(i for i in result.items if i.id == SUMMARY_ID)
    assert summary.content == "[Goal]\nship\n[Completed work]\n- all"
    system, user = model.calls[0]
    assert "[Key decisions]" in system["content"] and "exit 0" in user["content"]


async def test_llm_summarizer_falls_back_on_failure(caplog: pytest.LogCaptureFixture) -> None:
    """A failing or empty model gives the structured summary and a warning."""
    request = SummaryRequest(level="standard", goal="ship it", completed=("did a",))
    expected = StructuredSummarizer().summarize(request)
    assert await LLMSummarizer(FakeModel(RuntimeError("down"))).summarize(request) == expected
    assert await LLMSummarizer(FakeModel("  ")).summarize(request) == expected
    assert "LLM summariser failed" in caplog.text and "returned nothing" in caplog.text


async def test_background_compression_applies_and_keeps_new_items() -> None:
    """Items added while compressing are kept; the result applies at apply_pending()."""
    w = window_for(17, 60)
    bg = BackgroundCompressor(w, archive=InMemoryArtifactStore())
    assert bg.apply_pending() is None
    assert bg.start("standard") and not bg.start("deep")
    late = w.add(new_item("message", "arrived during compression", id="late"))
    await bg.wait()
    result = bg.apply_pending()
    assert result is not None and result.archive_id
    assert w.get("late") == late
    assert w.get(SUMMARY_ID) is not None
    assert w.usage().tokens == w.count_exact()


async def test_background_compression_discards_a_stale_result() -> None:
    """If an item of the snapshot changed meanwhile, the result is dropped, not merged."""
    w = window_for(18, 40)
    bg = BackgroundCompressor(w)
    bg.start("deep")
    victim = next(i for i in w if i.kind == "tool_result")
    w.replace(dataclasses.replace(victim, content="edited"))
    await asyncio.sleep(0)
    await bg.wait()
    assert bg.apply_pending() is None
    assert w.get(victim.id).content == "edited" and w.get(SUMMARY_ID) is None


def test_reused_tool_call_ids_pair_each_call_with_the_result_after_it() -> None:
    """A provider that reuses ``call_0`` every turn: six units, the oldest fold, the newest stay."""
    w = ContextWindow("gpt-4", budget=10**7)
    w.add(new_item("goal", "ship it"))
    for turn in range(6):
        args = {"command": f"make step{turn}"}
        w.add(new_item("tool_call", "", tool_call_id="call_0", metadata={"name": "sh", "arguments": args}))
        w.add(new_item("tool_result", f"output of turn {turn}\n" + "x " * 400, tool_call_id="call_0"))
    calls = [u for u in group_units(w.items()) if u[0].kind == "tool_call"]
    assert [len(u) for u in calls] == [2] * 6
    assert [u[1].content.split("\n")[0] for u in calls] == [f"output of turn {t}" for t in range(6)]
    w.compress("standard")
    results = [i.content.split("\n")[0] for i in w.items() if i.kind == "tool_result"]
    assert results[-1] == "output of turn 5" and "output of turn 0" not in results
    summary = w.get(SUMMARY_ID)
    assert summary is not None and "$ make step0" in summary.content
    messages = w.to_messages("openai")
    for k, message in enumerate(messages):
        if message["role"] == "tool":
            assert messages[k - 1].get("tool_calls"), "a tool message must follow its call"


def test_deep_keeps_at_least_what_fit_keeps_at_the_same_ratio() -> None:
    from tether.context.planted import generate_agent_transcript

    tr = generate_agent_transcript(seed=13, operations=150)
    deep = ContextWindow("gpt-4", budget=10**7)
    deep.add_many(tr.items)
    result = deep.compress("deep")
    fitted = ContextWindow("gpt-4", budget=10**7)
    fitted.add_many(tr.items)
    fitted.fit(deep.usage().tokens)
    assert fitted.usage().tokens <= deep.usage().tokens
    kept_deep, kept_fit = tr.retention(deep.render()), tr.retention(fitted.render())
    for column, (found, _planted) in kept_fit.items():
        assert kept_deep[column][0] >= found, (column, kept_deep[column], found, result.kept_ratio)
