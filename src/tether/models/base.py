"""What every chat model speaks: OpenAI-shaped messages in, a :class:`ModelReply` out."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["ChatModel", "DeltaSink", "ModelReply", "OutputSchema", "TextCompletion", "Usage"]

DeltaSink = Callable[[str], None]
"""Receives each piece of a reply's text as it streams in (never called after the reply)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputSchema:
    """The JSON object a reply must be, for providers that enforce it natively.

    OpenAI-compatible servers get it as a ``json_schema`` response format (or a forced
    function call), Anthropic as a forced tool; the reply's ``text`` is then the object as
    JSON text, so a caller parses it the same way whether the endpoint enforced the schema
    or only read an instruction (the text parser is the fallback).
    """

    name: str
    """A short identifier (letters, digits, ``_``, ``-``): the tool or schema name."""
    schema: Mapping[str, Any] = field(hash=False)
    """A JSON Schema of one object."""
    description: str = ""
    """What the object means, for the model."""

    @classmethod
    def from_model(cls, model: Any, *, name: str | None = None, description: str = "") -> OutputSchema:
        """The schema of a pydantic model class (its aliases, as it parses them)."""
        schema = dict(model.model_json_schema(by_alias=True))
        schema.pop("title", None)
        doc = description or " ".join((model.__doc__ or "").split())
        return cls(name=name or model.__name__, schema=schema, description=doc)


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
    structured: dict[str, Any] | None = None
    """The object a native structured output (schema or forced tool) returned, already
    parsed; None when the reply is text only (then ``text`` is parsed instead)."""


@runtime_checkable
class ChatModel(Protocol):
    """Answers a list of chat messages.

    ``schema``: the reply must be this JSON object; providers that can enforce it do (the
    reply's ``text`` is the object's JSON), the others get ``json_mode``. ``on_delta``: the
    reply streams, each piece of text passed to it as it arrives; the returned reply is
    the whole one either way.

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
        schema: OutputSchema | None = None,
        on_delta: DeltaSink | None = None,
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
