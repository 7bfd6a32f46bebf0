"""What every chat model speaks: OpenAI-shaped messages in, a :class:`ModelReply` out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["ChatModel", "ModelReply", "TextCompletion", "Usage"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Tokens the provider reports for one call; feed ``prompt_tokens`` to calibration."""

    prompt_tokens: int
    """Tokens of the prompt as the provider counted them (cached tokens included)."""
    completion_tokens: int
    """Tokens of the reply."""
    total_tokens: int
    """``prompt_tokens + completion_tokens`` unless the provider says otherwise."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelReply:
    """One completed call."""

    text: str
    """The reply's text ("" when the model answered nothing)."""
    model: str
    """The model that answered, as the provider names it."""
    usage: Usage | None = None
    """Provider-reported token counts, when it sent them."""
    finish_reason: str | None = None
    """OpenAI's vocabulary: ``stop``, ``length``, ``content_filter``, ``tool_calls``."""
    raw: dict[str, Any] | None = None
    """The provider's response as plain data, for logs and debugging."""


@runtime_checkable
class ChatModel(Protocol):
    """Answers a list of chat messages.

    Messages are OpenAI-shaped dicts (``{"role": "system" | "user" | "assistant", "content": str}``);
    providers with another shape convert them. Implementations raise
    :class:`~tether.errors.ModelError` subclasses only: ``ModelUnavailable`` (transient,
    after retries), ``PromptTooLong`` (compress and retry), ``ModelRequestsBlocked``
    (tests), and ``ModelError`` for the rest.
    """

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        json_mode: bool = False,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> ModelReply: ...


class TextCompletion:
    """A :class:`ChatModel` seen as the context engine's ``CompletionModel`` (text only).

    ``LLMSummarizer(TextCompletion(model))`` writes summaries with a real model; pass
    ``on_usage`` to keep the provider's counts (for calibration or accounting).
    """

    __slots__ = ("max_tokens", "model", "on_usage")

    def __init__(
        self,
        model: ChatModel,
        *,
        max_tokens: int | None = None,
        on_usage: Callable[[Usage], None] | None = None,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.on_usage = on_usage

    async def complete(self, messages: list[dict[str, Any]]) -> str:
        reply = await self.model.complete(messages, max_tokens=self.max_tokens)
        if reply.usage is not None and self.on_usage is not None:
            self.on_usage(reply.usage)
        return reply.text
