"""Chat models: one protocol, the real providers, and a scripted model for tests.

* :class:`ChatModel`: ``await model.complete(messages, json_mode=..., max_tokens=...,
  temperature=...) -> ModelReply`` (text, model, usage, finish_reason, raw).
* :class:`OpenAIChatModel`: OpenAI and every compatible server (Gemini's endpoint,
  Ollama, vLLM, llama.cpp); :class:`AnthropicChatModel`; :class:`ScriptedModel`.
* :func:`create_model` builds one from an :class:`LLMConfig`.
* :func:`parse_json_reply` reads the JSON object out of a reply; ``schema=OutputSchema(...)``
  asks providers to enforce it natively, ``on_delta=`` streams the reply.

``ALLOW_MODEL_REQUESTS``: set it to False (tests) and every real provider raises
:class:`~tether.errors.ModelRequestsBlocked` before any network call, except to a
loopback endpoint while the client's ``allow_local`` is True (the default).

The SDKs are imported when a client is built, not by importing this package.
"""

from __future__ import annotations

from tether.models._provider import Backoff, is_loopback
from tether.models.anthropic import AnthropicChatModel
from tether.models.base import ChatModel, DeltaSink, ModelReply, OutputSchema, TextCompletion, Usage
from tether.models.config import DEFAULT_ENDPOINTS, ENV_VARS, LLMConfig, Provider
from tether.models.factory import create_model
from tether.models.openai import OpenAIChatModel
from tether.models.replies import find_json_objects, parse_json_reply
from tether.models.scripted import ScriptedModel, ScriptExhausted

ALLOW_MODEL_REQUESTS: bool = True
"""False blocks every real provider call (``ModelRequestsBlocked``); read at call time."""

__all__ = [
    "ALLOW_MODEL_REQUESTS",
    "DEFAULT_ENDPOINTS",
    "ENV_VARS",
    "AnthropicChatModel",
    "Backoff",
    "ChatModel",
    "DeltaSink",
    "LLMConfig",
    "ModelReply",
    "OpenAIChatModel",
    "OutputSchema",
    "Provider",
    "ScriptExhausted",
    "ScriptedModel",
    "TextCompletion",
    "Usage",
    "create_model",
    "find_json_objects",
    "is_loopback",
    "parse_json_reply",
]
