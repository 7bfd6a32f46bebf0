from __future__ import annotations

import orjson
import pytest

from tether.context import (
    ContextItem,
    ContextWindow,
    Layer,
    TiktokenTokenizer,
    new_item,
)
from tether.context.testing import generate_transcript
from tether.context.window import scale_layer_budgets
from tether.errors import ContextError


def small_window(tokenizer=None, **kw) -> ContextWindow:
    w = ContextWindow("gpt-4", budget=1_000, tokenizer=tokenizer, **kw)
    w.add(ContextItem(id="sys", kind="system", content="Be careful.", layer=Layer.SYSTEM))
    w.add(ContextItem(id="goal", kind="goal", content="Ship v2.", layer=Layer.SESSION))
    w.add(ContextItem(id="u1", kind="message", content="Deploy it.", role="user"))
    w.add(
        ContextItem(
            id="c1",
            kind="tool_call",
            content="ls /srv",
            tool_call_id="t1",
            metadata={"name": "run", "arguments": {"cmd": "ls /srv"}},
        )
    )
    w.add(ContextItem(id="r1", kind="tool_result", content="app\nlogs", tool_call_id="t1"))
    w.add(ContextItem(id="rem", kind="reminder", content="One JSON action.", layer=Layer.INSTANT))
    return w


def test_render_is_exact() -> None:
    """render(): layer headings, labels, roles in the conversation layers."""
    assert small_window().render() == (
        "## System\n\nBe careful.\n\n"
        "## Session\n\nGoal: Ship v2.\n\n"
        "## Working\n\nuser: Deploy it.\n\nassistant: ls /srv\n\ntool: app\nlogs\n\n"
        "## Instant\n\nuser: Reminder: One JSON action."
    )


def test_openai_messages_are_exact() -> None:
    """One message per item; a named tool call becomes tool_calls + a tool message."""
    assert small_window().to_messages("openai") == [
        {"role": "system", "content": "Be careful."},
        {"role": "system", "content": "Goal: Ship v2."},
        {"role": "user", "content": "Deploy it."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "run", "arguments": '{"cmd": "ls /srv"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "app\nlogs"},
        {"role": "user", "content": "Reminder: One JSON action."},
    ]


def test_anthropic_messages_alternate_with_system_apart() -> None:
    """Anthropic shape: system string apart, tool_use/tool_result blocks, merged turns."""
    out = small_window().to_anthropic()
    assert out["system"] == "Be careful.\n\nGoal: Ship v2."
    assert out["messages"] == [
        {"role": "user", "content": "Deploy it."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "run", "input": {"cmd": "ls /srv"}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "app\nlogs"},
                {"type": "text", "text": "Reminder: One JSON action."},
            ],
        },
    ]
    roles = [m["role"] for m in out["messages"]]
    assert all(a != b for a, b in zip(roles, roles[1:], strict=False))


def test_anthropic_starts_with_user_and_unpaired_results_are_text() -> None:
    """A leading assistant turn gets a user opener; an unmatched tool result is plain text."""
    w = ContextWindow("claude-3-5-sonnet", budget=5_000)
    assert w.style == "anthropic"
    w.add(new_item("message", "thinking", id="a", role="assistant"))
    w.add(new_item("tool_result", "orphan", id="r", tool_call_id="zz"))
    msgs = w.to_messages()
    assert msgs[0] == {"role": "user", "content": "(continuing)"}
    assert msgs[1]["role"] == "assistant" and msgs[2] == {"role": "user", "content": "orphan"}


def test_usage_equals_an_exact_recount() -> None:
    """The running total equals counting the OpenAI messages from scratch."""
    w = ContextWindow("gpt-4", budget=200_000)
    w.add_many(generate_transcript(seed=3, operations=30).items)
    usage = w.usage()
    assert usage.tokens == w.count_exact()
    assert usage.tokens == sum(lay.tokens for lay in usage.layers.values()) + 3
    assert usage.ratio == pytest.approx(usage.tokens / 200_000)
    assert usage.layers[Layer.SYSTEM].items == 1


def test_usage_tracks_replace_and_remove() -> None:
    """Replacing or removing an item updates the total exactly."""
    w = small_window()
    w.replace(ContextItem(id="u1", kind="message", content="Deploy it now, please.", role="user"))
    assert w.usage().tokens == w.count_exact()
    w.remove("r1")
    w.remove("c1")
    assert w.usage().tokens == w.count_exact()
    assert [i.id for i in w] == ["sys", "goal", "u1", "rem"]


def test_replace_keeps_position_and_moves_layers() -> None:
    """A replaced item keeps its place; moving it to another layer re-sorts by seq."""
    w = small_window()
    w.replace(ContextItem(id="u1", kind="message", content="changed", role="user"))
    assert [i.id for i in w.items(Layer.WORKING)] == ["u1", "c1", "r1"]
    w.replace(ContextItem(id="u1", kind="message", content="moved", layer=Layer.INSTANT))
    assert [i.id for i in w.items(Layer.INSTANT)] == ["u1", "rem"]
    assert w.usage().tokens == w.count_exact()


def test_add_refuses_duplicates_and_replace_refuses_missing() -> None:
    """add/replace/remove are strict; upsert is add-or-replace."""
    w = small_window()
    with pytest.raises(ContextError):
        w.add(new_item("message", "x", id="u1"))
    with pytest.raises(ContextError):
        w.replace(new_item("message", "x", id="nope"))
    with pytest.raises(ContextError):
        w.remove("nope")
    w.upsert(new_item("message", "x", id="u1"))
    w.upsert(new_item("message", "y", id="u9"))
    assert w.get("u1").content == "x" and "u9" in w and len(w) == 7


