"""OpenAIChatModel against a real chat-completions server on 127.0.0.1."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import AsyncIterator

import pytest

from tests.models._server import FakeServer, Response, chat_completion, openai_error
from tether.errors import ModelError, ModelUnavailable, PromptTooLong
from tether.models import Backoff, LLMConfig, OpenAIChatModel

KEY = "sk-test-SECRET-0123456789abcdef"
FAST = Backoff(initial=0.01, max_wait=0.05, jitter=0.01)
USER = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]


def config(server: FakeServer, **overrides: object) -> LLMConfig:
    values: dict[str, object] = {
        "provider": "openai-compatible",
        "model": "test-model",
        "api_key": KEY,
        "endpoint": f"{server.url}/v1",
        "max_retries": 3,
        "timeout": 5.0,
    }
    values.update(overrides)
    return LLMConfig.model_validate(values)


@pytest.fixture
async def model(server: FakeServer) -> AsyncIterator[OpenAIChatModel]:
    async with OpenAIChatModel(config(server), backoff=FAST) as m:
        yield m


async def test_scripted_replies_come_back_with_usage(server, model):
    """Text, model, finish reason and usage are read from the completion."""
    server.script(chat_completion("first", prompt_tokens=42, completion_tokens=3), chat_completion("second"))
    reply = await model.complete(USER)
    assert reply.text == "first"
    assert reply.model == "test-model"
    assert reply.finish_reason == "stop"
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (42, 3, 45)
    assert reply.raw is not None and reply.raw["id"] == "chatcmpl-1"
    assert (await model.complete(USER)).text == "second"


async def test_request_carries_messages_options_and_key(server, model):
    """The body is the chat-completions request; the key goes in the Authorization header."""
    server.script(chat_completion("{}"))
    await model.complete(USER, json_mode=True, max_tokens=50, temperature=0.3)
    request = server.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.body["model"] == "test-model"
    assert request.body["messages"] == USER
    assert request.body["max_tokens"] == 50
    assert request.body["temperature"] == 0.3
    assert request.body["response_format"] == {"type": "json_object"}


async def test_config_defaults_apply_when_call_leaves_them_unset(server):
    """temperature and max_tokens fall back to the config; OpenAI proper gets max_completion_tokens."""
    server.script(chat_completion("a"), chat_completion("b"))
    async with OpenAIChatModel(config(server, temperature=0.7, max_tokens=99), backoff=FAST) as m:
        await m.complete(USER)
    body = server.requests[0].body
    assert (body["temperature"], body["max_tokens"]) == (0.7, 99)
    assert "response_format" not in body
    async with OpenAIChatModel(config(server, provider="openai", max_tokens=99), backoff=FAST) as m:
        await m.complete(USER)
    assert server.requests[1].body["max_completion_tokens"] == 99
    assert "max_tokens" not in server.requests[1].body


async def test_429_with_retry_after_is_waited_for_then_succeeds(server, model):
    """Retry-After: 1 holds the retry back about a second; one retry, then the reply."""
    server.script(openai_error(429, "rate limited", **{"retry-after": "1"}), chat_completion("ok"))
    started = time.monotonic()
    reply = await model.complete(USER)
    assert reply.text == "ok"
    assert len(server.requests) == 2
    gap = server.requests[1].at - server.requests[0].at
    assert 1.0 <= gap < 2.0
    assert time.monotonic() - started < 3.0


async def test_500_twice_then_success_retries_twice(server, model, caplog):
    """Two 5xx answers are retried with backoff and logged as warnings, then the reply returns."""
    server.script(openai_error(500, "boom"), openai_error(502, "bad gateway"), chat_completion("ok"))
    with caplog.at_level(logging.WARNING, logger="tether.models"):
        reply = await model.complete(USER)
    assert reply.text == "ok"
    assert len(server.requests) == 3
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert len(retries) == 2
    assert "HTTP 500: boom; retry 1/3" in retries[0]


async def test_persistent_5xx_gives_up_as_model_unavailable(server, model):
    """After max_retries the failure is ModelUnavailable, naming the attempts."""
    server.script(*[openai_error(503, "overloaded")] * 4)
    with pytest.raises(ModelUnavailable, match=r"HTTP 503: overloaded \(gave up after 4 attempts"):
        await model.complete(USER)
    assert len(server.requests) == 4


async def test_retry_after_beyond_the_cap_fails_at_once(server):
    """A server that asks for an hour's wait is not waited for."""
    server.script(openai_error(429, "slow down", **{"retry-after": "3600"}))
    backoff = Backoff(initial=0.01, max_wait=0.05, jitter=0.01, max_retry_after=10)
    async with OpenAIChatModel(config(server), backoff=backoff) as m:
        with pytest.raises(ModelUnavailable, match="retry after 3600s"):
            await m.complete(USER)
    assert len(server.requests) == 1


