"""Anthropic's Messages API through the official ``anthropic`` SDK.

OpenAI-shaped messages are converted on the way in: system messages (wherever they are)
become the ``system`` parameter, other roles fold into strictly alternating user /
assistant turns that start with the user. There is no JSON mode: ``json_mode=True`` adds
an instruction to the system prompt and the caller parses tolerantly
(:func:`~tether.models.parse_json_reply`).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.errors import ConfigError, MalformedResponse
from tether.models._provider import (
    Backoff,
    SdkChatModel,
    preview,
    response_dict,
)
from tether.models.base import ModelReply, Usage
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
    ) -> dict[str, Any]:
        system, turns = to_anthropic_messages(messages)
        if json_mode:
            system = f"{system}\n\n{JSON_INSTRUCTION}" if system else JSON_INSTRUCTION
        cap = max_tokens or self.config.max_tokens or DEFAULT_MAX_TOKENS
        body: dict[str, Any] = {"model": self.model, "messages": turns, "max_tokens": cap}
        if system:
            body["system"] = system
        temp = temperature if temperature is not None else self.config.temperature
        if temp is not None and self._takes_temperature:
            body["temperature"] = min(temp, 1.0)  # Anthropic's range is 0–1
        return body

    async def _send(self, body: dict[str, Any]) -> Any:
        return await self._client.messages.create(**body)

    def _reply(self, response: Any) -> ModelReply:
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
        return ModelReply(
            text=text,
            model=str(getattr(response, "model", None) or self.model),
            usage=_usage(getattr(response, "usage", None)),
            finish_reason=_FINISH.get(stop, stop) if isinstance(stop, str) else None,
            raw=response_dict(response),
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
