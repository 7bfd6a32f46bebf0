"""``create_model(config)``: the client a configuration asks for."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tether.errors import ConfigError
from tether.models._provider import Backoff
from tether.models.base import ChatModel
from tether.models.config import LLMConfig

__all__ = ["OPENAI_COMPATIBLE", "create_model"]

OPENAI_COMPATIBLE = frozenset({"openai", "openai-compatible", "gemini", "ollama", "vllm"})
"""Providers served by :class:`~tether.models.OpenAIChatModel`."""


def create_model(
    config: LLMConfig,
    *,
    allow_local: bool = True,
    backoff: Backoff | None = None,
    script: Iterable[Any] | None = None,
) -> ChatModel:
    """Build the client for ``config.provider``; the SDK is imported only now.

    ``script`` feeds the ``scripted`` provider's replies (see :class:`ScriptedModel`).
    Real clients hold HTTP connections: ``await model.aclose()`` when done.

    Raises:
        ConfigError: no model, no key where one is needed, no endpoint for
            ``openai-compatible``, or the provider's SDK is not installed.
    """
    if config.provider == "scripted":
        from tether.models.scripted import ScriptedModel

        return ScriptedModel(script, model=config.model or "scripted")
    if script is not None:
        raise ConfigError(f"script= is only for the scripted provider, not {config.provider!r}")
    if config.provider in OPENAI_COMPATIBLE:
        from tether.models.openai import OpenAIChatModel

        return OpenAIChatModel(config, allow_local=allow_local, backoff=backoff)
    if config.provider == "anthropic":
        from tether.models.anthropic import AnthropicChatModel

        return AnthropicChatModel(config, allow_local=allow_local, backoff=backoff)
    raise ConfigError(f"unknown provider {config.provider!r}")  # pragma: no cover - Literal-checked