async def test_quota_exhausted_429_is_not_retried(server, model):
    """OpenAI's insufficient_quota is a billing problem, not a rate limit."""
    server.script(openai_error(429, "You exceeded your current quota", code="insufficient_quota"))
    with pytest.raises(ModelError, match="quota") as info:
        await model.complete(USER)
    assert not isinstance(info.value, ModelUnavailable)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "response",
    [
        Response(body="<html>502 from the proxy</html>", content_type="text/html"),
        Response(body="{not json", content_type="application/json"),
        Response(body={"id": "x", "object": "chat.completion"}),
        Response(body={"id": "x", "choices": []}),
    ],
    ids=["html", "broken-json", "no-choices", "empty-choices"],
)
async def test_malformed_reply_is_a_model_error(server, model, response):
    """A 200 that is not a chat completion is a ModelError, not retried."""
    server.script(response)
    with pytest.raises(ModelError, match="malformed") as info:
        await model.complete(USER)
    assert not isinstance(info.value, ModelUnavailable)
    assert len(server.requests) == 1


async def test_context_length_400_is_prompt_too_long_with_counts(server, model):
    """OpenAI's context_length_exceeded becomes PromptTooLong with the reported tokens."""
    message = (
        "This model's maximum context length is 8192 tokens. However, your messages resulted in "
        "9,731 tokens. Please reduce the length of the messages."
    )
    server.script(openai_error(400, message, code="context_length_exceeded"))
    with pytest.raises(PromptTooLong) as info:
        await model.complete(USER)
    assert info.value.reported_tokens == 9731
    assert info.value.limit == 8192
    assert len(server.requests) == 1


async def test_llama_cpp_context_error_uses_its_counts(server, model):
    """llama.cpp reports the counts as fields of the error."""
    server.script(
        Response(
            status=400,
            body={
                "error": {
                    "code": 400,
                    "message": "the request exceeds the available context size, try increasing it",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": 5000,
                    "n_ctx": 4096,
                }
            },
        )
    )
    with pytest.raises(PromptTooLong) as info:
        await model.complete(USER)
    assert (info.value.reported_tokens, info.value.limit) == (5000, 4096)


async def test_other_4xx_is_a_model_error_with_the_providers_message(server, model):
    """401/404 are not retried and say what the provider said."""
    server.script(openai_error(404, "The model `nope` does not exist"))
    with pytest.raises(ModelError, match="HTTP 404: The model `nope` does not exist"):
        await model.complete(USER)
    assert len(server.requests) == 1


async def test_timeout_is_transient(server):
    """A server slower than the timeout counts as unavailable after the retries."""
    server.script(Response(delay=1.0, body={}), Response(delay=1.0, body={}))
    async with OpenAIChatModel(config(server, timeout=0.2, max_retries=1), backoff=FAST) as m:
        with pytest.raises(ModelUnavailable, match="timed out"):
            await m.complete(USER)


async def test_connection_refused_is_transient():
    """Nothing listening is retried, then ModelUnavailable."""
    with socket.socket() as sock:  # a port that was free a moment ago, and is closed now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cfg = LLMConfig(
        provider="openai-compatible", model="m", endpoint=f"http://127.0.0.1:{port}/v1", max_retries=1
    )
    async with OpenAIChatModel(cfg, backoff=FAST) as m:
        with pytest.raises(ModelUnavailable, match=r"connection failed.*gave up after 2 attempts"):
            await m.complete(USER)


async def test_api_key_never_in_logs_reprs_or_errors(server, caplog):
    """The key reaches the server and nothing else: not logs at DEBUG, reprs or exceptions."""
    leaky = f"Incorrect API key provided: {KEY}"
    server.script(
        chat_completion("fine"),
        openai_error(401, leaky),
        openai_error(500, leaky),
        openai_error(500, leaky),
        openai_error(400, f"maximum context length is 10 tokens, resulted in 20 tokens ({KEY})"),
    )
    cfg = config(server, max_retries=1)
    errors: list[str] = []
    with caplog.at_level(logging.DEBUG):
        async with OpenAIChatModel(cfg, backoff=FAST) as m:
            await m.complete([{"role": "user", "content": "hi"}])
            for _ in range(3):
                with pytest.raises(ModelError) as info:
                    await m.complete(USER)
                errors += [str(info.value), repr(info.value), str(info.value.__cause__)]
            errors += [repr(m), repr(cfg), str(cfg), str(cfg.public_dict())]
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert caplog.records, "expected DEBUG logging to be captured"
    assert KEY not in caplog.text
    for text in errors:
        assert KEY not in text
    assert any("***" in text for text in errors)