def test_adding_one_item_counts_only_that_item(counting) -> None:
    """Cached-count invariant: growing a big window tokenizes just the new text."""
    w = ContextWindow("gpt-4", budget=500_000, tokenizer=counting)
    w.add_many(generate_transcript(seed=1, operations=100).items)
    counting.calls.clear()
    w.add(new_item("message", "one more message", id="new"))
    usage = w.usage()
    w.render()
    assert counting.calls == ["one more message"]
    assert usage.tokens == w.count_exact()


def test_readding_identical_content_is_free(counting) -> None:
    """The cache is keyed by content, so compressors' reused items cost nothing."""
    w = ContextWindow("gpt-4", budget=10_000, tokenizer=counting)
    w.add(new_item("message", "same text", id="a"))
    w.add(new_item("message", "same text", id="b"))
    w.replace_all(list(w.items()))
    assert counting.calls.count("same text") == 1


def test_calibration_scales_usage_without_recount(counting) -> None:
    """A provider report changes the ratio; the items are not counted again."""
    w = ContextWindow("gpt-4", budget=100_000, tokenizer=counting)
    w.add_many(generate_transcript(seed=2, operations=10).items)
    raw = w.usage().raw_tokens
    counting.calls.clear()
    usage = w.observe_provider_usage(round(raw * 1.1))
    assert counting.calls == []
    assert usage.tokens == pytest.approx(raw * 1.1, abs=1)
    assert usage.raw_tokens == raw


def test_layer_budgets_scale_with_the_seed_proportions() -> None:
    """Seed 004's 2K/20K/10K/5K shares, scaled to the window's budget."""
    budgets = scale_layer_budgets(37_000)
    assert budgets == {
        Layer.SYSTEM: 2_000,
        Layer.SESSION: 20_000,
        Layer.WORKING: 10_000,
        Layer.INSTANT: 5_000,
    }
    assert sum(scale_layer_budgets(123_457).values()) == 123_457
    w = ContextWindow("gpt-4o")
    assert w.budget == 128_000 - 4_096


def _json_like(value: object) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_like(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_json_like(v) for v in value)
    return value is None or isinstance(value, str | int | float | bool)


def test_state_round_trip_is_exact(counting) -> None:
    """to_state is JSON-like; from_state restores items, order, usage and calibration."""
    w = ContextWindow("gpt-4", budget=300_000, tokenizer=counting)
    w.add_many(generate_transcript(seed=5, operations=40).items)
    w.observe_provider_usage(round(w.usage().raw_tokens * 1.05))
    state = w.to_state()
    assert _json_like(state)
    decoded = orjson.loads(orjson.dumps(state))
    counting.calls.clear()
    back = ContextWindow.from_state(decoded, tokenizer=counting)
    # same tokenizer: cached counts are trusted; only the role names are counted
    assert set(counting.calls) <= {"system", "user", "assistant", "tool"}
    assert back.snapshot() == w.snapshot()
    assert back.usage() == w.usage()
    assert back.render() == w.render()
    assert back.to_state() == state
    added = back.add(new_item("message", "after restore"))
    assert added.seq > max(i.seq for i in w.items())


def test_state_from_another_tokenizer_recounts(tok: TiktokenTokenizer) -> None:
    """Counts made by a different tokenizer are not trusted."""
    w = small_window()
    state = w.to_state()
    state["tokenizer"] = "other"
    state["items"][0]["tokens"] = 999
    back = ContextWindow.from_state(state, tokenizer=tok)
    assert back.get("sys").tokens == tok.count("Be careful.")


def test_item_dicts_carry_ids_for_the_state_reducer() -> None:
    """Items as a list of dicts keyed by id, each one restorable."""
    w = small_window()
    dicts = w.item_dicts()
    assert [d["id"] for d in dicts] == [i.id for i in w]
    assert [ContextItem.from_dict(d) for d in dicts] == w.items()


def test_bad_state_is_a_context_error() -> None:
    """Garbage in from_state raises ContextError, not KeyError."""
    with pytest.raises(ContextError):
        ContextWindow.from_state({"model": "gpt-4"})
    with pytest.raises(ContextError):
        ContextItem.from_dict({"id": "x", "content": "y", "kind": "nonsense"})
    with pytest.raises(ContextError, match="newer"):
        ContextWindow.from_state({**small_window().to_state(), "version": 99})


def test_with_count_copies_every_field_but_the_count_and_seq() -> None:
    """The fast copy a window makes of each item keeps every field a new one may add."""
    import dataclasses

    from tether.context.items import ContextItem, Layer, with_count

    item = ContextItem(
        id="x", kind="decision", content="use valkey", layer=Layer.SESSION, role="user", priority=3,
        pinned=True, tokens=2, phase="2", todo_id="t1", tool_call_id="c1", seq=4, metadata={"k": 1},
    )  # fmt: skip
    blank = ContextItem(id="y", content="")
    names = [f.name for f in dataclasses.fields(ContextItem)]
    assert all(getattr(item, n) != getattr(blank, n) for n in names)  # a dropped field would show
    assert with_count(item, 7) == dataclasses.replace(item, tokens=7)
    assert with_count(item, 7, 9) == dataclasses.replace(item, tokens=7, seq=9)
