"""Anthropic's Messages API through the official ``anthropic`` SDK.

OpenAI-shaped messages are converted on the way in: system messages (wherever they are)
become the ``system`` parameter, other roles fold into strictly alternating user /
assistant turns that start with the user. There is no JSON mode: ``json_mode=True`` adds
an instruction to the system prompt and the caller parses tolerantly
(:func:`~tether.models.parse_json_reply`); a ``schema`` is enforced as a forced tool
(``tool_choice``), whose input is the reply's object.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.errors import ConfigError, MalformedResponse
from tether.models._provider import (
    Backoff,
    SdkChatModel,
    json_object,
    preview,
    response_dict,
)
from tether.models.base import DeltaSink, ModelReply, OutputSchema, Usage
from tether.models.config import LLMConfig

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic

__all__ = ["AnthropicChatModel", "to_anthropic_messages"]

DEFAULT_MAX_TOKENS = 4096
"""The Messages API requires ``max_tokens``; used when neither the call nor the config sets it."""

JSON_INSTRUCTION = "Reply with one JSON object and nothing else: no prose, no code fences."

_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def _import_anthropic() -> Any:
    try:
        import anthropic
    except ImportError:
        raise ConfigError(
            "AnthropicChatModel needs the anthropic SDK: pip install 'tether[anthropic]'"
        ) from None
    return anthropic


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            str(block.get("text", ""))
            for block in content
            if isinstance(block, Mapping) and block.get("type", "text") == "text"
        ]
        return "\n".join(part for part in parts if part)
    return "" if content is None else str(content)


def to_anthropic_messages(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Split OpenAI-shaped messages into Anthropic's ``system`` and alternating turns.

    ``system`` (and ``developer``) messages join the system prompt in order; ``tool`` and
    unknown roles count as the user. Consecutive turns of one role merge with a blank
    line between them; a conversation that starts with the assistant gets a short user
    turn first, because the API requires the user to speak first.
    """
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = str(message.get("role", "user"))
        text = _text(message.get("content"))
        if role in ("system", "developer"):
            if text:
                system.append(text)
            continue
        role = "assistant" if role == "assistant" else "user"
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] = f"{turns[-1]['content']}\n\n{text}" if text else turns[-1]["content"]
        else:
            turns.append({"role": role, "content": text})
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": "Continue."})
    for turn in turns:
        if not turn["content"]:
            turn["content"] = "(empty)"  # the API refuses empty text blocks
    return ("\n\n".join(system) or None), turns


