"""OpenAI chat completions, and every server that speaks them.

One client covers OpenAI, Gemini's OpenAI-compatible endpoint and local servers (Ollama,
vLLM, llama.cpp): only the base URL and the key differ. Uses the official ``openai`` SDK
(``pip install 'tether[openai]'``) with its own retries off; tether retries instead, so
Retry-After, the retry count and the final ``ModelUnavailable`` are the same for every
provider.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.errors import ConfigError, MalformedResponse
from tether.models._provider import (
    SdkChatModel,
    json_object,
    preview,
    response_dict,
)
from tether.models.base import DeltaSink, ModelReply, OutputSchema, Usage

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["OpenAIChatModel"]

_USAGE_IN_STREAM = frozenset({"openai", "gemini", "vllm", "ollama"})
"""Servers known to take ``stream_options.include_usage`` (others may refuse the field)."""

_NO_KEY = "not-needed"
"""Local servers ignore the key, but the SDK refuses to start without one."""


def _import_openai() -> Any:
    try:
        import openai
    except ImportError:
        raise ConfigError("OpenAIChatModel needs the openai SDK: pip install 'tether[openai]'") from None
    return openai


class OpenAIChatModel(SdkChatModel):
    """A :class:`~tether.models.ChatModel` over the chat-completions API.

    Args: as :class:`~tether.models._provider.SdkChatModel`; ``client`` is an ``AsyncOpenAI``.
    """

    _client: AsyncOpenAI

    def _import_sdk(self) -> Any:
        return _import_openai()

    def _new_client(self) -> AsyncOpenAI:
        client: AsyncOpenAI = self._sdk.AsyncOpenAI(
            api_key=self._secret or _NO_KEY,
            base_url=self._base_url,
            timeout=self.config.timeout,
            max_retries=0,
        )
        return client

    def __repr__(self) -> str:
        provider, model, url = self.config.provider, self.model, self._base_url
        return f"OpenAIChatModel(provider={provider!r}, model={model!r}, base_url={url!r})"

    def _request(
        self,
        messages: list[dict[str, Any]],
        *,
        json_mode: bool,
        max_tokens: int | None,
        temperature: float | None,
        schema: OutputSchema | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        temp = temperature if temperature is not None else self.config.temperature
        if temp is not None:
            body["temperature"] = temp
        cap = max_tokens if max_tokens is not None else self.config.max_tokens
        if cap is not None:
            # OpenAI's reasoning models accept only the new name; compatible servers the old one
            body["max_completion_tokens" if self.config.provider == "openai" else "max_tokens"] = cap
        if schema is not None and self.config.structured_output == "tools":
            function = {
                "name": schema.name,
                "description": schema.description,
                "parameters": dict(schema.schema),
            }
            body["tools"] = [{"type": "function", "function": function}]
            body["tool_choice"] = {"type": "function", "function": {"name": schema.name}}
        elif schema is not None:
            spec = {"name": schema.name, "schema": dict(schema.schema), "strict": False}
            if schema.description:
                spec["description"] = schema.description
            body["response_format"] = {"type": "json_schema", "json_schema": spec}
        elif json_mode:
            body["response_format"] = {"type": "json_object"}
        return body

    async def _send(self, body: dict[str, Any]) -> Any:
        return await self._client.chat.completions.create(**body)

    async def _stream(self, body: dict[str, Any], on_delta: DeltaSink, *, structured: bool) -> ModelReply:
        extra: dict[str, Any] = {"stream": True}
        if self.config.provider in _USAGE_IN_STREAM:
            extra["stream_options"] = {"include_usage": True}
        stream = await self._client.chat.completions.create(**body, **extra)
        parts: list[str] = []
        model: str | None = None
        finish: str | None = None
        usage: Usage | None = None
        async for chunk in stream:
            model = getattr(chunk, "model", None) or model
            if getattr(chunk, "usage", None) is not None:
                usage = _usage(chunk.usage)
            for choice in getattr(chunk, "choices", None) or ():
                if getattr(choice, "index", 0) != 0:
                    continue
                delta = getattr(choice, "delta", None)
                piece = getattr(delta, "content", None) or ""
                for call in getattr(delta, "tool_calls", None) or ():
                    function = getattr(call, "function", None)
                    piece += getattr(function, "arguments", None) or ""
                if piece:
                    parts.append(piece)
                    on_delta(piece)
                finish = getattr(choice, "finish_reason", None) or finish
        text = "".join(parts)
        return ModelReply(
            text=text,
            model=str(model or self.model),
            usage=usage,
            finish_reason=finish,
            raw={"streamed": True, "model": model, "finish_reason": finish},
            structured=json_object(text) if structured else None,
        )

    def _reply(self, response: Any, *, structured: bool = False) -> ModelReply:
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            what = f"text {preview(response, 200)!r}" if isinstance(response, str) else "no choices"
            raise MalformedResponse(f"{self._label}: malformed chat completion: {what}")
        message = getattr(choices[0], "message", None)
        content = getattr(message, "content", None)
        if content is not None and not isinstance(content, str):
            raise MalformedResponse(
                f"{self._label}: malformed chat completion: content is {type(content).__name__}"
            )
        text = content or ""
        calls = getattr(message, "tool_calls", None) or ()
        if structured and not text and calls:  # a forced function call: its arguments are the object
            arguments = getattr(getattr(calls[0], "function", None), "arguments", None)
            text = arguments if isinstance(arguments, str) else ""
        return ModelReply(
            text=text,
            model=str(getattr(response, "model", None) or self.model),
            usage=_usage(getattr(response, "usage", None)),
            finish_reason=getattr(choices[0], "finish_reason", None),
            raw=response_dict(response),
            structured=json_object(text) if structured else None,
        )


def _usage(usage: Any) -> Usage | None:
    prompt = getattr(usage, "prompt_tokens", None)
    completion = getattr(usage, "completion_tokens", None)
    if not isinstance(prompt, int):
        return None
    completion = completion if isinstance(completion, int) else 0
    total = getattr(usage, "total_tokens", None)
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=total if isinstance(total, int) else prompt + completion,
    )
