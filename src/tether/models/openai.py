"""OpenAI chat completions, and every server that speaks them.

One client covers OpenAI, Gemini's OpenAI-compatible endpoint and local servers (Ollama,
vLLM, llama.cpp): only the base URL and the key differ. Uses the official ``openai`` SDK
(``pip install 'tether[openai]'``) with its own retries off; tether retries instead, so
Retry-After, the retry count and the final ``ModelUnavailable`` are the same for every
provider.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from tether.errors import ConfigError, ModelError
from tether.models._provider import (
    Backoff,
    check_allowed,
    log_reply,
    preview,
    raise_mapped,
    redact,
    response_dict,
    with_retries,
)
from tether.models.base import ModelReply, Usage
from tether.models.config import LLMConfig

if TYPE_CHECKING:
    from types import TracebackType

    from openai import AsyncOpenAI

logger = logging.getLogger(__name__)

__all__ = ["OpenAIChatModel"]

_NO_KEY = "not-needed"
"""Local servers ignore the key, but the SDK refuses to start without one."""


def _import_openai() -> Any:
    try:
        import openai
    except ImportError:
        raise ConfigError("OpenAIChatModel needs the openai SDK: pip install 'tether[openai]'") from None
    return openai


class OpenAIChatModel:
    """A :class:`~tether.models.ChatModel` over the chat-completions API.

    Args:
        config: provider, model, key, endpoint and limits.
        allow_local: requests to a loopback base URL (``localhost``, ``127.0.0.1``, ``::1``)
            go through even when ``tether.models.ALLOW_MODEL_REQUESTS`` is False; pass
            False to block them too.
        backoff: waits between retries (the count is ``config.max_retries``).
        client: an existing ``AsyncOpenAI`` to use (its own retries are switched off).
    """

    def __init__(
        self,
        config: LLMConfig,
        *,
        allow_local: bool = True,
        backoff: Backoff | None = None,
        client: AsyncOpenAI | None = None,
    ) -> None:
        self.config = config
        self.model = config.require_model()
        self.allow_local = allow_local
        self.backoff = backoff or Backoff()
        self._sdk = _import_openai()
        self._base_url = config.base_url
        self._secret = config.api_key_value()
        if client is not None:
            self._client: AsyncOpenAI = client.with_options(max_retries=0, timeout=config.timeout)
        else:
            self._client = self._sdk.AsyncOpenAI(
                api_key=self._secret or _NO_KEY,
                base_url=self._base_url,
                timeout=config.timeout,
                max_retries=0,
            )
        self._label = f"{config.provider} {self.model}"

    def __repr__(self) -> str:
        provider, model, url = self.config.provider, self.model, self._base_url
        return f"OpenAIChatModel(provider={provider!r}, model={model!r}, base_url={url!r})"

    async def aclose(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> OpenAIChatModel:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def _request(
        self,
        messages: list[dict[str, Any]],
        *,
        json_mode: bool,
        max_tokens: int | None,
        temperature: float | None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        temp = temperature if temperature is not None else self.config.temperature
        if temp is not None:
            body["temperature"] = temp
        cap = max_tokens if max_tokens is not None else self.config.max_tokens
        if cap is not None:
            # OpenAI's reasoning models accept only the new name; compatible servers the old one
            body["max_completion_tokens" if self.config.provider == "openai" else "max_tokens"] = cap
        if json_mode:
            body["response_format"] = {"type": "json_object"}
        return body

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        json_mode: bool = False,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ModelReply:
        """One chat completion, retried on 429/5xx/connection errors.

        Raises:
            ModelRequestsBlocked: requests are off and the endpoint is not a permitted loopback.
            PromptTooLong: the server refused the prompt's size (``reported_tokens`` parsed).
            ModelUnavailable: transient failures outlasted ``max_retries``.
            ModelError: any other refusal, or a malformed response.
        """
        check_allowed(self._base_url, allow_local=self.allow_local, what=self._label)
        body = self._request(messages, json_mode=json_mode, max_tokens=max_tokens, temperature=temperature)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "%s prompt: %s",
                self._label,
                preview(redact(json.dumps(messages, ensure_ascii=False, default=str), self._secret)),
            )
        started = time.monotonic()

        async def attempt() -> Any:
            try:
                return await self._client.chat.completions.create(**body)
            except Exception as exc:
                raise_mapped(self._sdk, exc, label=self._label, secret=self._secret)

        response = await with_retries(
            attempt, max_retries=self.config.max_retries, backoff=self.backoff, label=self._label
        )
        reply = self._reply(response)
        log_reply(logger, self._label, reply, started)
        return reply

    def _reply(self, response: Any) -> ModelReply:
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            what = f"text {preview(response, 200)!r}" if isinstance(response, str) else "no choices"
            raise ModelError(f"{self._label}: malformed chat completion: {what}")
        message = getattr(choices[0], "message", None)
        content = getattr(message, "content", None)
        if content is not None and not isinstance(content, str):
            raise ModelError(f"{self._label}: malformed chat completion: content is {type(content).__name__}")
        return ModelReply(
            text=content or "",
            model=str(getattr(response, "model", None) or self.model),
            usage=_usage(getattr(response, "usage", None)),
            finish_reason=getattr(choices[0], "finish_reason", None),
            raw=response_dict(response),
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
