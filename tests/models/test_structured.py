"""Structured outputs and streaming against real HTTP servers on 127.0.0.1 that speak the
OpenAI and Anthropic wire formats: the schema goes out natively, the object comes back,
a refusal falls back to JSON mode, and streamed pieces arrive before the reply ends."""

from __future__ import annotations

import json
import time

from tests.models import test_anthropic as anth
from tests.models import test_openai as oai
from tests.models._server import (
    Response,
    anthropic_events,
    anthropic_message,
    chat_chunks,
    chat_completion,
    openai_error,
)
from tether.agent.actions import AgentAction, parse_action
from tether.agent.calls import ACTION_SCHEMA
from tether.models import AnthropicChatModel, OpenAIChatModel
from tether.models.anthropic import JSON_INSTRUCTION

ACTION = {"action": "execute", "command": "make test", "reasoning": "run the suite"}


def tool_completion(name: str, arguments: str) -> Response:
    response = chat_completion("", finish_reason="tool_calls")
    message = response.body["choices"][0]["message"]
    message["content"] = None
    message["tool_calls"] = [
        {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}
    ]
    return response


def anthropic_tool(name: str, value: dict) -> Response:
    response = anthropic_message("")
    response.body["content"] = [
        {"type": "text", "text": "Let me pick the next step."},
        {"type": "tool_use", "id": "toolu_1", "name": name, "input": value},
    ]
    response.body["stop_reason"] = "tool_use"
    return response


async def test_openai_sends_the_schema_as_a_json_schema_response_format(server):
    """The action's JSON schema goes out by name; the reply's object is parsed once."""
    server.script(chat_completion(json.dumps(ACTION)))
    async with OpenAIChatModel(oai.config(server), backoff=oai.FAST) as model:
        reply = await model.complete(oai.USER, json_mode=True, schema=ACTION_SCHEMA)
    fmt = server.requests[0].body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "agent_action"
    assert fmt["json_schema"]["schema"]["properties"]["action"]["enum"][0] == "execute"
    assert set(fmt["json_schema"]["schema"]["properties"]) == set(
        AgentAction.model_json_schema(by_alias=True)["properties"]
    )
    assert reply.structured == ACTION and parse_action(reply.text).command == "make test"


async def test_openai_tools_mode_forces_the_function_and_reads_its_arguments(server):
    """structured_output="tools": a forced function call whose arguments are the reply."""
    server.script(tool_completion("agent_action", json.dumps(ACTION)))
    cfg = oai.config(server, structured_output="tools")
    async with OpenAIChatModel(cfg, backoff=oai.FAST) as model:
        reply = await model.complete(oai.USER, json_mode=True, schema=ACTION_SCHEMA)
    body = server.requests[0].body
    assert body["tool_choice"] == {"type": "function", "function": {"name": "agent_action"}}
    assert body["tools"][0]["function"]["parameters"]["required"] == ["action"]
    assert "response_format" not in body
    assert reply.structured == ACTION and reply.finish_reason == "tool_calls"
    assert parse_action(reply.text).action_type == "execute"


async def test_an_endpoint_refusing_the_schema_falls_back_to_json_mode_for_good(server, caplog):
    """A 400 about response_format: asked again in JSON mode, and every later call too."""
    server.script(
        openai_error(400, "response_format type json_schema is not supported by this server"),
        chat_completion(json.dumps(ACTION)),
        chat_completion(json.dumps({"action": "done", "message": "ok"})),
    )
    async with OpenAIChatModel(oai.config(server), backoff=oai.FAST) as model:
        first = await model.complete(oai.USER, json_mode=True, schema=ACTION_SCHEMA)
        second = await model.complete(oai.USER, json_mode=True, schema=ACTION_SCHEMA)
    formats = [r.body["response_format"]["type"] for r in server.requests]
    assert formats == ["json_schema", "json_object", "json_object"]
    assert parse_action(first.text).command == "make test" and first.structured is None
    assert parse_action(second.text).action_type == "done"
    assert "refused the structured output" in caplog.text


async def test_a_bad_key_is_not_mistaken_for_a_refused_schema(server):
    """401 stays an error at once: no second request in JSON mode."""
    server.script(openai_error(401, "invalid api key"))
    async with OpenAIChatModel(oai.config(server), backoff=oai.FAST) as model:
        try:
            await model.complete(oai.USER, schema=ACTION_SCHEMA)
        except Exception as exc:
            assert "HTTP 401" in str(exc)
        else:
            raise AssertionError("a 401 must raise")
    assert len(server.requests) == 1


async def test_anthropic_forces_the_tool_and_reads_its_input(server):
    """A forced tool instead of the JSON instruction; the tool's input is the reply."""
    server.script(anthropic_tool("agent_action", ACTION))
    async with AnthropicChatModel(anth.config(server), backoff=anth.FAST) as model:
        reply = await model.complete(oai.USER, json_mode=True, schema=ACTION_SCHEMA)
    body = server.requests[0].body
    assert body["tool_choice"] == {"type": "tool", "name": "agent_action"}
    assert body["tools"][0]["input_schema"]["properties"]["action"]["type"] == "string"
    assert JSON_INSTRUCTION not in body.get("system", "")
    assert reply.structured == ACTION and json.loads(reply.text) == ACTION
    assert reply.finish_reason == "tool_calls"


