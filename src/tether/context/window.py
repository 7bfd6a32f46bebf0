"""The context window: four layers of items under one token budget.

Counts are cached per item and the window keeps a running total per layer, so ``usage()``
costs O(layers) and adding a message to a 100k-token window tokenizes only that message.
The OpenAI message shape is one message per item, which makes ``usage()`` equal to what
OpenAI bills for ``to_messages("openai")`` (cookbook counting), not an estimate of it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tether.context.artifacts import ArtifactStore, archive_items
from tether.context.compress import (
    LINE_LENGTHS,
    SUMMARY_ID,
    CompressionLevel,
    CompressionResult,
    compress,
    compress_phase,
    fit,
)
from tether.context.distill import message_line, read_message
from tether.context.facts import FactCache
from tether.context.items import ContextItem, ItemCounter, Layer, with_count
from tether.context.summarizer import Summarizer, bullet
from tether.context.tokens import (
    ANTHROPIC_FORMAT,
    OPENAI_FORMAT,
    Calibration,
    Tokenizer,
    base_tokenizer,
    count_messages,
    model_spec,
)
from tether.errors import ContextError

logger = logging.getLogger(__name__)

__all__ = [
    "window_from_run_state",
    "LAYER_TITLES",
    "SEED_LAYER_BUDGETS",
    "ContextWindow",
    "LayerUsage",
    "WindowUsage",
    "scale_layer_budgets",
]

STATE_VERSION = 1
SEED_LAYER_BUDGETS: Mapping[Layer, int] = {
    Layer.SYSTEM: 2_000,
    Layer.SESSION: 20_000,
    Layer.WORKING: 10_000,
    Layer.INSTANT: 5_000,
}
"""Upper ends of the layers' ranges (system ~2K, session 5–20K, working 3–10K, instant 1–5K)."""
LAYER_TITLES: Mapping[Layer, str] = {
    Layer.SYSTEM: "System",
    Layer.SESSION: "Session",
    Layer.WORKING: "Working",
    Layer.INSTANT: "Instant",
}
Style = Literal["openai", "anthropic"]


_PHASED = frozenset({"operation", "tool_call", "tool_result", "query_result", "message", "report", "error"})
"""Kinds that belong to the phase they happen in (what a phase compression folds)."""


def todo_phase(item: ContextItem) -> str:
    """The phase a TODO item stands for: its ``phase``, else its number in the plan."""
    if item.phase:
        return item.phase
    number = item.metadata.get("number")
    return "" if number is None else str(number)


def _is_done(item: ContextItem) -> bool:
    return str(item.metadata.get("status", "")).lower() in ("done", "completed", "skipped")


def _store_order(item: ContextItem) -> int:
    """Stored items keep their seq; new ones (seq 0) come last, in the order given."""
    return item.seq if item.seq > 0 else 1 << 62


