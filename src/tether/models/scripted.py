"""``ScriptedModel``: a ChatModel that answers from a script, for tests and offline demos.

::

    model = ScriptedModel(['{"action": "execute", "command": "ls"}', {"action": "done"}])
    reply = await model.complete([{"role": "user", "content": "deploy"}])
    assert model.calls[-1][-1]["content"] == "deploy"
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeAlias

from tether.errors import ConfigError, ModelError
from tether.models.base import DeltaSink, ModelReply, OutputSchema, Usage

logger = logging.getLogger(__name__)

__all__ = ["ScriptExhausted", "ScriptedModel", "rough_token_count"]

Scripted: TypeAlias = str | dict[str, Any] | ModelReply | BaseException
"""One scripted answer: text, a dict (sent as JSON), a full reply, or an exception to raise."""
Answer: TypeAlias = str | dict[str, Any] | ModelReply
Responder: TypeAlias = Callable[[list[dict[str, Any]]], Answer | Awaitable[Answer]]
"""A function that answers every call from the messages (sync or async)."""


class ScriptExhausted(ModelError):
    """The script has no reply left for this call: enqueue more, or the agent looped."""


def rough_token_count(text: str) -> int:
    """About four characters a token: the offline estimate scripted usage reports."""
    return math.ceil(len(text) / 4) if text else 0


def _object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return "" if content is None else str(content)


class ScriptedModel:
    """Answers each call with the next scripted reply, or from a function of the messages.

    Args:
        replies: the script (``str``, ``dict`` → JSON text, ``ModelReply`` as is, or an
            exception instance, raised for that call), or a function
            ``(messages) -> str | dict | ModelReply`` (sync or async) that answers every call.
        model: the model name the replies carry.
        usage: report fake usage (``True``) or none (``False``).
        count_tokens: the tokenizer behind fake usage; defaults to
            :func:`rough_token_count`. Prompt tokens are framed like OpenAI's (3 per message
            plus 3), so a tokenizer that agrees with this one calibrates to about 1.0.
        stream_chunk: characters per piece when a call streams (``on_delta``).
        stream_delay: seconds between pieces, to script a slow model (the live views and
            the dashboard show the reply growing).

    Attributes:
        calls: deep copies of the message lists received, oldest first.
        call_options: the ``json_mode``/``max_tokens``/``temperature`` of each call, the
            ``schema`` name asked for and whether it ``streamed``.
    """

    provider_name = "scripted"
    """The provider as traces name it (``gen_ai.provider.name``)."""

    def __init__(
        self,
        replies: Iterable[Scripted] | Responder | None = None,
        *,
        model: str = "scripted",
        usage: bool = True,
        count_tokens: Callable[[str], int] = rough_token_count,
        stream_chunk: int = 16,
        stream_delay: float = 0.0,
    ) -> None:
        if stream_chunk < 1:
            raise ConfigError(f"stream_chunk must be at least 1, got {stream_chunk}")
        self.model = model
        self.stream_chunk = stream_chunk
        self.stream_delay = stream_delay
        self.usage = usage
        self.count_tokens = count_tokens
        self.calls: list[list[dict[str, Any]]] = []
        self.call_options: list[dict[str, Any]] = []
        self._script: deque[Scripted] = deque()
        self._responder: Responder | None = None
        if callable(replies):
            self._responder = replies
        elif replies is not None:
            if isinstance(replies, str | dict):
                raise ConfigError("ScriptedModel takes a list of replies: wrap the single reply in [...]")
            self.enqueue(*replies)

    def __repr__(self) -> str:
        source = "function" if self._responder else f"{len(self._script)} left"
        return f"ScriptedModel(model={self.model!r}, {source}, {len(self.calls)} calls)"

    def enqueue(self, *replies: Scripted | Iterable[Scripted]) -> None:
        """Append replies to the script; lists are flattened (``enqueue([a, b])`` == ``enqueue(a, b)``)."""
        for reply in replies:
            if isinstance(reply, str | dict | ModelReply | BaseException):
                self._script.append(reply)
            else:
                self._script.extend(reply)

    @property
    def remaining(self) -> int:
        """Replies left in the script (0 when a function answers)."""
        return len(self._script)

    async def aclose(self) -> None:
        """Nothing to release; here so every model can be closed the same way."""

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        json_mode: bool = False,
        max_tokens: int | None = None,
        temperature: float | None = None,
        schema: OutputSchema | None = None,
        on_delta: DeltaSink | None = None,
    ) -> ModelReply:
        self.calls.append(copy.deepcopy(messages))
        self.call_options.append(
            {
                "json_mode": json_mode,
                "max_tokens": max_tokens,
                "temperature": temperature,
                "schema": schema.name if schema is not None else None,
                "streamed": on_delta is not None,
            }
        )
        answer = await self._next(messages)
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, ModelReply):
            reply = answer
        else:
            text = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
            logger.debug("scripted reply %d: %.200s", len(self.calls), text)
            reply = ModelReply(
                text=text,
                model=self.model,
                usage=self._usage(messages, text) if self.usage else None,
                finish_reason="stop",
                raw=None,
                structured=_object(text) if schema is not None else None,
            )
        if on_delta is not None:
            await self._stream(reply.text, on_delta)
        return reply

    async def _stream(self, text: str, on_delta: DeltaSink) -> None:
        """Hand ``text`` out in pieces, as a provider's stream would."""
        for start in range(0, len(text), self.stream_chunk):
            if self.stream_delay > 0:
                await asyncio.sleep(self.stream_delay)
            on_delta(text[start : start + self.stream_chunk])

    async def _next(self, messages: list[dict[str, Any]]) -> Scripted:
        if self._responder is not None:
            result = self._responder(copy.deepcopy(messages))
            if inspect.isawaitable(result):
                result = await result
            return result
        if not self._script:
            last = _content_text(messages[-1].get("content")) if messages else ""
            raise ScriptExhausted(
                f"ScriptedModel ran out of replies at call {len(self.calls)}: enqueue more "
                f"(last message: {last[:200]!r})"
            )
        return self._script.popleft()

    def _usage(self, messages: list[dict[str, Any]], text: str) -> Usage:
        prompt = 3 + sum(
            3 + self.count_tokens(str(m.get("role", ""))) + self.count_tokens(_content_text(m.get("content")))
            for m in messages
        )
        completion = self.count_tokens(text)
        return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)