async def test_structured_output_off_keeps_json_mode_and_the_text_parser(server):
    """structured_output="off": JSON mode only, whatever the caller asks."""
    server.script(chat_completion("Sure:\n```json\n" + json.dumps(ACTION) + "\n```"))
    cfg = oai.config(server, structured_output="off")
    async with OpenAIChatModel(cfg, backoff=oai.FAST) as model:
        reply = await model.complete(oai.USER, schema=ACTION_SCHEMA)
    assert server.requests[0].body["response_format"] == {"type": "json_object"}
    assert reply.structured is None and parse_action(reply.text).command == "make test"


# -- streaming ---------------------------------------------------------------------


async def test_openai_streams_pieces_before_the_reply_ends(server):
    """Each piece reaches the sink while the server is still sending; the reply is whole."""
    text = json.dumps(ACTION)
    pieces = [text[i : i + 7] for i in range(0, len(text), 7)]
    server.script(chat_chunks(pieces, delay=0.05))
    got: list[tuple[float, str]] = []
    async with OpenAIChatModel(oai.config(server), backoff=oai.FAST) as model:
        reply = await model.complete(
            oai.USER, schema=ACTION_SCHEMA, on_delta=lambda p: got.append((time.monotonic(), p))
        )
        ended = time.monotonic()
    assert [p for _t, p in got] == pieces and reply.text == text
    assert ended - got[0][0] > 0.2  # the first piece came well before the end
    assert reply.structured == ACTION and reply.finish_reason == "stop"
    assert reply.usage is not None and reply.usage.prompt_tokens == 30
    assert server.requests[0].body["stream"] is True


async def test_openai_streams_a_forced_function_call(server):
    """In tools mode the streamed pieces are the call's arguments."""
    text = json.dumps(ACTION)
    server.script(chat_chunks([text[:10], text[10:]], tool="agent_action"))
    got: list[str] = []
    cfg = oai.config(server, structured_output="tools")
    async with OpenAIChatModel(cfg, backoff=oai.FAST) as model:
        reply = await model.complete(oai.USER, schema=ACTION_SCHEMA, on_delta=got.append)
    assert "".join(got) == text and reply.structured == ACTION and reply.finish_reason == "tool_calls"


async def test_anthropic_streams_text_and_tool_input(server):
    """Text deltas, then a forced tool's partial JSON: both reach the sink, in order."""
    server.script(anthropic_events(["Hel", "lo", " there"], delay=0.02))
    text_pieces: list[str] = []
    async with AnthropicChatModel(anth.config(server), backoff=anth.FAST) as model:
        reply = await model.complete(oai.USER, on_delta=text_pieces.append)
        assert text_pieces == ["Hel", "lo", " there"] and reply.text == "Hello there"
        assert reply.usage is not None and (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (
            25,
            12,
        )
        text = json.dumps(ACTION)
        server.script(anthropic_events([text[:12], text[12:]], tool="agent_action"))
        json_pieces: list[str] = []
        tool = await model.complete(oai.USER, schema=ACTION_SCHEMA, on_delta=json_pieces.append)
    assert "".join(json_pieces) == text and tool.structured == ACTION and tool.finish_reason == "tool_calls"
    assert server.requests[1].body["stream"] is True


async def test_a_stream_cut_by_a_5xx_is_retried_from_the_start(server):
    """A 503 before the stream: retried, and the sink sees only the good attempt."""
    server.script(openai_error(503, "overloaded"), chat_chunks(["ab", "cd"]))
    got: list[str] = []
    async with OpenAIChatModel(oai.config(server), backoff=oai.FAST) as model:
        reply = await model.complete(oai.USER, on_delta=got.append)
    assert got == ["ab", "cd"] and reply.text == "abcd" and len(server.requests) == 2


async def test_the_agent_loop_acts_on_forced_function_calls(server, tmp_path):
    """End to end: the loop asks for its action schema; the server answers with calls only."""
    from tether.agent import AgentLoop
    from tether.state import RunStatus
    from tether.stores import open_store
    from tether.tools import LocalSession

    server.script(
        tool_completion("agent_action", json.dumps({"action": "execute", "command": "echo from-a-call"})),
        tool_completion("agent_action", json.dumps({"action": "done", "message": "ran it"})),
    )
    cfg = oai.config(server, structured_output="tools")
    async with (
        open_store(f"sqlite:///{tmp_path}/s.db") as store,
        OpenAIChatModel(cfg, backoff=oai.FAST) as model,
    ):
        result = await AgentLoop(model, LocalSession(cwd=tmp_path), store).start("structured-1", "echo")
    assert result.status is RunStatus.COMPLETED and result.state["final_output"] == "ran it"
    assert "from-a-call" in result.state["command_history"][0]["stdout"]
    assert all(r.body["tool_choice"]["function"]["name"] == "agent_action" for r in server.requests)
    assert result.state["prompt_log"][0]["provider"] == "openai-compatible"
