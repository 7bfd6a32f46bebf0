"""Provider errors classified by cause, through the agent loop against a real HTTP server
on 127.0.0.1: a malformed body and a prompt that stays too long are DATA failures (roll back
and report), the latter after exactly one compression and retry."""

from __future__ import annotations

import json

import pytest

from tests.models._server import FakeServer, Response, anthropic_error, chat_completion, openai_error
from tests.stores.conftest import new_id
from tether.agent import AgentLoop, LoopConfig
from tether.models import LLMConfig
from tether.models.anthropic import AnthropicChatModel
from tether.models.openai import OpenAIChatModel
from tether.runtime import FailureKind, classify
from tether.state import RunStatus
from tether.state.reserved import runtime_state
from tether.stores import open_store
from tether.tools import LocalSession

TOO_LONG = (
    "This model's maximum context length is 4096 tokens. However, your messages resulted in "
    "9000 tokens. Please reduce the length of the messages."
)


@pytest.fixture
async def store(tmp_path):
    async with open_store(f"sqlite:///{tmp_path}/runs.db") as s:
        yield s


@pytest.fixture
def server():
    srv = FakeServer().start()
    try:
        yield srv
    finally:
        srv.stop()


def _openai(server: FakeServer) -> OpenAIChatModel:
    cfg = LLMConfig(
        provider="openai-compatible",
        model="m",
        endpoint=f"{server.url}/v1",
        api_key="sk-test-0123456789abcdef0123",
        max_retries=0,
    )
    return OpenAIChatModel(cfg)


def _prompt_chars(request) -> int:
    return len(json.dumps(request.body["messages"]))


async def test_a_prompt_still_too_long_after_one_compression_is_a_data_failure(server, store, tmp_path):
    (tmp_path / "big.log").write_text("".join(f"line {i}: building module {i} ok\n" for i in range(3000)))
    server.script(
        chat_completion(json.dumps({"action": "execute", "command": "cat big.log"})),
        openai_error(400, TOO_LONG, code="context_length_exceeded"),
        openai_error(400, TOO_LONG, code="context_length_exceeded"),
        openai_error(400, TOO_LONG, code="context_length_exceeded"),  # never asked for
    )
    model = _openai(server)
    loop = AgentLoop(model, LocalSession(cwd=tmp_path), store, config=LoopConfig(max_iterations=5))
    result = await loop.start(new_id(), "build it")
    await model.aclose()
    assert len(server.requests) == 3  # the action, then one refusal, one compression, one refusal
    first, second = server.requests[1], server.requests[2]
    assert _prompt_chars(second) < _prompt_chars(first)  # the retry sent a compressed prompt
    report = runtime_state(result.state)["failure_report"]
    assert result.status is RunStatus.PAUSED  # waits for a decision, as any DATA failure
    assert (report["kind"], report["error_type"]) == ("data", "BudgetExceeded")
    assert "too long 2 times" in report["error"]


@pytest.mark.parametrize(
    "body",
    [
        Response(status=200, body="<html>502 from a proxy</html>", content_type="application/json"),
        Response(status=200, body={"id": "x", "object": "chat.completion", "choices": []}),
    ],
    ids=["not-json", "no-choices"],
)
async def test_a_malformed_provider_body_is_a_data_failure_after_one_call(server, store, tmp_path, body):
    server.script(body, body, body)
    model = _openai(server)
    result = await AgentLoop(model, LocalSession(cwd=tmp_path), store).start(new_id(), "g")
    await model.aclose()
    assert len(server.requests) == 1
    report = runtime_state(result.state)["failure_report"]
    assert (report["kind"], report["error_type"]) == ("data", "MalformedResponse")
    assert "malformed" in report["error"]


async def test_anthropic_prompt_too_long_and_malformed_message_classify_as_data(server):
    cfg = LLMConfig(
        provider="anthropic", model="claude-test", endpoint=server.url, api_key="sk-ant-test-0123456789abcdef"
    )
    server.script(
        anthropic_error(400, "invalid_request_error", "prompt is too long: 210345 tokens > 200000 maximum"),
        Response(status=200, body={"id": "m", "type": "message", "role": "assistant"}),
    )
    async with AnthropicChatModel(cfg) as model:
        for _ in range(2):
            with pytest.raises(Exception) as caught:
                await model.complete([{"role": "user", "content": "hi"}])
            assert classify(caught.value) is FailureKind.DATA, repr(caught.value)
