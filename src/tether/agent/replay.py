"""Reading a run's prompt records from its store, and re-running one call on the side.

What ``tether prompt``, ``tether replay``, the prompts API and the dashboard share. A
replay never writes to the run: it rebuilds the messages of one call (or takes edited
ones), sends them to a model with the call's settings, and returns the new reply beside
the recorded one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.agent.calls import ACTION_SCHEMA, accepted_keywords
from tether.context.records import PROMPT_LOG_KEY, PromptCall, diff_prompts, find_record, rebuild
from tether.errors import ConfigError, RunNotFound
from tether.models.base import ChatModel, ModelReply
from tether.stores.base import CheckpointStore

__all__ = ["ReplayResult", "load_records", "pick_call", "prompt_diff", "replay_call", "validate_messages"]


async def load_records(
    store: CheckpointStore, run_id: str, *, version: int | None = None
) -> list[Mapping[str, Any]]:
    """The run's prompt records, as of its latest checkpoint or of ``version``."""
    cp = await store.load(run_id, version)
    if cp is None:
        if version is not None and await store.get_run(run_id) is not None:
            raise ConfigError(f"run {run_id!r} has no checkpoint at version {version}")
        raise RunNotFound(run_id)
    records = cp.state.get(PROMPT_LOG_KEY) or []
    return list(records)


def pick_call(records: Sequence[Mapping[str, Any]], iteration: int | None = None) -> PromptCall:
    """The call of ``iteration`` (its last attempt), or the run's latest call."""
    index = -1 if iteration is None else find_record(records, iteration)
    return rebuild(records, index)


def prompt_diff(records: Sequence[Mapping[str, Any]], before: int, after: int) -> dict[str, Any]:
    """What changed from the call of iteration ``before`` to that of ``after``."""
    a, b = pick_call(records, before), pick_call(records, after)
    return {"before": before, "after": after, **diff_prompts(a, b).to_dict()}


def validate_messages(data: Any) -> list[dict[str, Any]]:
    """Edited messages, as a list or as ``tether prompt --json`` printed them."""
    if isinstance(data, Mapping) and "messages" in data:
        data = data["messages"]
    if not isinstance(data, list) or not data:
        raise ConfigError(
            'edited prompt must be a non-empty JSON list of messages ([{"role": "user", "content": "..."}]) '
            "or the object `tether prompt RUN --json` prints"
        )
    for i, message in enumerate(data):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise ConfigError(f'edited message #{i + 1} needs a string "role" (got {str(message)[:80]!r})')
    return [dict(m) for m in data]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayResult:
    iteration: int | None
    edited: bool
    old_reply: str
    new_reply: ModelReply
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        usage = self.new_reply.usage
        return {
            "iteration": self.iteration,
            "edited": self.edited,
            "oldReply": self.old_reply,
            "newReply": self.new_reply.text,
            "model": self.new_reply.model,
            "finishReason": self.new_reply.finish_reason,
            "usage": {"input": usage.prompt_tokens, "output": usage.completion_tokens} if usage else None,
            "seconds": round(self.seconds, 3),
        }


async def replay_call(
    model: ChatModel, call: PromptCall, *, messages: list[dict[str, Any]] | None = None
) -> ReplayResult:
    """Send the call's messages (or ``messages``, edited) again with the call's settings."""
    settings = call.record.get("settings") or {}
    kwargs: dict[str, Any] = {"json_mode": bool(settings.get("jsonMode", True))}
    if settings.get("schema") == ACTION_SCHEMA.name and "schema" in accepted_keywords(model):
        kwargs["schema"] = ACTION_SCHEMA
    if settings.get("max_tokens") is not None:
        kwargs["max_tokens"] = int(settings["max_tokens"])
    if settings.get("temperature") is not None:
        kwargs["temperature"] = float(settings["temperature"])
    started = time.monotonic()
    reply = await model.complete(messages if messages is not None else call.messages, **kwargs)
    return ReplayResult(
        iteration=call.iteration,
        edited=messages is not None,
        old_reply=str(call.record.get("reply") or ""),
        new_reply=reply,
        seconds=time.monotonic() - started,
    )
