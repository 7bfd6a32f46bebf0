"""How well compression keeps a run's facts: the pure half of ``tether eval``.

A user's own run has no planted facts, so the facts are read from the run itself, by
category: the goal, constraints, TODO items and decisions (their items' text), and from
each finished operation what the engine's fact extraction finds (configuration values,
artefacts, error lines, and the ports, paths, versions and ids of the lines that say what
happened). A copy of the window is compressed at each level (or fitted to each budget)
and a fact counts as kept when its value is still in the rendered prompt. Token counts
are compared with what the provider billed, when the run recorded it, per model family.

Nothing here does I/O: the CLI reads stores and transcripts and hands windows in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.context.compress import CompressionLevel
from tether.context.facts import FactCache
from tether.context.items import ContextItem, Layer, new_item
from tether.context.window import ContextWindow

__all__ = [
    "CATEGORIES",
    "Fact",
    "RunEvaluation",
    "evaluate_window",
    "facts_of",
    "merge_reports",
    "model_family",
    "token_accuracy",
    "window_from_messages",
]

CATEGORIES: tuple[str, ...] = (
    "goal",
    "constraints",
    "todo",
    "decisions",
    "configuration",
    "artefacts",
    "errors and fixes",
    "ports/paths/versions",
)
_BY_KIND = {"goal": "goal", "constraint": "constraints", "todo": "todo", "decision": "decisions"}
_MARKER = 80
"""Characters of an item's first line that stand for it (summaries quote the start)."""


@dataclass(frozen=True, slots=True)
class Fact:
    category: str
    value: str


@dataclass(slots=True)
class RunEvaluation:
    """One run: its facts and, per level or budget, how many of each category were kept."""

    run: str
    tokens: int
    facts: dict[str, int] = field(default_factory=dict)
    """Facts found per category before compression."""
    kept: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per level (``standard``, ``deep``, ``fit 8000``): kept facts per category."""
    ratio: dict[str, float] = field(default_factory=dict)
    """Per level: tokens after / tokens before."""
    accuracy: dict[str, list[float]] = field(default_factory=dict)
    """Per model family: our raw count / the provider's, one value per recorded call."""
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "tokens": self.tokens,
            "facts": self.facts,
            "kept": self.kept,
            "ratio": self.ratio,
            "accuracy": self.accuracy,
            "error": self.error,
        }


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line[:_MARKER]
    return ""


def facts_of(items: Sequence[ContextItem], cache: FactCache | None = None) -> list[Fact]:
    """The facts of a window's items, by category, each value once; only values that are
    in their items' text (what a compressed prompt can be searched for)."""
    if cache is None:  # not `cache or ...`: an empty cache is falsy, and this one fills it for compress
        cache = FactCache()
    out: dict[Fact, None] = {}
    calls: dict[str, ContextItem] = {}
    for item in items:
        category = _BY_KIND.get(item.kind)
        if category is not None:
            marker = _first_line(item.content)
            if marker:
                out[Fact(category, marker)] = None
            continue
        if item.kind == "tool_call" and item.tool_call_id:
            calls[item.tool_call_id] = item
        elif item.kind == "tool_result" and item.tool_call_id:
            call = calls.get(item.tool_call_id)
            ops = cache.operation(call, item)
            source = f"{call.text if call is not None else ''}\n{item.text}"
            found = [("configuration", f"{k}={v}") for k, v in ops.configurations.items()]
            found += [("artefacts", v) for v in ops.artifacts]
            found += [
                ("errors and fixes", v.strip()[-40:]) for v in ops.errors[:1]
            ]  # summaries clip the middle
            found += [("ports/paths/versions", v) for v in (*ops.environment, *ops.details)]
            for category, value in found:
                if value and value in source:
                    out[Fact(category, value)] = None
    return list(out)


def _text(window: ContextWindow) -> str:
    return window.render()


def _copy(window: ContextWindow) -> ContextWindow:
    """The same items, counts and mined facts (items are frozen: sharing them is safe)."""
    copy = ContextWindow(
        window.model,
        budget=window.budget,
        tokenizer=window.tokenizer,
        layer_budgets=window.layer_budgets,
        style=window.style,
        calibration=window.calibration,
    )
    items = window.items()
    for item in items:
        copy.counter.seed(item)
    copy.facts = window.facts
    copy.replace_all(items)
    return copy


def evaluate_window(
    window: ContextWindow,
    *,
    run: str = "",
    levels: Sequence[CompressionLevel] = ("standard", "deep"),
    budgets: Sequence[int] = (),
) -> RunEvaluation:
    """Compress copies of ``window`` at each level and to each budget; count what is kept."""
    facts = facts_of(window.items(), window.facts)
    tokens = window.usage().tokens
    result = RunEvaluation(run=run, tokens=tokens)
    for fact in facts:
        result.facts[fact.category] = result.facts.get(fact.category, 0) + 1
    plans: list[tuple[str, Any]] = [(str(level), level) for level in levels]
    plans += [(f"fit {budget}", budget) for budget in budgets]
    for label, plan in plans:
        copy = _copy(window)
        if isinstance(plan, int):
            copy.fit(plan)
        else:
            copy.compress(plan)
        after = _text(copy)
        kept: dict[str, int] = {}
        for fact in facts:
            if fact.value in after:
                kept[fact.category] = kept.get(fact.category, 0) + 1
        result.kept[label] = kept
        result.ratio[label] = round(copy.usage().tokens / tokens, 4) if tokens else 1.0
    return result