class AnthropicChatModel(SdkChatModel):
    """A :class:`~tether.models.ChatModel` over Anthropic's Messages API (retried on 529
    "overloaded" too).

    Args: as :class:`~tether.models._provider.SdkChatModel`; ``client`` is an ``AsyncAnthropic``.
    """

    _client: AsyncAnthropic

    def __init__(
        self,
        config: LLMConfig,
        *,
        allow_local: bool = True,
        backoff: Backoff | None = None,
        client: AsyncAnthropic | None = None,
    ) -> None:
        super().__init__(config, allow_local=allow_local, backoff=backoff, client=client)
        # recent SDKs (2.x) dropped sampling parameters along with the API; older ones take them
        self._takes_temperature = "temperature" in inspect.signature(self._client.messages.create).parameters

    def _import_sdk(self) -> Any:
        return _import_anthropic()

    def _new_client(self) -> AsyncAnthropic:
        client: AsyncAnthropic = self._sdk.AsyncAnthropic(
            api_key=self._secret,
            base_url=self._base_url,
            timeout=self.config.timeout,
            max_retries=0,
        )
        return client

    def __repr__(self) -> str:
        return f"AnthropicChatModel(model={self.model!r}, base_url={self._base_url!r})"

    def _request(
        self,
        messages: list[dict[str, Any]],
        *,
        json_mode: bool,
        max_tokens: int | None,
        temperature: float | None,
        schema: OutputSchema | None = None,
    ) -> dict[str, Any]:
        system, turns = to_anthropic_messages(messages)
        if json_mode and schema is None:  # a forced tool needs no instruction
            system = f"{system}\n\n{JSON_INSTRUCTION}" if system else JSON_INSTRUCTION
        cap = max_tokens or self.config.max_tokens or DEFAULT_MAX_TOKENS
        body: dict[str, Any] = {"model": self.model, "messages": turns, "max_tokens": cap}
        if system:
            body["system"] = system
        temp = temperature if temperature is not None else self.config.temperature
        if temp is not None and self._takes_temperature:
            body["temperature"] = min(temp, 1.0)  # Anthropic's range is 0–1
        if schema is not None:
            tool = {"name": schema.name, "input_schema": dict(schema.schema)}
            if schema.description:
                tool["description"] = schema.description
            body["tools"] = [tool]
            body["tool_choice"] = {"type": "tool", "name": schema.name}
        return body

    async def _send(self, body: dict[str, Any]) -> Any:
        return await self._client.messages.create(**body)

    async def _stream(self, body: dict[str, Any], on_delta: DeltaSink, *, structured: bool) -> ModelReply:
        stream = await self._client.messages.create(**body, stream=True)
        text: list[str] = []
        arguments: list[str] = []
        model: str | None = None
        stop: str | None = None
        prompt = completion = 0
        seen_usage = False
        async for event in stream:
            kind = getattr(event, "type", None)
            if kind == "message_start":
                message = getattr(event, "message", None)
                model = getattr(message, "model", None) or model
                start = _usage(getattr(message, "usage", None))
                if start is not None:
                    prompt, completion, seen_usage = start.prompt_tokens, start.completion_tokens, True
            elif kind == "content_block_delta":
                delta = getattr(event, "delta", None)
                if getattr(delta, "type", None) == "text_delta":
                    piece = getattr(delta, "text", "") or ""
                    text.append(piece)
                elif getattr(delta, "type", None) == "input_json_delta":
                    piece = getattr(delta, "partial_json", "") or ""
                    arguments.append(piece)
                else:
                    continue
                if piece:
                    on_delta(piece)
            elif kind == "message_delta":
                stop = getattr(getattr(event, "delta", None), "stop_reason", None) or stop
                out = getattr(getattr(event, "usage", None), "output_tokens", None)
                if isinstance(out, int):
                    completion, seen_usage = out, True
        body_text = "".join(arguments) if structured and arguments else "".join(text)
        return ModelReply(
            text=body_text,
            model=str(model or self.model),
            usage=Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)
            if seen_usage
            else None,
            finish_reason=_FINISH.get(stop, stop) if isinstance(stop, str) else None,
            raw={"streamed": True, "model": model, "stop_reason": stop},
            structured=json_object(body_text) if structured else None,
        )

    def _reply(self, response: Any, *, structured: bool = False) -> ModelReply:
        content = getattr(response, "content", None)
        if not isinstance(content, list):
            what = f"text {preview(response, 200)!r}" if isinstance(response, str) else "no content"
            raise MalformedResponse(f"{self._label}: malformed message: {what}")
        text = "".join(
            block.text
            for block in content
            if getattr(block, "type", None) == "text" and isinstance(getattr(block, "text", None), str)
        )
        stop = getattr(response, "stop_reason", None)
        found: dict[str, Any] | None = None
        if structured:
            tool = next((b for b in content if getattr(b, "type", None) == "tool_use"), None)
            value = getattr(tool, "input", None)
            if isinstance(value, dict):
                found, text = value, json.dumps(value, ensure_ascii=False)
            else:
                found = json_object(text)
        return ModelReply(
            text=text,
            model=str(getattr(response, "model", None) or self.model),
            usage=_usage(getattr(response, "usage", None)),
            finish_reason=_FINISH.get(stop, stop) if isinstance(stop, str) else None,
            raw=response_dict(response),
            structured=found,
        )


def _usage(usage: Any) -> Usage | None:
    """Prompt tokens include cache writes and reads: all of it was in the window."""
    prompt = getattr(usage, "input_tokens", None)
    if not isinstance(prompt, int):
        return None
    for extra in ("cache_creation_input_tokens", "cache_read_input_tokens"):
        value = getattr(usage, extra, None)
        if isinstance(value, int):
            prompt += value
    completion = getattr(usage, "output_tokens", None)
    completion = completion if isinstance(completion, int) else 0
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)
