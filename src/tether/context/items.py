"""Context items: the unit the window budgets, renders, compresses and checkpoints.

An item is immutable; changing one means replacing it by id, which is also how the state
engine's add-or-replace reducer stores them (:meth:`ContextItem.to_dict` has an ``id``).
"""

from __future__ import annotations

import enum
import itertools
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

from tether.context.tokens import OPENAI_FORMAT, MessageFormat, Tokenizer, split_pieces, tool_call_tokens
from tether.errors import ContextError

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_LAYER",
    "PROTECTED_KINDS",
    "ContextItem",
    "ItemCounter",
    "ItemKind",
    "Layer",
    "Role",
    "arguments_text",
    "is_structured_call",
    "new_item",
]


class Layer(enum.IntEnum):
    """The four layers, in prompt order."""

    SYSTEM = 1
    """Constants: capabilities, tool definitions, rules (~2K tokens)."""
    SESSION = 2
    """Compressible session memory: goal, TODO state, summaries, decisions (5–20K)."""
    WORKING = 3
    """Current TODO item, recent operation results, page state, query results (3–10K)."""
    INSTANT = 4
    """Injected per request: reminders, checkpoint info, errors (1–5K)."""


ItemKind = Literal[
    "system",
    "goal",
    "todo",
    "decision",
    "constraint",
    "state",
    "operation",
    "tool_call",
    "tool_result",
    "query_result",
    "message",
    "error",
    "summary",
    "report",
    "reminder",
    "checkpoint",
]
Role = Literal["system", "user", "assistant", "tool"]
_KINDS: frozenset[str] = frozenset(get_args(ItemKind))
_ROLES: frozenset[str] = frozenset(get_args(Role))

PROTECTED_KINDS: frozenset[str] = frozenset({"system", "goal", "todo", "decision", "constraint"})
"""Kinds no compressor rewrites: the seed keeps goal, TODO list and decisions at every level."""