def model_family(model: str) -> str:
    """``gpt-4o-mini`` → ``gpt-4o``, ``claude-sonnet-4-5`` → ``claude``, ``scripted`` → itself."""
    name = model.lower().rsplit("/", 1)[-1]
    for prefix in ("gpt-4o", "gpt-4.1", "gpt-5", "gpt-4", "gpt-3.5", "o1", "o3", "o4"):
        if name.startswith(prefix):
            return prefix
    for family in ("claude", "gemini", "llama", "qwen", "mistral", "deepseek", "phi"):
        if family in name:
            return family
    return name.split("-", 1)[0] or "unknown"


def token_accuracy(records: Iterable[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Per model family, our raw prompt count over the provider's billed count, per call."""
    out: dict[str, list[float]] = {}
    for record in records:
        usage = record.get("usage") or {}
        billed, ours = usage.get("input"), record.get("rawTokens")
        if isinstance(billed, int) and billed > 0 and isinstance(ours, int):
            family = model_family(str(record.get("responseModel") or record.get("model") or ""))
            out.setdefault(family, []).append(ours / billed)
    return out


def window_from_messages(
    messages: Sequence[Mapping[str, Any]], *, model: str = "gpt-4o", budget: int | None = None
) -> ContextWindow:
    """A window holding an OpenAI-format transcript: system messages pinned in layer 1,
    the first user message as the goal, tool calls and results paired by id.

    The items go in at once (``replace_all``), not one ``add`` at a time: an ``add`` also
    pre-counts each operation's future summary lines for a live loop, which an evaluation
    that compresses once does not need (a hot path: see benchmarks/bench_eval.py).
    """
    window = ContextWindow(model, budget=budget)
    items: list[ContextItem] = []
    goal_seen = False
    for n, message in enumerate(messages):
        role = str(message.get("role") or "user")
        content = message.get("content")
        text = (
            content
            if isinstance(content, str)
            else json.dumps(content, ensure_ascii=False)
            if content
            else ""
        )
        if role in ("system", "developer"):
            items.append(new_item("system", text, id=f"m{n}", layer=Layer.SYSTEM, pinned=True))
        elif role == "user" and not goal_seen:
            goal_seen = True
            items.append(new_item("goal", text, id=f"m{n}", pinned=True))
        elif role == "assistant" and message.get("tool_calls"):
            for k, call in enumerate(message.get("tool_calls") or ()):
                function = call.get("function") or {}
                items.append(
                    new_item(
                        "tool_call",
                        str(function.get("arguments") or ""),
                        id=f"m{n}-{k}",
                        tool_call_id=str(call.get("id") or f"m{n}-{k}"),
                        metadata={
                            "name": str(function.get("name") or "tool"),
                            "arguments": function.get("arguments"),
                        },
                    )
                )
        elif role == "tool":
            items.append(
                new_item("tool_result", text, id=f"m{n}", tool_call_id=str(message.get("tool_call_id") or ""))
            )
        else:
            items.append(new_item("message", text, id=f"m{n}", role=role if role == "assistant" else "user"))
    window.replace_all(items)
    return window


def merge_reports(runs: Sequence[RunEvaluation]) -> dict[str, Any]:
    """Totals over runs: per level the share kept of each category and the token ratio;
    per model family the token-count accuracy (1 - mean relative error)."""
    levels = sorted({label for r in runs for label in r.kept}, key=lambda s: (s.startswith("fit"), s))
    found = {c: sum(r.facts.get(c, 0) for r in runs) for c in CATEGORIES}
    table: dict[str, Any] = {}
    for label in levels:
        counted = [r for r in runs if label in r.kept]
        kept = {c: sum(r.kept[label].get(c, 0) for r in counted) for c in CATEGORIES}
        ratios = [r.ratio[label] for r in counted]
        table[label] = {
            "kept": {c: (round(kept[c] / found[c], 4) if found[c] else None) for c in CATEGORIES},
            "tokenRatio": round(sum(ratios) / len(ratios), 4) if ratios else None,
        }
    families: dict[str, list[float]] = {}
    for r in runs:
        for family, values in r.accuracy.items():
            families.setdefault(family, []).extend(values)
    accuracy = {
        family: {
            "calls": len(values),
            "accuracy": round(1 - sum(abs(v - 1) for v in values) / len(values), 4),
            "meanRatio": round(sum(values) / len(values), 4),
        }
        for family, values in families.items()
        if values
    }
    return {
        "runs": len(runs),
        "failed": [{"run": r.run, "error": r.error} for r in runs if r.error],
        "facts": found,
        "levels": table,
        "tokenAccuracy": accuracy,
    }
