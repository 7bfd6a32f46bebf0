"""Reading JSON out of model replies: tolerant about the wrapping, strict about the JSON.

Models asked for JSON still wrap it in code fences or put a sentence before it.
:func:`parse_json_reply` finds the object; validating what it means (pydantic) is the
caller's job. Every failure is a :class:`~tether.errors.ModelOutputError` carrying the raw
text, so the agent loop can send the error back to the model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from tether.errors import ModelOutputError

__all__ = ["find_json_objects", "parse_json_reply"]

_FENCE = re.compile(r"```[ \t]*(?:json5?|JSON|javascript|js)?[ \t]*\r?\n?(.*?)```", re.DOTALL)


def _balanced_end(text: str, start: int) -> int | None:
    """Index just past the ``}`` closing the ``{`` at ``start``, skipping JSON strings."""
    depth = 0
    in_string = False
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1 if ch == "}" else None
    return None


def find_json_objects(text: str) -> Iterator[dict[str, Any]]:
    """Every top-level JSON object in ``text``, in order of appearance."""
    pos = text.find("{")
    while pos != -1:
        end = _balanced_end(text, pos)
        if end is not None:
            try:
                value = json.loads(text[pos:end])
            except ValueError:
                value = None
            if isinstance(value, dict):
                yield value
                pos = text.find("{", end)
                continue
        pos = text.find("{", pos + 1)


def parse_json_reply(text: str, *, in_prose: bool = True) -> dict[str, Any]:
    """The JSON object in a model's reply.

    Tries, in order: the whole reply; the contents of each code fence; with ``in_prose``,
    the first balanced ``{...}`` in the text that parses as JSON (so prose before or after
    is ignored). Pass ``in_prose=False`` where the object is acted on: a reply that quotes
    an action inside a sentence ("I will not run {...}") must not run it.

    Raises:
        ModelOutputError: no JSON object found (``raw`` holds the reply).
    """
    stripped = text.strip()
    if not stripped:
        raise ModelOutputError("the reply is empty; answer with one JSON object", raw=text)
    try:
        whole = json.loads(stripped)
    except ValueError:
        pass
    else:
        if isinstance(whole, dict):
            return whole
        raise ModelOutputError(
            f"expected one JSON object, got a JSON {type(whole).__name__}: {_excerpt(stripped)}", raw=text
        )
    for candidate in (m.group(1).strip() for m in _FENCE.finditer(stripped)):
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    for value in find_json_objects(stripped):
        if in_prose:
            return value
        raise ModelOutputError(
            "the reply has JSON inside prose, which is never acted on: answer with the JSON object "
            f"alone, or alone in a ```json code fence (got: {_excerpt(stripped)})",
            raw=text,
        )
    raise ModelOutputError(
        f"no JSON object in the reply; answer with one JSON object (got: {_excerpt(stripped)})",
        raw=text,
    )


def _excerpt(text: str, limit: int = 200) -> str:
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}… ({len(text)} chars)"