def scale_layer_budgets(budget: int) -> dict[Layer, int]:
    """The default per-layer budgets scaled so that they add up to ``budget``."""
    seed_total = sum(SEED_LAYER_BUDGETS.values())
    shares = {layer: budget * n // seed_total for layer, n in SEED_LAYER_BUDGETS.items()}
    shares[Layer.WORKING] += budget - sum(shares.values())
    return shares


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerUsage:
    layer: Layer
    tokens: int
    budget: int
    items: int

    @property
    def ratio(self) -> float:
        return self.tokens / self.budget if self.budget else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowUsage:
    """Tokens the next request will cost, against the budget."""

    tokens: int
    """Calibrated prompt tokens (raw count × the learned provider ratio)."""
    raw_tokens: int
    """Our own count, before calibration."""
    budget: int
    layers: Mapping[Layer, LayerUsage]

    @property
    def ratio(self) -> float:
        return self.tokens / self.budget if self.budget else 0.0

    @property
    def remaining(self) -> int:
        return self.budget - self.tokens


class ContextWindow:
    """Items in four layers for one model and budget; see docs/context.md."""

    def __init__(
        self,
        model: str = "gpt-4o",
        *,
        budget: int | None = None,
        tokenizer: Tokenizer | None = None,
        layer_budgets: Mapping[Layer, int] | None = None,
        style: Style | None = None,
        calibration: Calibration | None = None,
        reserve_output: int = 4_096,
    ) -> None:
        spec = model_spec(model)
        self.model = model
        self.budget = budget if budget is not None else spec.context_window - reserve_output
        if self.budget <= 0:
            raise ContextError(f"budget must be positive, got {self.budget}")
        self.tokenizer: Tokenizer = tokenizer or base_tokenizer(model)
        self.style: Style = style or spec.message_format
        fmt = ANTHROPIC_FORMAT if self.style == "anthropic" else OPENAI_FORMAT
        self.counter = ItemCounter(self.tokenizer, fmt)
        self.layer_budgets = dict(layer_budgets or scale_layer_budgets(self.budget))
        self.calibration = calibration or Calibration(ratio=spec.scale)
        self._layers: dict[Layer, dict[str, ContextItem]] = {layer: {} for layer in Layer}
        self._where: dict[str, Layer] = {}
        self._totals: dict[Layer, int] = dict.fromkeys(Layer, 0)
        self._seq = 0
        self.version = 0
        """Bumped on every change; background compression uses it to detect races."""
        self._journal: list[dict[str, Any]] | None = None
        self.facts = FactCache()
        """Facts of each tool call and result, mined when the result arrives (see compress)."""
        self._calls: dict[str, ContextItem] = {}
        """The latest tool call per ``tool_call_id``, to pair a result with on arrival."""
        self.phase: str | None = None
        """The plan phase under way: items added without a phase get it (phase compression)."""
        self.sent: dict[str, Any] = {}
        """What the model got: ``calls``, ``last`` and ``peak`` usage (tokens and ratio)."""

    # -- items -------------------------------------------------------------------------

    def _store(self, item: ContextItem, *, seq: int | None = None, counted: bool = False) -> ContextItem:
        if seq is None:
            if item.seq > 0:
                seq = item.seq
            else:
                self._seq += 1
                seq = self._seq
        self._seq = max(self._seq, seq)
        n = item.tokens if counted and item.tokens >= 0 else self.counter.tokens(item)
        if item.seq != seq or item.tokens != n:
            item = with_count(item, n, seq)
        layer_items = self._layers[item.layer]
        out_of_order = bool(layer_items) and next(reversed(layer_items.values())).seq > seq
        layer_items[item.id] = item
        if out_of_order:
            self._resort(item.layer)
        self._where[item.id] = item.layer
        self._totals[item.layer] += self.counter.cost(item)
        self.version += 1
        return item

    def _unstore(self, item_id: str) -> ContextItem:
        layer = self._where.pop(item_id)
        item = self._layers[layer].pop(item_id)
        self._totals[layer] -= self.counter.cost(item)
        self.version += 1
        return item

    def add(self, item: ContextItem) -> ContextItem:
        """Add a new item; its id must be new. Returns it counted and sequenced."""
        if item.id in self._where:
            raise ContextError(f"item {item.id!r} already in the window; use replace()")
        if self.phase is not None and item.phase is None and item.kind in _PHASED:
            item = dataclasses.replace(item, phase=self.phase)
        stored = self._store(item, seq=None if item.seq <= 0 else item.seq)
        self._log(stored)
        self._mine(stored)
        return stored

    def _mine(self, item: ContextItem) -> None:
        """Extract a finished operation's facts now, so that compression only reads them."""
        call_id = item.tool_call_id
        if not call_id:
            if item.kind == "message":  # plans, progress, questions, rules: read once
                flat = self.facts.memo(item, read_message).flat
                for n in LINE_LENGTHS:  # its summary line, counted as a summary holds it
                    self.counter.prime(bullet(message_line(flat, n)) + "\n")
            return
        if item.kind == "tool_call":
            self._calls[call_id] = item
        elif item.kind == "tool_result":
            call = self._calls.get(call_id)
            if call is not None and self.get(call.id) is call:
                for n in LINE_LENGTHS:  # its summary line, mined and counted as a summary holds it
                    self.counter.prime(bullet(self.facts.line(call, item, max_chars=n)) + "\n")

    def add_many(self, items: Iterable[ContextItem]) -> list[ContextItem]:
        return [self.add(item) for item in items]

    def replace(self, item: ContextItem) -> ContextItem:
        """Swap the item with the same id, keeping its place in the order."""
        old = self.get(item.id)
        if old is None:
            raise ContextError(f"no item {item.id!r} to replace")
        if old.layer != item.layer:
            self._unstore(item.id)
            stored = self._store(item, seq=old.seq)
            self._resort(stored.layer)
            self._log(stored)
            return stored
        n = self.counter.tokens(item)
        if item.seq != old.seq or item.tokens != n:
            item = with_count(item, n, old.seq)
        self._layers[item.layer][item.id] = item  # an existing key keeps its position
        self._totals[item.layer] += self.counter.cost(item) - self.counter.cost(old)
        self.version += 1
        if item != old:
            self._log(item)
            self._mine(item)
        return item

    def upsert(self, item: ContextItem) -> ContextItem:
        """Add or replace by id: the same rule as the state engine's id reducer."""
        return self.replace(item) if item.id in self._where else self.add(item)

    def remove(self, item_id: str) -> ContextItem:
        if item_id not in self._where:
            raise ContextError(f"no item {item_id!r} to remove")
        item = self._unstore(item_id)
        self._maybe_prune()
        if self._journal is not None:
            self._journal.append({"id": item_id, "removed": True})
        return item

    def _resort(self, layer: Layer) -> None:
        items = self._layers[layer]
        self._layers[layer] = dict(sorted(items.items(), key=lambda kv: kv[1].seq))

    def _maybe_prune(self) -> None:
        if len(self.counter) > 2 * len(self._where) + 1_024:
            self.counter.prune(self)
        if len(self.facts) > len(self._where) + 1_024:
            self.facts.prune(self._where)
            self._calls = {k: c for k, c in self._calls.items() if c.id in self._where}

    def get(self, item_id: str) -> ContextItem | None:
        layer = self._where.get(item_id)
        return None if layer is None else self._layers[layer][item_id]

    def items(self, layer: Layer | None = None) -> list[ContextItem]:
        """Items in prompt order: by layer, then by insertion."""
        if layer is not None:
            return list(self._layers[layer].values())
        return [item for lay in Layer for item in self._layers[lay].values()]

    def __iter__(self) -> Iterator[ContextItem]:
        return iter(self.items())

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._where

    def snapshot(self) -> tuple[ContextItem, ...]:
        """An immutable copy of the items (they are frozen, so this is cheap)."""
        return tuple(self.items())

    def replace_all(self, items: Iterable[ContextItem], *, counted: bool = False) -> None:
        """Make ``items`` the whole content (how a compression result is applied).

        ``counted=True``: the items' ``tokens`` are this window's counter's counts (a
        compression result of this window), so they are not looked up again.
        """
        items = list(items)
        before = {i.id: i for i in self.items()} if self._journal is not None else {}
        for layer in Layer:
            self._layers[layer] = {}
        self._where.clear()
        self._totals = dict.fromkeys(Layer, 0)
        # _store inlined: in seq order no layer needs re-sorting (a hot path: every compression)
        where, layers, totals, cost = self._where, self._layers, self._totals, self.counter.cost
        for item in sorted(items, key=_store_order):
            item_id = item.id
            if item_id in where:
                raise ContextError(f"duplicate item id {item_id!r}")
            if item.seq > 0:
                seq = item.seq
            else:
                self._seq += 1
                seq = self._seq
            if seq > self._seq:
                self._seq = seq
            n = item.tokens if counted and item.tokens >= 0 else self.counter.tokens(item)
            if item.seq != seq or item.tokens != n:
                item = with_count(item, n, seq)
            layers[item.layer][item_id] = item
            where[item_id] = item.layer
            totals[item.layer] += cost(item)
            self.version += 1
            if self._journal is not None and before.get(item_id) != item:
                self._journal.append(item.to_dict())
        if self._journal is not None:
            self._journal += [{"id": i, "removed": True} for i in before if i not in self._where]
        self._maybe_prune()

    # -- change journal (what a step stores) -------------------------------------------

    def _log(self, item: ContextItem) -> None:
        if self._journal is not None:
            self._journal.append(item.to_dict())

    def start_journal(self) -> None:
        """Record every change from now on, for :meth:`take_journal`."""
        if self._journal is None:
            self._journal = []

    def take_journal(self) -> list[dict[str, Any]]:
        """The changes since the last call: item dicts added or replaced, ``{"id", "removed"}``.

        Appended to a run's state (``append`` reducer), they make each checkpoint store only
        what the step changed; :meth:`from_log` replays them.
        """
        taken, self._journal = self._journal or [], [] if self._journal is not None else None
        return taken

    def meta_state(self) -> dict[str, Any]:
        """:meth:`to_state` without the items: the small part rewritten every step."""
        return {
            "version": STATE_VERSION,
            "model": self.model,
            "budget": self.budget,
            "style": self.style,
            "tokenizer": self.tokenizer.name,
            "layer_budgets": {str(int(k)): v for k, v in self.layer_budgets.items()},
            "calibration": self.calibration.to_dict(),
            "seq": self._seq,
            "sent": dict(self.sent),
            "phase": self.phase,
        }

    @classmethod
    def from_log(
        cls, meta: Mapping[str, Any], log: Iterable[Mapping[str, Any]], *, tokenizer: Tokenizer | None = None
    ) -> ContextWindow:
        """Rebuild a window from :meth:`meta_state` and every journal entry, in order."""
        live: dict[str, Mapping[str, Any]] = {}
        for entry in log:
            if entry.get("removed"):
                live.pop(str(entry.get("id")), None)
            else:
                live[str(entry.get("id"))] = entry
        return cls.from_state({**meta, "items": list(live.values())}, tokenizer=tokenizer)

    # -- usage -------------------------------------------------------------------------

    def usage(self) -> WindowUsage:
        """Tokens of the next request, total and by layer, in O(layers)."""
        layers = {
            layer: LayerUsage(
                layer=layer,
                tokens=self.calibration.apply(self._totals[layer]),
                budget=self.layer_budgets.get(layer, 0),
                items=len(self._layers[layer]),
            )
            for layer in Layer
        }
        raw = self.counter.fmt.reply_priming + sum(self._totals.values())
        return WindowUsage(
            tokens=self.calibration.apply(raw), raw_tokens=raw, budget=self.budget, layers=layers
        )

    def record_sent(self) -> dict[str, Any]:
        """Note the usage of a request about to be sent (kept in :meth:`meta_state`).

        The run's state then says how much of its window the model got: the last request
        and the largest one, in tokens and as a fraction of the budget.
        """
        usage = self.usage()
        now = {"tokens": usage.tokens, "ratio": round(usage.ratio, 4)}
        peak = self.sent.get("peak") or {"tokens": 0, "ratio": 0.0}
        self.sent = {
            "calls": int(self.sent.get("calls", 0)) + 1,
            "last": now,
            "peak": now if usage.tokens >= int(peak.get("tokens", 0)) else peak,
            "budget": self.budget,
        }
        return self.sent

    def count_exact(self) -> int:
        """Recount the rendered request from scratch (slow; for checks and benchmarks)."""
        if self.style == "anthropic":
            messages = self.to_messages("anthropic")
            system = self.system_prompt()
            if system:
                messages = [{"role": "system", "content": system}, *messages]
            return count_messages(messages, self.tokenizer, ANTHROPIC_FORMAT)
        return count_messages(self.to_messages("openai"), self.tokenizer, OPENAI_FORMAT)

    def observe_provider_usage(self, prompt_tokens: int) -> WindowUsage:
        """Calibrate against what the provider billed for the request just sent."""
        raw = self.counter.fmt.reply_priming + sum(self._totals.values())
        self.calibration = self.calibration.observe(reported=prompt_tokens, counted=raw)
        return self.usage()

    # -- rendering ---------------------------------------------------------------------

    def render(self) -> str:
        """One prompt string: a heading per non-empty layer, items separated by blank lines.

        Conversation layers prefix each item with its role, so a completion-style model
        still sees who said what.
        """
        parts: list[str] = []
        for layer in Layer:
            items = self._layers[layer].values()
            if not items:
                continue
            parts.append(f"## {LAYER_TITLES[layer]}")
            for item in items:
                if layer in (Layer.SYSTEM, Layer.SESSION):
                    parts.append(item.text)
                else:
                    parts.append(f"{item.effective_role}: {item.text}")
        return "\n\n".join(parts)

    def to_messages(self, style: Style | None = None) -> list[dict[str, Any]]:
        """Chat messages in OpenAI or Anthropic shape (Anthropic: see :meth:`to_anthropic`)."""
        from tether.context._messages import anthropic_messages, openai_messages

        chosen = style or self.style
        if chosen == "anthropic":
            return anthropic_messages(self.items())
        return openai_messages(self.items())

    def system_prompt(self) -> str:
        """Anthropic's separate ``system``: every system-role item of layers 1–2."""
        from tether.context._messages import anthropic_system

        return anthropic_system(self.items())

    def to_anthropic(self) -> dict[str, Any]:
        """``{"system": ..., "messages": [...]}``, ready for ``messages.create(**...)``."""
        return {"system": self.system_prompt(), "messages": self.to_messages("anthropic")}

    # -- state -------------------------------------------------------------------------

    def item_dicts(self) -> list[dict[str, Any]]:
        """Items as JSON-like dicts with an ``id`` (the state's add-or-replace reducer)."""
        return [item.to_dict() for item in self.items()]

    def to_state(self) -> dict[str, Any]:
        """Plain JSON-like data that :meth:`from_state` restores exactly."""
        return {**self.meta_state(), "items": self.item_dicts()}

    @classmethod
    def from_state(cls, data: Mapping[str, Any], *, tokenizer: Tokenizer | None = None) -> ContextWindow:
        """Rebuild a window; cached counts are trusted only from the same tokenizer."""
        try:
            if int(data.get("version", 0)) > STATE_VERSION:
                raise ContextError(
                    f"context state version {data.get('version')} is newer than "
                    f"{STATE_VERSION}; upgrade tether"
                )
            window = cls(
                str(data["model"]),
                budget=int(data["budget"]),
                tokenizer=tokenizer,
                layer_budgets={Layer(int(k)): int(v) for k, v in data["layer_budgets"].items()},
                style=data.get("style") or None,
                calibration=Calibration.from_dict(data.get("calibration") or {}),
            )
            items = [ContextItem.from_dict(d) for d in data.get("items", [])]
            seq = int(data.get("seq", 0))
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise ContextError(f"not a context window state: {exc}") from exc
        if data.get("tokenizer") == window.tokenizer.name:
            for item in items:
                window.counter.seed(item)
        window.replace_all(items)
        window._seq = max(window._seq, seq)
        sent = data.get("sent")
        window.sent = dict(sent) if isinstance(sent, Mapping) else {}
        phase = data.get("phase")
        window.phase = None if phase is None else str(phase)
        return window

    # -- compression (see compress.py) -------------------------------------------------

    def _archive(self, archive: ArtifactStore | None) -> str | None:
        return archive_items(archive, self.items()) if archive is not None else None

    def compress(
        self,
        level: CompressionLevel = "standard",
        *,
        summarizer: Summarizer | None = None,
        archive: ArtifactStore | None = None,
        target_ratio: float | None = None,
        before_seq: int | None = None,
    ) -> CompressionResult:
        """Compress in place; with ``archive``, the full history is written there first.

        The rolling summary is kept inside what the session layer's budget leaves after
        its protected items; if those alone overflow it, the result's ``warnings`` say so.
        The operations the working layer keeps in detail fit in the level's share of that
        layer's budget (60% standard, 30% deep), so its own budget holds too.
        """
        archive_id = self._archive(archive)
        result = compress(
            self.items(),
            level,
            counter=self.counter,
            summarizer=summarizer,
            target_ratio=target_ratio,
            before_seq=before_seq,
            archive_id=archive_id,
            summary_budget=self.summary_budget(),
            working_budget=self.layer_budgets.get(Layer.WORKING),
            facts=self.facts,
            counted=True,
        )
        self.replace_all(result.items, counted=True)
        return self._check_session(result)

    def summary_budget(self) -> int:
        """Tokens the rolling summary may use: the session budget minus its other items."""
        budget = self.layer_budgets.get(Layer.SESSION, 0)
        others = sum(self.counter.cost(i) for i in self._layers[Layer.SESSION].values() if i.id != SUMMARY_ID)
        return max(budget - others - budget // 10, budget // 5)

    def _check_session(self, result: CompressionResult) -> CompressionResult:
        session = self.usage().layers[Layer.SESSION]
        if session.tokens <= session.budget:
            return result
        protected = sum(self.counter.cost(i) for i in self._layers[Layer.SESSION].values() if i.protected)
        warning = (
            f"session layer at {session.tokens} tokens, over its budget of {session.budget}; "
            f"protected items (goal, TODOs, decisions, constraints, pinned) alone need {protected}"
        )
        logger.warning("context %s", warning)
        return dataclasses.replace(result, warnings=(*result.warnings, warning))

    def compress_phase(
        self,
        phase: str,
        *,
        status: str = "done",
        summarizer: Summarizer | None = None,
        archive: ArtifactStore | None = None,
        title: str | None = None,
    ) -> CompressionResult:
        """Fold a finished phase into one line (its title from the phase's TODO item)."""
        archive_id = self._archive(archive)
        if title is None:
            todo = next(
                (i for i in self.items(Layer.SESSION) if i.kind == "todo" and todo_phase(i) == phase), None
            )
            title = str(todo.metadata.get("text", "")) if todo is not None else ""
        result = compress_phase(
            self.items(), phase, counter=self.counter, status=status, summarizer=summarizer,
            title=title, facts=self.facts, counted=True,
        )  # fmt: skip
        self.replace_all(result.items, counted=True)
        return dataclasses.replace(result, archive_id=archive_id)

    def phases_done(self) -> list[str]:
        """Phases whose TODO item is done while operations of theirs are still in detail."""
        done = {todo_phase(i) for i in self.items(Layer.SESSION) if i.kind == "todo" and _is_done(i)}
        done.discard("")
        if not done:
            return []
        return sorted({i.phase for i in self.items(Layer.WORKING) if i.phase in done and i.kind in _PHASED})

    def fit(
        self,
        budget: int | None = None,
        *,
        summarizer: Summarizer | None = None,
        archive: ArtifactStore | None = None,
    ) -> CompressionResult:
        """Compress just enough to fit ``budget`` (default: the window's own budget).

        The budget is in calibrated tokens, like :meth:`usage`.
        """
        target = self.budget if budget is None else budget
        raw_target = int(target / self.calibration.ratio) if self.calibration.ratio else target
        archive_id = None
        if self.usage().tokens > target:
            archive_id = self._archive(archive)
        result = fit(
            self.items(),
            raw_target,
            counter=self.counter,
            summarizer=summarizer,
            archive_id=archive_id,
            counted=True,
        )
        if result.level != "none":
            self.replace_all(result.items, counted=True)
        return result


def window_from_run_state(state: Mapping[str, Any], key: str = "context_window") -> ContextWindow | None:
    """The context window a run's state holds, in either of its stored shapes.

    The agent loop stores ``context_meta`` plus an append-only ``context_log``; runtime
    hooks and older runs store one ``context_window`` dict. ``None`` when there is neither.
    """
    meta = state.get("context_meta")
    if isinstance(meta, Mapping):
        return ContextWindow.from_log(meta, state.get("context_log") or [])
    data = state.get(key)
    return ContextWindow.from_state(data) if isinstance(data, Mapping) else None
