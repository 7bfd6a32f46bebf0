"""Decisions that replace earlier ones, and restrictions the user takes back.

A run's decisions are protected: no compression drops them. That is right until the user
changes their mind ("Change of plan: use valkey 8.0 on port 2333 instead"), a question is
answered again, or a setting gets a new value: keeping the old decision as protected
would let the summary's key decisions state what no longer holds. This module finds, in
seq order, which decision a later one replaces and which constraint a later statement
lifts, so the compressor keeps the current one protected and the old one as one short
"superseded" line. Pattern and word-overlap based, deterministic, like the rest.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from tether.context.facts import FactCache
from tether.context.items import ContextItem
from tether.context.notes import lifts, normalise

__all__ = ["Superseded", "changes_plan", "find_superseded", "short_line"]

_T = TypeVar("_T")

_CHANGE = re.compile(
    r"(?i)\b(change of plan|changed? (?:my|our|the) mind|instead\b|no longer|rather than|switch(?:ed)? to|"
    r"replac(?:e|ed|ing)\b|scratch that|actually,|not \w+ any ?more|from now on|revert(?:ed)? to|"
    r"update(?:d)?:|correction)"
)
_SETTING = re.compile(r"\b([A-Z][A-Z0-9_]{2,})\s*(?:=|\bto\b|\bis now\b|\bvalue\b)\s*\S")
_QUESTION = re.compile(r"^(?:Q:\s*)?(.+?\?)")
_STOP = frozenset(
    [
        "a",
        "about",
        "actually",
        "after",
        "agreed",
        "all",
        "also",
        "an",
        "and",
        "answer",
        "any",
        "are",
        "at",
        "be",
        "before",
        "by",
        "can",
        "change",
        "confirmed",
        "could",
        "default",
        "did",
        "do",
        "does",
        "done",
        "failed",
        "for",
        "from",
        "get",
        "go",
        "here",
        "i",
        "in",
        "instead",
        "into",
        "is",
        "it",
        "just",
        "keep",
        "let",
        "lets",
        "longer",
        "make",
        "me",
        "more",
        "my",
        "need",
        "no",
        "not",
        "now",
        "of",
        "ok",
        "okay",
        "on",
        "only",
        "or",
        "our",
        "over",
        "plan",
        "please",
        "q",
        "rather",
        "set",
        "should",
        "sure",
        "switch",
        "than",
        "that",
        "the",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "to",
        "under",
        "us",
        "use",
        "used",
        "user",
        "using",
        "want",
        "was",
        "we",
        "were",
        "what",
        "which",
        "will",
        "with",
        "would",
        "yes",
        "you",
        "your",
    ]
)
_ASKED = re.compile(r"(?s)^(?:Q:\s*)?(.*?\?)\s*(?:\n\s*A:|→ user:)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Superseded:
    old_id: str
    new_id: str
    kind: str
    """``decision`` or ``constraint`` (lifted)."""
    line: str
    """The one short line the summary keeps: ``old → now: new``."""


def changes_plan(text: str) -> bool:
    """The statement changes an earlier plan or setting ("instead", "change of plan", ...)."""
    return bool(_CHANGE.search(text))


def _words(text: str) -> set[str]:
    out = set()
    for w in normalise(text).split():
        if w in _STOP or len(w) < 3:
            continue
        out.add(w[:-1] if len(w) > 4 and w.endswith("s") else w)
    return out


def _question(item: ContextItem) -> str:
    asked = item.metadata.get("question")
    if isinstance(asked, str) and asked.strip():
        return normalise(asked)
    m = _ASKED.match(item.content)
    return normalise(m.group(1)) if m else ""


def _answer(item: ContextItem) -> str:
    answer = item.metadata.get("answer")
    if isinstance(answer, str):
        return answer
    text = item.content
    for sep in ("\nA:", "→ user:"):
        if sep in text:
            return text.split(sep, 1)[1]
    return text


def _settings(text: str) -> set[str]:
    return set(_SETTING.findall(text))


def _final(item: ContextItem) -> bool:
    """The loop's own record that the run finished or failed: never a choice to replace."""
    return item.content.startswith(("done:", "failed:"))


def short_line(item: ContextItem, limit: int = 90) -> str:
    text = " / ".join(p.strip() for p in item.content.splitlines() if p.strip())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


@dataclass(slots=True)
class _Seen:
    """What a decision says, read once: its question, answer, settings and topic words."""

    item: ContextItem
    question: str
    answer: str
    settings: set[str]
    words: set[str]


def _seen(item: ContextItem) -> _Seen:
    answer = _answer(item)
    return _Seen(item, _question(item), answer, _settings(answer), _words(item.content))


def _constraint_words(item: ContextItem) -> set[str]:
    return _words(item.content)


def find_superseded(items: Iterable[ContextItem], *, facts: FactCache | None = None) -> list[Superseded]:
    """Which decisions later ones replace and which constraints later statements lift.

    A decision replaces an earlier one when it answers the same question again, sets a
    setting (``KEY=…``, ``KEY to …``) the earlier one set, or changes the plan ("instead",
    "change of plan", "no longer", ...) and shares at least two topic words with it (the
    earlier decision with the most is replaced). A statement that lifts a restriction
    ("no longer", "you may now", ...) and shares two topic words with a constraint lifts
    it. Each old item is replaced once, by the first later item that qualifies. ``facts``
    (a window's cache) remembers what each item says between compressions.
    """
    read = facts.memo if facts is not None else _read
    ordered = sorted(items, key=lambda i: i.seq)
    current: list[_Seen] = []
    constraints: list[tuple[ContextItem, set[str]]] = []
    out: list[Superseded] = []
    for item in ordered:
        if item.kind == "constraint" and not item.pinned:
            constraints.append((item, read(item, _constraint_words)))
            continue
        if item.kind != "decision" or item.pinned or _final(item):
            continue
        seen = read(item, _seen)
        if constraints and lifts(seen.answer):
            words = _words(seen.answer)
            best = max(constraints, key=lambda c: len(words & c[1]))
            if len(words & best[1]) >= 2:
                constraints.remove(best)
                line = f"lifted: {short_line(best[0])} → {short_line(item, 70)}"
                out.append(Superseded(old_id=best[0].id, new_id=item.id, kind="constraint", line=line))
        old = _replaced(seen, current)
        if old is not None:
            current.remove(old)
            line = f"{short_line(old.item)} → now: {short_line(item, 70)}"
            out.append(Superseded(old_id=old.item.id, new_id=item.id, kind="decision", line=line))
        current.append(seen)
    return out


def _read(item: ContextItem, read: Callable[[ContextItem], _T]) -> _T:
    return read(item)


def _replaced(new: _Seen, current: Sequence[_Seen]) -> _Seen | None:
    if new.question:
        same = [c for c in current if c.question == new.question]
        if same:
            return same[-1]
    if new.settings:
        same = [c for c in current if new.settings & c.settings]
        if same:
            return same[-1]
    if not changes_plan(new.answer) and not changes_plan(new.item.content):
        return None
    best, score = None, 0
    for c in current:  # the most shared topic words; the newest on a tie
        shared = len(new.words & c.words)
        if shared >= 2 and shared >= score:
            best, score = c, shared
    return best
