"""ScriptedModel: replies from a list or a function, recorded calls, fake usage."""

from __future__ import annotations

import json

import pytest

from tether.context.tokens import HeuristicTokenizer, count_messages
from tether.errors import ConfigError, ModelError, ModelUnavailable
from tether.models import ChatModel, ModelReply, ScriptedModel, TextCompletion, Usage
from tether.models.testing import ScriptedModel as ReExported
from tether.models.testing import ScriptExhausted

MSGS = [{"role": "system", "content": "rules"}, {"role": "user", "content": "deploy it"}]


def test_is_a_chat_model_and_reexported_from_testing():
    """It satisfies the protocol and is importable from tether.models.testing."""
    assert isinstance(ScriptedModel(), ChatModel)
    assert ReExported is ScriptedModel


async def test_replies_in_order_dicts_as_json():
    """Strings come back as is, dicts as JSON text, ModelReply untouched."""
    canned = ModelReply(text="raw", model="x", finish_reason="length")
    model = ScriptedModel(["plain", {"action": "done", "ok": True}, canned])
    assert (await model.complete(MSGS)).text == "plain"
    assert json.loads((await model.complete(MSGS)).text) == {"action": "done", "ok": True}
    assert await model.complete(MSGS) is canned
    assert model.remaining == 0


async def test_exceptions_in_the_script_are_raised():
    """An exception instance is raised for its call; the script then continues."""
    model = ScriptedModel([ModelUnavailable("down"), "after"])
    with pytest.raises(ModelUnavailable, match="down"):
        await model.complete(MSGS)
    assert (await model.complete(MSGS)).text == "after"


async def test_enqueue_flattens_lists_and_appends():
    """enqueue(a, b) and enqueue([a, b]) both append in order."""
    model = ScriptedModel()
    model.enqueue("one", ["two", {"n": 3}])
    model.enqueue("four")
    texts = [(await model.complete(MSGS)).text for _ in range(4)]
    assert texts == ["one", "two", '{"n": 3}', "four"]


async def test_running_out_is_a_clear_error():
    """The error names the call number and the last message."""
    model = ScriptedModel(["only"])
    await model.complete(MSGS)
    with pytest.raises(ScriptExhausted, match=r"ran out of replies at call 2.*deploy it") as info:
        await model.complete(MSGS)
    assert isinstance(info.value, ModelError)


def test_a_bare_string_is_refused():
    """ScriptedModel("x") would script one reply per character: refused."""
    with pytest.raises(ConfigError, match=r"wrap the single reply"):
        ScriptedModel("oops")  # type: ignore[arg-type]


async def test_calls_are_deep_copies_with_options():
    """Later mutation by the caller does not change what was recorded."""
    model = ScriptedModel(["a"])
    messages = [{"role": "user", "content": "first"}]
    await model.complete(messages, json_mode=True, max_tokens=10)
    messages[0]["content"] = "changed"
    messages.append({"role": "user", "content": "more"})
    assert model.calls == [[{"role": "user", "content": "first"}]]
    assert model.call_options == [
        {"json_mode": True, "max_tokens": 10, "temperature": None, "schema": None, "streamed": False}
    ]


async def test_function_answers_every_call():
    """A function of the messages, sync or async, answers each call."""
    sync = ScriptedModel(lambda messages: {"echo": messages[-1]["content"]})
    assert json.loads((await sync.complete(MSGS)).text) == {"echo": "deploy it"}

    async def answer(messages):
        return f"{len(messages)} messages"

    async_model = ScriptedModel(answer)
    assert (await async_model.complete(MSGS)).text == "2 messages"
    assert len(async_model.calls) == 1


async def test_fake_usage_matches_the_heuristic_framing():
    """Prompt tokens agree with count_messages over the len/4 tokenizer, so calibration stays ~1."""
    model = ScriptedModel(["a reply of some length"])
    reply = await model.complete(MSGS)
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == count_messages(MSGS, HeuristicTokenizer())
    assert reply.usage.completion_tokens == 6
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 6


async def test_usage_can_be_off_or_custom():
    """usage=False reports none; count_tokens replaces the estimate."""
    assert (await ScriptedModel(["x"], usage=False).complete(MSGS)).usage is None
    words = ScriptedModel(["three word reply"], count_tokens=lambda text: len(text.split()))
    usage = (await words.complete(MSGS)).usage
    assert usage is not None and usage.completion_tokens == 3


async def test_text_completion_adapter_reports_usage():
    """TextCompletion gives the context engine's summariser plain text, and passes usage on."""
    seen: list[Usage] = []
    adapter = TextCompletion(ScriptedModel(["summary"]), max_tokens=100, on_usage=seen.append)
    assert await adapter.complete(MSGS) == "summary"
    assert len(seen) == 1
    assert adapter.model.call_options[0]["max_tokens"] == 100  # type: ignore[attr-defined]