DEFAULT_LAYER: Mapping[str, Layer] = {
    "system": Layer.SYSTEM,
    "goal": Layer.SESSION,
    "todo": Layer.SESSION,
    "decision": Layer.SESSION,
    "constraint": Layer.SESSION,
    "summary": Layer.SESSION,
    "state": Layer.WORKING,
    "operation": Layer.WORKING,
    "tool_call": Layer.WORKING,
    "tool_result": Layer.WORKING,
    "query_result": Layer.WORKING,
    "message": Layer.WORKING,
    "report": Layer.WORKING,
    "error": Layer.INSTANT,
    "reminder": Layer.INSTANT,
    "checkpoint": Layer.INSTANT,
}
_DEFAULT_ROLE: Mapping[str, Role] = {
    "system": "system",
    "goal": "system",
    "todo": "system",
    "decision": "system",
    "constraint": "system",
    "summary": "system",
    "operation": "assistant",
    "tool_call": "assistant",
    "tool_result": "tool",
}
_LABELS: Mapping[str, str] = {
    "goal": "Goal",
    "todo": "TODO",
    "decision": "Decision",
    "constraint": "Constraint",
    "state": "Current state",
    "operation": "Operation",
    "query_result": "Query result",
    "error": "Error",
    "report": "Report",
    "reminder": "Reminder",
    "checkpoint": "Checkpoint",
}
_ids = itertools.count(1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextItem:
    """One piece of the prompt, with what the budget and the compressors need to know."""

    id: str
    """Unique within a window; replacing an item means adding another with this id."""
    kind: ItemKind = "message"
    """What the item is; decides its label, default layer and how compressors treat it."""
    content: str
    """The text, exactly as given (pinned items are never rewritten)."""
    layer: Layer = Layer.WORKING
    """Which of the four layers it renders in."""
    role: Role | None = None
    """Chat role; ``None`` derives it from the kind (see :attr:`effective_role`)."""
    priority: int = 0
    """Higher survives longer when even deep compression does not fit the budget."""
    pinned: bool = False
    """Never compressed, never dropped, never changed: the "do not compress" mark."""
    tokens: int = -1
    """Cached count of :attr:`text`; -1 until a window or counter has counted it."""
    phase: str | None = None
    """The workflow phase that produced it; phase compression folds a finished phase."""
    todo_id: str | None = None
    """The TODO item it belongs to."""
    tool_call_id: str | None = None
    """Links a ``tool_call`` to its ``tool_result``: compressors keep or drop both."""
    seq: int = 0
    """Order of insertion in its window; 0 until a window assigns one."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """JSON-like extras (``name``/``arguments`` of a tool call, ``status``, artefact ids)."""

    @property
    def text(self) -> str:
        """What the model sees: the content, labelled unless the kind speaks for itself."""
        label = _LABELS.get(self.kind)
        return f"{label}: {self.content}" if label else self.content

    @property
    def effective_role(self) -> Role:
        if self.role is not None:
            return self.role
        return _DEFAULT_ROLE.get(self.kind, "user")

    @property
    def protected(self) -> bool:
        """Pinned, a system constant, or a kind the seed keeps at every compression level."""
        return self.pinned or self.layer is Layer.SYSTEM or self.kind in PROTECTED_KINDS

    def to_dict(self) -> dict[str, Any]:
        """JSON-like form (str keys, plain values) for state reducers and checkpoints."""
        return {
            "id": self.id,
            "kind": self.kind,
            "content": self.content,
            "layer": int(self.layer),
            "role": self.role,
            "priority": self.priority,
            "pinned": self.pinned,
            "tokens": self.tokens,
            "phase": self.phase,
            "todo_id": self.todo_id,
            "tool_call_id": self.tool_call_id,
            "seq": self.seq,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ContextItem:
        """Inverse of :meth:`to_dict`; refuses unknown kinds, roles and layers loudly."""
        try:
            kind = str(data.get("kind", "message"))
            role = data.get("role")
            if kind not in _KINDS:
                raise ValueError(f"unknown kind {kind!r}")
            if role is not None and role not in _ROLES:
                raise ValueError(f"unknown role {role!r}")
            return cls(
                id=str(data["id"]),
                kind=cast(ItemKind, kind),
                content=str(data["content"]),
                layer=Layer(int(data.get("layer", Layer.WORKING))),
                role=cast("Role | None", role),  # a string: the union built per call was most of a restore
                priority=int(data.get("priority", 0)),
                pinned=bool(data.get("pinned", False)),
                tokens=int(data.get("tokens", -1)),
                phase=_opt_str(data.get("phase")),
                todo_id=_opt_str(data.get("todo_id")),
                tool_call_id=_opt_str(data.get("tool_call_id")),
                seq=int(data.get("seq", 0)),
                metadata=dict(data.get("metadata") or {}),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise ContextError(f"not a context item: {exc}") from exc


def with_count(item: ContextItem, tokens: int, seq: int | None = None) -> ContextItem:
    """``item`` with its count (and seq) set: ``dataclasses.replace`` without its field
    introspection, which cost more than the rest of adding an item (a hot path: every add)."""
    return ContextItem(
        id=item.id,
        kind=item.kind,
        content=item.content,
        layer=item.layer,
        role=item.role,
        priority=item.priority,
        pinned=item.pinned,
        tokens=tokens,
        phase=item.phase,
        todo_id=item.todo_id,
        tool_call_id=item.tool_call_id,
        seq=item.seq if seq is None else seq,
        metadata=item.metadata,
    )


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def new_item(
    kind: ItemKind,
    content: str,
    *,
    id: str | None = None,
    layer: Layer | None = None,
    **fields: Any,
) -> ContextItem:
    """Build an item with the layer its kind belongs to and a fresh id if none is given."""
    item_id = id if id is not None else f"{kind}-{next(_ids)}"
    return ContextItem(
        id=item_id,
        kind=kind,
        content=content,
        layer=layer if layer is not None else DEFAULT_LAYER.get(kind, Layer.WORKING),
        **fields,
    )


def is_structured_call(item: ContextItem) -> bool:
    """A tool call sent as a real ``tool_calls`` entry (it names its tool in metadata)."""
    return item.kind == "tool_call" and bool(item.tool_call_id) and "name" in item.metadata


def arguments_text(value: object) -> str:
    """Tool-call arguments as the JSON string OpenAI expects."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


_MAX_LINES = 20_000
"""Primed summary lines kept; past it the cache starts again (only a cost, never an error)."""


class ItemCounter:
    """Counts items once: a cache keyed by (kind, content) makes re-adding free.

    Compressors and restores hand back the same strings, so a lookup costs a hash (cached
    on the string object) instead of a BPE pass; only genuinely new text is tokenized.
    """

    __slots__ = ("_args", "_cache", "_lines", "_role_cost", "fmt", "tokenizer")

    def __init__(self, tokenizer: Tokenizer, fmt: MessageFormat = OPENAI_FORMAT) -> None:
        self.tokenizer = tokenizer
        self.fmt = fmt
        self._cache: dict[tuple[str, ...], int] = {}
        self._role_cost: dict[str, int] = {}
        self._args: dict[int, tuple[object, str]] = {}
        """Arguments' JSON by the identity of the arguments object: items share it when copied."""
        self._lines: dict[str, int] | None = {} if getattr(tokenizer, "line_additive", False) else None
        """Counts of summary lines primed as operations arrive (tokenizers whose counts add up)."""

    def prime(self, line: str) -> None:
        """Count a line a later summary will hold, so that summary costs only its new lines."""
        lines = self._lines
        if lines is None or line in lines:
            return
        if len(lines) >= _MAX_LINES:
            lines.clear()
        lines[line] = self.tokenizer.count(line)

    def count_text(self, text: str) -> int:
        """Exact count of a summary-like text from its primed lines; the other lines are
        counted one by one and remembered, so the next summary that repeats them (its
        headers, decisions, constraints, changed settings) costs only lookups."""
        lines = self._lines
        if lines is None:
            return self.tokenizer.count(text)
        if len(lines) >= _MAX_LINES:
            lines.clear()
        count = self.tokenizer.count
        total = 0
        for part in split_pieces(text):
            n = lines.get(part)
            if n is None:
                n = lines[part] = count(part)
            total += n
        return total

    _count_lines = count_text

    def upper_bound(self, text: str) -> int:
        """At least :meth:`count_text` of ``text``, cheaply: a byte-level BPE token is at
        least one byte, so the UTF-8 length bounds its count (other tokenizers count)."""
        return (
            len(text.encode("utf-8", "surrogatepass")) if self._lines is not None else self.count_text(text)
        )

    def _arguments(self, value: object) -> str:
        if isinstance(value, str):
            return value
        hit = self._args.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        text = arguments_text(value)
        self._args[id(value)] = (value, text)
        return text

    def _key(self, item: ContextItem) -> tuple[str, ...]:
        if is_structured_call(item):  # billed as name + arguments, not as the text
            name = str(item.metadata["name"])
            return ("tool_call\0", name, self._arguments(item.metadata.get("arguments", {})))
        return (item.kind, item.content)

    def tokens(self, item: ContextItem) -> int:
        key = self._key(item)
        n = self._cache.get(key)
        if n is None:
            if key[0] == "tool_call\0" and self.fmt.tool_framing:
                n = tool_call_tokens(key[1], key[2], self.tokenizer)
            elif key[0] == "tool_call\0":
                n = self.tokenizer.count(key[1]) + self.tokenizer.count(key[2])
            elif item.kind == "summary":
                n = self._count_lines(item.text)
            else:
                n = self.tokenizer.count(item.text)
            self._cache[key] = n
        return n

    def counted(self, item: ContextItem) -> ContextItem:
        """``item`` with :attr:`ContextItem.tokens` filled in (the same object if it was)."""
        n = self.tokens(item)
        return item if item.tokens == n else with_count(item, n)

    def seed(self, item: ContextItem) -> None:
        """Trust an already-counted item (a restore by the same tokenizer)."""
        if item.tokens >= 0:
            self._cache.setdefault(self._key(item), item.tokens)

    def cost(self, item: ContextItem) -> int:
        """Prompt tokens of ``item`` as one chat message: content plus framing."""
        n = item.tokens if item.tokens >= 0 else self.tokens(item)
        role = item.effective_role
        role_cost = self._role_cost.get(role)
        if role_cost is None:
            role_cost = self.tokenizer.count(role) if self.fmt.count_role else 0
            self._role_cost[role] = role_cost
        return n + self.fmt.per_message + role_cost

    def costs(self, items: Iterable[ContextItem]) -> dict[str, int]:
        """:meth:`cost` of each item by id, in one pass (what a compression reads)."""
        per_message = self.fmt.per_message
        role_cost = self._role_cost
        out: dict[str, int] = {}
        for item in items:
            n = item.tokens if item.tokens >= 0 else self.tokens(item)
            role = item.role if item.role is not None else _DEFAULT_ROLE.get(item.kind, "user")
            rc = role_cost.get(role)
            if rc is None:
                rc = self.cost(item) - n - per_message
            out[item.id] = n + per_message + rc
        return out

    def total(self, items: Iterable[ContextItem]) -> int:
        """Prompt tokens of ``items`` as a request, reply priming included."""
        return self.fmt.reply_priming + sum(self.cost(item) for item in items)

    def prune(self, live: Iterable[ContextItem]) -> None:
        """Forget text no longer in use, so a long run's cache does not grow without bound."""
        live = list(live)
        self._args = {}
        keep = {self._key(i) for i in live}
        self._cache = {k: v for k, v in self._cache.items() if k in keep}

    def __len__(self) -> int:
        return len(self._cache)
