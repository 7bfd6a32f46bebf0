from __future__ import annotations

from pathlib import Path

import pytest

from tether.context import (
    ArtifactNotFound,
    ContextWindow,
    FileArtifactStore,
    InMemoryArtifactStore,
    TiktokenTokenizer,
    call_with_recovery,
    is_prompt_too_long,
    new_item,
    trim_item,
    trim_output,
)
from tether.context.recovery import reported_prompt_tokens
from tether.context.testing import generate_transcript
from tether.errors import BudgetExceeded

TOK = TiktokenTokenizer()
LOG = "".join(f"line {i}: compiling module_{i}.c ... ok\n" for i in range(3_000))


@pytest.mark.parametrize("store_kind", ["memory", "file"])
def test_oversized_output_is_previewed_and_stored(store_kind: str, tmp_path: Path) -> None:
    """Head and tail within budget, a marker naming the artefact, the full text stored."""
    store = InMemoryArtifactStore() if store_kind == "memory" else FileArtifactStore(tmp_path / "art")
    out = trim_output(LOG, max_tokens=400, tokenizer=TOK, store=store)
    assert out.trimmed and out.tokens <= 400 and TOK.count(out.text) == out.tokens
    assert out.text.startswith("line 0: ") and out.text.endswith(
        "line 2999: compiling module_2999.c ... ok\n"
    )
    assert f"artifact {out.artifact_id}" in out.text and "tokens (" in out.text
    assert store.get(out.artifact_id) == LOG
    assert out.artifact_id in set(store.ids())


def test_small_output_is_untouched() -> None:
    """Fitting output is not stored and not changed."""
    store = InMemoryArtifactStore()
    out = trim_output("ok\n", max_tokens=10, tokenizer=TOK, store=store)
    assert not out.trimmed and out.text == "ok\n" and list(store.ids()) == []


def test_trim_item_records_the_artifact() -> None:
    """The item's metadata names the artefact and the original size."""
    store = InMemoryArtifactStore()
    item = new_item("tool_result", LOG, id="r", tool_call_id="t")
    trimmed = trim_item(item, max_tokens=300, tokenizer=TOK, store=store)
    assert trimmed.metadata["artifact_id"] and trimmed.metadata["trimmed_from"] == TOK.count(LOG)
    assert store.get(trimmed.metadata["artifact_id"]) == LOG
    assert trimmed.tool_call_id == "t"


def test_file_store_is_content_addressed_and_safe(tmp_path: Path) -> None:
    """Same data, same id; unknown or path-like ids are not found."""
    store = FileArtifactStore(tmp_path)
    a = store.put("hello 世界 🚀")
    assert store.put("hello 世界 🚀") == a and store.get(a) == "hello 世界 🚀"
    assert store.exists(a) and not store.exists("../etc/passwd")
    with pytest.raises(ArtifactNotFound):
        store.get("../../etc/passwd")
    with pytest.raises(ArtifactNotFound):
        InMemoryArtifactStore().get("text-0")


class TooLong(Exception):
    pass


def test_prompt_too_long_detection() -> None:
    """Known provider messages are recognised and their token counts parsed."""
    anthropic = TooLong("prompt is too long: 210345 tokens > 200000 maximum")
    openai = TooLong(
        "This model's maximum context length is 8192 tokens. However, your messages resulted in 9001 tokens."
    )
    assert is_prompt_too_long(anthropic) and is_prompt_too_long(openai)
    assert reported_prompt_tokens(anthropic) == 210345 and reported_prompt_tokens(openai) == 9001
    assert not is_prompt_too_long(TooLong("rate limited"))


async def test_recovery_compresses_and_retries() -> None:
    """A refused prompt is compressed harder and retried; the window shrinks each time."""
    w = ContextWindow("gpt-4", budget=1_000_000)
    w.add_many(generate_transcript(seed=21, operations=60).items)
    sizes: list[int] = []

    async def call(window: ContextWindow) -> str:
        sizes.append(window.usage().tokens)
        if len(sizes) < 3:
            raise TooLong(f"prompt is too long: {window.usage().raw_tokens} tokens > 10 maximum")
        return "answer"

    store = InMemoryArtifactStore()
    assert await call_with_recovery(w, call, max_attempts=3, archive=store) == "answer"
    assert sizes[0] > sizes[1] > sizes[2]
    assert len(list(store.ids())) == 2  # history archived before each compression


async def test_recovery_gives_up_with_budget_exceeded() -> None:
    """Bounded attempts, then BudgetExceeded; other errors pass straight through."""
    w = ContextWindow("gpt-4", budget=1_000_000)
    w.add_many(generate_transcript(seed=22, operations=20).items)
    calls = 0

    async def refuse(window: ContextWindow) -> str:
        nonlocal calls
        calls += 1
        raise TooLong("context_length_exceeded")

    with pytest.raises(BudgetExceeded):
        await call_with_recovery(w, refuse, max_attempts=2)
    assert calls == 2

    async def other(window: ContextWindow) -> str:
        raise KeyError("boom")

    with pytest.raises(KeyError):
        await call_with_recovery(w, other)


def test_the_fact_lines_of_the_cut_middle_stay_in_the_preview(tok) -> None:
    """An error, a file written, a port, a version and a configuration in the middle of a
    long log reach the model; the full text stays readable by id."""
    from tether.context import InMemoryArtifactStore
    from tether.context.trim import trim_output

    lines = [f"{k:05d} GET /api/orders status=200 ms={k % 97}" for k in range(4000)]
    planted = {
        1200: "KeyError: 'X_REDIS_URL'",
        1900: "wrote /opt/ledger/releases/r42/manifest.json",
        2300: "ledger-api listening on :9090",
        2600: "PostgreSQL 16.3 on x86_64-pc-linux-gnu, server version 16.3",
        2900: "configured POOL_SIZE value 64",
    }
    for k, line in planted.items():
        lines[k] = line
    store = InMemoryArtifactStore()
    out = trim_output("\n".join(lines), max_tokens=600, tokenizer=tok, store=store)
    assert out.trimmed and out.tokens <= 600
    for line in planted.values():
        assert line in out.text
    assert out.artifact_id is not None and store.get(out.artifact_id).count("\n") == 3999
    assert out.text.index("cut from the middle") < out.text.index("KeyError")  # after the marker
