"""AnthropicChatModel against a real Messages API server on 127.0.0.1."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest

from tests.models._server import FakeServer, anthropic_error, anthropic_message
from tether.errors import ModelError, ModelUnavailable, PromptTooLong
from tether.models import AnthropicChatModel, Backoff, LLMConfig
from tether.models.anthropic import JSON_INSTRUCTION, to_anthropic_messages

KEY = "sk-ant-test-SECRET-0123456789"
FAST = Backoff(initial=0.01, max_wait=0.05, jitter=0.01)


def config(server: FakeServer, **overrides: object) -> LLMConfig:
    values: dict[str, object] = {
        "provider": "anthropic",
        "model": "claude-test",
        "api_key": KEY,
        "endpoint": server.url,
        "max_retries": 2,
        "timeout": 5.0,
    }
    values.update(overrides)
    return LLMConfig.model_validate(values)


@pytest.fixture
async def model(server: FakeServer) -> AsyncIterator[AnthropicChatModel]:
    async with AnthropicChatModel(config(server), backoff=FAST) as m:
        yield m


async def test_reply_usage_and_converted_request(server, model):
    """System goes to ``system``, turns alternate, usage counts cached prompt tokens."""
    server.script(anthropic_message("hello back", input_tokens=20, output_tokens=5, cache_read=100))
    reply = await model.complete(
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello"},
            {"role": "user", "content": "again"},
        ],
        max_tokens=64,
        temperature=0.2,
    )
    assert reply.text == "hello back"
    assert reply.model == "claude-test"
    assert reply.finish_reason == "stop"
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (
        120,
        5,
        125,
    )
    request = server.requests[0]
    assert request.path == "/v1/messages"
    sent = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix(
        "Bearer "
    )
    assert sent == KEY  # x-api-key in SDK 0.x/1.x, a bearer token in 2.x
    assert request.body["system"] == "be brief"
    assert request.body["messages"] == [{"role": "user", "content": "hello\n\nagain"}]
    assert request.body["max_tokens"] == 64
    if model._takes_temperature:  # SDK 2.x no longer sends sampling parameters
        assert request.body["temperature"] == 0.2


async def test_max_tokens_defaults_and_json_mode_instructs(server, model):
    """The API needs max_tokens: 4096 by default; json_mode adds an instruction to the system."""
    server.script(anthropic_message('{"ok": true}', stop_reason="max_tokens"))
    reply = await model.complete([{"role": "user", "content": "go"}], json_mode=True)
    assert reply.finish_reason == "length"
    body = server.requests[0].body
    assert body["max_tokens"] == 4096
    assert body["system"] == JSON_INSTRUCTION


async def test_429_then_success_honours_retry_after(server, model):
    """A rate limit with Retry-After is retried once after the wait."""
    server.script(
        anthropic_error(429, "rate_limit_error", "Number of requests exceeded", **{"retry-after": "0.3"}),
        anthropic_message("ok"),
    )
    reply = await model.complete([{"role": "user", "content": "hi"}])
    assert reply.text == "ok"
    assert len(server.requests) == 2
    assert server.requests[1].at - server.requests[0].at >= 0.3


async def test_overloaded_529_until_give_up(server, model):
    """Anthropic's 529 overloaded is transient; past max_retries it is ModelUnavailable."""
    server.script(*[anthropic_error(529, "overloaded_error", "Overloaded")] * 3)
    with pytest.raises(ModelUnavailable, match="HTTP 529: Overloaded"):
        await model.complete([{"role": "user", "content": "hi"}])
    assert len(server.requests) == 3


async def test_prompt_too_long_parses_counts(server, model):
    """'prompt is too long: N tokens > M maximum' becomes PromptTooLong(N, limit=M)."""
    server.script(
        anthropic_error(400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum")
    )
    with pytest.raises(PromptTooLong) as info:
        await model.complete([{"role": "user", "content": "x"}])
    assert (info.value.reported_tokens, info.value.limit) == (208310, 200000)


async def test_auth_error_is_model_error_without_the_key(server, model, caplog):
    """401 is not retried; the key is not in the error or the logs."""
    server.script(anthropic_error(401, "authentication_error", f"invalid x-api-key {KEY}"))
    with caplog.at_level(logging.DEBUG), pytest.raises(ModelError, match="HTTP 401") as info:
        await model.complete([{"role": "user", "content": "x"}])
    assert not isinstance(info.value, ModelUnavailable)
    assert KEY not in str(info.value)
    assert info.value.__cause__ is None  # the SDK's exception echoes the key: not chained
    assert KEY not in caplog.text
    assert KEY not in repr(model)


def test_messages_are_converted_to_alternating_turns():
    """Systems join, tool/unknown roles are the user, same-role turns merge, the user speaks first."""
    system, turns = to_anthropic_messages(
        [
            {"role": "system", "content": "rules"},
            {"role": "assistant", "content": "I will start"},
            {"role": "system", "content": "more rules"},
            {"role": "user", "content": [{"type": "text", "text": "block"}]},
            {"role": "tool", "content": "output"},
            {"role": "assistant", "content": ""},
        ]
    )
    assert system == "rules\n\nmore rules"
    assert turns == [
        {"role": "user", "content": "Continue."},
        {"role": "assistant", "content": "I will start"},
        {"role": "user", "content": "block\n\noutput"},
        {"role": "assistant", "content": "(empty)"},
    ]


def test_no_system_and_no_messages():
    """An empty conversation still makes a valid request."""
    assert to_anthropic_messages([]) == (None, [{"role": "user", "content": "Continue."}])
