"""Chat-message shapes for the window (OpenAI and Anthropic)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tether.context.items import ContextItem, Layer, arguments_text, is_structured_call

__all__ = ["anthropic_messages", "anthropic_system", "openai_messages"]


def _arguments_dict(value: object) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return {"input": value}
        return dict(parsed) if isinstance(parsed, Mapping) else {"input": parsed}
    return {}


def openai_messages(items: Sequence[ContextItem]) -> list[dict[str, Any]]:
    """One message per item, so that the window's running count is the billed count.

    A tool call carrying ``metadata["name"]`` becomes a real ``tool_calls`` entry and its
    result a ``tool`` message; without it both are plain text (an unmatched ``tool``
    message would be rejected by the API).
    """
    calls: set[str] = set()
    out: list[dict[str, Any]] = []
    for item in items:
        if is_structured_call(item):
            assert item.tool_call_id is not None
            calls.add(item.tool_call_id)
            function = {
                "name": str(item.metadata["name"]),
                "arguments": arguments_text(item.metadata.get("arguments", {})),
            }
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": item.tool_call_id, "type": "function", "function": function}],
                }
            )
            continue
        role = item.effective_role
        if role == "tool":
            if item.tool_call_id in calls:
                out.append({"role": "tool", "tool_call_id": item.tool_call_id, "content": item.text})
                continue
            role = "user"
        out.append({"role": role, "content": item.text})
    return out


def anthropic_system(items: Sequence[ContextItem]) -> str:
    return "\n\n".join(
        item.text
        for item in items
        if item.effective_role == "system" and item.layer in (Layer.SYSTEM, Layer.SESSION)
    )


def anthropic_messages(items: Sequence[ContextItem]) -> list[dict[str, Any]]:
    """Alternating user/assistant messages; the system text goes apart (see above)."""
    calls: set[str] = set()
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    for item in items:
        role = item.effective_role
        if role == "system" and item.layer in (Layer.SYSTEM, Layer.SESSION):
            continue
        if is_structured_call(item):
            assert item.tool_call_id is not None
            calls.add(item.tool_call_id)
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": item.tool_call_id,
                "name": str(item.metadata["name"]),
                "input": _arguments_dict(item.metadata.get("arguments", {})),
            }
            speaker = "assistant"
        elif role == "tool" and item.tool_call_id in calls:
            block = {"type": "tool_result", "tool_use_id": item.tool_call_id, "content": item.text}
            speaker = "user"
        else:
            block = {"type": "text", "text": item.text}
            speaker = "assistant" if role == "assistant" else "user"
        if turns and turns[-1][0] == speaker:
            turns[-1][1].append(block)
        else:
            turns.append((speaker, [block]))
    if turns and turns[0][0] == "assistant":
        turns.insert(0, ("user", [{"type": "text", "text": "(continuing)"}]))
    messages: list[dict[str, Any]] = []
    for speaker, blocks in turns:
        # tool_result blocks must open the user turn that answers a tool_use
        blocks.sort(key=lambda b: b["type"] != "tool_result")
        if len(blocks) == 1 and blocks[0]["type"] == "text":
            messages.append({"role": speaker, "content": blocks[0]["text"]})
        else:
            messages.append({"role": speaker, "content": blocks})
    return messages
