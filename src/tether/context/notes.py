"""What messages say that must outlive them: plans, progress, answers, constraints.

When compression folds a message, a plan in it (a ``- [ ]`` checklist, numbered steps, a
``TODO:`` line), the user's or the agent's own, becomes TODO items; later messages that
tick an item off (``- [x] ...``, ``Done: ...``, ``step 2 done``) update their status; a
user's reply to the agent's question becomes a decision holding both; and a user's
"never ..." / "do not ..." line becomes a constraint. These become protected items, so
no later compression drops them. Everything here is pattern-based and deterministic.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "PlanStep",
    "StatusUpdate",
    "constraint_lines",
    "is_question",
    "is_step_line",
    "plan_steps",
    "status_updates",
]

_CHECKBOX = re.compile(r"^\s*(?:[-*+]|\d+[.)])?\s*\[( |x|X|~|-)\]\s+(.+?)\s*$")
_NUMBERED = re.compile(r"^\s*(\d{1,2})[.)]\s+(.+?)\s*$")
_TODO = re.compile(r"^\s*(?:[-*]\s*)?TODO\b[:\s-]+(.+?)\s*$", re.IGNORECASE)
_DONE_LINE = re.compile(
    r"^\s*(?:[-*]\s*)?(?:done|completed|finished|✓|✅)\s*[:\-–]\s*(.+?)\s*$", re.IGNORECASE
)
_STEP_DONE = re.compile(r"\bstep\s+(\d{1,2})\s+(?:is\s+)?(?:done|complete|completed|finished)\b", re.I)
_PLAN_HINT = re.compile(r"(?i)\b(plan|steps|todo|checklist|next|will)\b")
_CONSTRAINT = re.compile(
    r"(?i)^(?:important:\s*|note:\s*|please\s+)?.*\b(never|do not|don't|must not|mustn't|"
    r"must|always|only|avoid|without)\b"
)
_STATUS = {" ": "pending", "x": "done", "X": "done", "~": "in_progress", "-": "skipped"}


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanStep:
    text: str
    status: str = "pending"
    number: int | None = None
    """Position in a numbered plan, so "step 2 done" can find it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusUpdate:
    text: str = ""
    number: int | None = None
    status: str = "done"


def plan_steps(text: str) -> list[PlanStep]:
    """Checklist items, ``TODO:`` lines, and numbered steps of a message that announces a plan.

    Numbered lists count only when the message mentions a plan (or steps, next, will),
    so an enumerated explanation does not become TODO items.
    """
    steps: list[PlanStep] = []
    numbered: list[PlanStep] = []
    for line in text.splitlines():
        box = _CHECKBOX.match(line)
        if box:
            steps.append(PlanStep(text=box.group(2), status=_STATUS[box.group(1)]))
            continue
        todo = _TODO.match(line)
        if todo:
            steps.append(PlanStep(text=todo.group(1)))
            continue
        num = _NUMBERED.match(line)
        if num:
            numbered.append(PlanStep(text=num.group(2), number=int(num.group(1))))
    if len(numbered) >= 2 and _PLAN_HINT.search(text):
        steps += numbered
    return steps


def is_step_line(line: str) -> bool:
    """A checklist, numbered or ``TODO:`` line (what :func:`plan_steps` turns into items)."""
    return bool(_CHECKBOX.match(line) or _NUMBERED.match(line) or _TODO.match(line))


_PROGRESS_WORDS = ("[", "done", "complet", "finish", "✓", "✅")


def status_updates(text: str) -> list[StatusUpdate]:
    """Progress a message reports on earlier plan items."""
    out: list[StatusUpdate] = []
    low = text.lower()
    if not any(w in low for w in _PROGRESS_WORDS):
        return out
    for line in text.splitlines():
        box = _CHECKBOX.match(line)
        if box and box.group(1) != " ":
            out.append(StatusUpdate(text=box.group(2), status=_STATUS[box.group(1)]))
            continue
        done = _DONE_LINE.match(line)
        if done:
            out.append(StatusUpdate(text=done.group(1)))
            continue
        out += [StatusUpdate(number=int(m.group(1))) for m in _STEP_DONE.finditer(line)]
    return out


@functools.lru_cache(maxsize=16_384)
def normalise(text: str) -> str:
    return re.sub(r"[\W_]+", " ", text).strip().lower()


def matches(step: str, update: str) -> bool:
    """An update names a step when one normalised text contains the other."""
    a, b = normalise(step), normalise(update)
    return bool(a and b) and (a in b or b in a)


def is_question(text: str) -> bool:
    """The agent asks something: a line ending in a question mark."""
    return any(line.rstrip().endswith("?") for line in text.splitlines())


def question_text(text: str) -> str:
    """The question with the line before it when that line gives the context."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for k, line in enumerate(lines):
        if line.endswith("?"):
            return " ".join(lines[max(k - 1, 0) : k + 1])
    return " ".join(lines)


_LIFT = re.compile(
    r"(?i)\b(no longer|not any ?more|lifted|is lifted|you (?:may|can) now|it'?s (?:fine|ok) (?:now )?to|"
    r"is (?:now )?allowed|feel free to)\b"
)


def lifts(text: str) -> bool:
    """The user takes a restriction back ("you may now restart ...", "X no longer applies")."""
    return bool(_LIFT.search(text))


def constraint_lines(text: str) -> list[str]:
    """Lines of a user message that restrict how the work may be done.

    A line that continues a restriction without a cue word of its own (the next line of
    the same paragraph: "keep every file under /data/...") belongs to it.
    """
    out: list[str] = []
    open_rule = False
    for line in text.splitlines():
        clean = line.strip().lstrip("-*• ").strip()
        if not clean:
            open_rule = False
            continue
        if _CHECKBOX.match(line) or len(clean) >= 300 or lifts(clean):
            open_rule = False
            continue
        if _CONSTRAINT.match(clean):
            out.append(clean)
            open_rule = True
        elif open_rule and not clean.endswith("?") and len(out[-1]) + len(clean) < 400:
            out[-1] = f"{out[-1]} {clean}"
    return out


def join_lines(parts: Iterable[str], sep: str = " / ") -> str:
    return sep.join(p.strip() for p in parts if p.strip())


def flatten(text: str, limit: int) -> str:
    """A multi-line message as one line, every line kept until ``limit`` characters."""
    flat = join_lines(text.splitlines())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)].rstrip() + "…"


def first_question(messages: Sequence[tuple[str, str]]) -> str | None:
    for role, text in reversed(messages):
        if role == "assistant" and is_question(text):
            return question_text(text)
        if role == "user":
            return None
    return None
