"""Semantic history window: recent iterations plus milestones.

A fixed "last N iterations" window forgets the user's decision made 30 iterations ago.
The semantic window keeps the last N iterations together with milestone iterations (user
decisions, FINISH attempts, big plan changes, the first TEST PASS), keeps milestones in
full, reduces other iterations to ``next_agent`` / ``reason`` / ``dev_plan`` lines, and
stays under a token budget, never keeping fewer than a minimum of recent iterations.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tether.context.tokens import Tokenizer

logger = logging.getLogger(__name__)

__all__ = [
    "HistoryEntry",
    "HistoryWindow",
    "build_history_window",
    "compress_entry",
    "detect_milestones",
    "parse_history",
]

_HEADING = re.compile(r"(?m)^##\s*Iteration\s+(\d+)\s*:?\s*(.*)$", re.I)
_MARK = "[MILESTONE]"
_USER = re.compile(r"(?i)next_agent\s*[:=]\s*USER\b|user decision|用户决策|USER 决策")
_FINISH = re.compile(r"(?i)next_agent\s*[:=]\s*FINISH\b|FINISH attempt|FINISH 尝试")
_TEST_VERDICT = re.compile(r"(?i)\bTEST\b.*?\b(PASS|FAIL)\b")
_PLAN_CHANGES = re.compile(r"(?i)dev_plan\b.*?(\d+)\s*(?:tasks?|items?|项)?\s*(?:changed|updated|变更)")
_KEEP_LINE = re.compile(r"(?i)^[\s>*-]*(next_agent|reason|dev_plan)\b")
BIG_PLAN_CHANGE = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryEntry:
    iteration: int
    text: str
    """The iteration's full markdown, heading included."""
    milestone: bool = False
    milestone_reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryWindow:
    """The history a prompt carries: the recent iterations and the milestones, rendered."""

    text: str
    recent_iterations: tuple[int, ...]
    milestone_iterations: tuple[int, ...]
    total_tokens: int
    compression_ratio: float
    """Tokens kept / tokens of the same iterations uncompressed."""


def parse_history(markdown: str) -> list[HistoryEntry]:
    """Split ``## Iteration N: …`` sections; headings marked ``[MILESTONE]`` are milestones."""
    matches = list(_HEADING.finditer(markdown))
    if not matches:  # no iteration yet (a title line only)
        return []
    entries: list[HistoryEntry] = []
    for m, nxt in zip(matches, [*matches[1:], None], strict=True):
        end = nxt.start() if nxt else len(markdown)
        title = m.group(2)
        marked = _MARK in title
        entries.append(
            HistoryEntry(
                iteration=int(m.group(1)),
                text=markdown[m.start() : end].rstrip(),
                milestone=marked,
                milestone_reason=title.replace(_MARK, "").strip() if marked else "",
            )
        )
    return entries


def detect_milestones(entries: Sequence[HistoryEntry]) -> list[HistoryEntry]:
    """Mark user decisions, FINISH attempts, big plan changes and the first TEST PASS.

    Already-marked entries keep their reason. Detection is textual and best-effort: a
    history without these cues degrades to the fixed window, as the seed specifies.
    """
    out: list[HistoryEntry] = []
    first_pass_seen = False
    finish_attempts = 0
    for entry in entries:
        reason = entry.milestone_reason if entry.milestone else ""
        text = entry.text
        verdicts = [v.upper() for v in _TEST_VERDICT.findall(text)]
        if _USER.search(text) and not reason:
            reason = "user decision"
        if _FINISH.search(text):
            finish_attempts += 1
            reason = reason or f"FINISH attempt #{finish_attempts}"
        if (plan := _PLAN_CHANGES.search(text)) and int(plan.group(1)) > BIG_PLAN_CHANGE:
            reason = reason or "big plan change"
        if "PASS" in verdicts and not first_pass_seen:
            first_pass_seen = True
            reason = reason or "first TEST PASS"
        out.append(
            dataclasses.replace(entry, milestone=bool(reason) or entry.milestone, milestone_reason=reason)
        )
    return out


def compress_entry(entry: HistoryEntry) -> str:
    """A non-milestone iteration reduced to its heading and next_agent/reason/dev_plan."""
    lines = entry.text.splitlines()
    kept = [line for line in lines[1:] if _KEEP_LINE.match(line)]
    return "\n".join([lines[0], *kept]) if lines else ""


def _render(entry: HistoryEntry, full: bool) -> str:
    return entry.text if full else compress_entry(entry)


def build_history_window(
    entries: Iterable[HistoryEntry],
    *,
    tokenizer: Tokenizer,
    max_tokens: int,
    last_n: int = 5,
    min_recent: int = 2,
    include_milestones: bool = True,
) -> HistoryWindow:
    """Last ``last_n`` iterations ∪ milestones, under ``max_tokens`` when possible.

    The ``min_recent`` newest iterations stay in full; other non-milestone iterations are
    compressed; milestones stay in full. Over budget, it drops compressed recent
    iterations (oldest first), then compresses and drops milestones (oldest first), and
    never drops the ``min_recent`` newest, even if they alone exceed the budget.
    """
    ordered = sorted(entries, key=lambda e: e.iteration)
    if include_milestones:
        ordered = detect_milestones(ordered)
    recent = ordered[-last_n:] if last_n > 0 else []
    protected = {e.iteration for e in ordered[-max(min_recent, 0) :]} if min_recent > 0 else set()
    chosen = {e.iteration: e for e in recent}
    if include_milestones:
        chosen.update({e.iteration: e for e in ordered if e.milestone})
    full = {i for i, e in chosen.items() if i in protected or e.milestone}

    def cost(iteration: int) -> int:
        return tokenizer.count(_render(chosen[iteration], iteration in full)) + 1

    costs = {i: cost(i) for i in chosen}
    total = sum(costs.values())
    drop_order = [i for i in sorted(chosen) if i not in protected and not chosen[i].milestone]
    drop_order += [i for i in sorted(chosen) if i not in protected and chosen[i].milestone]
    for i in drop_order:
        if total <= max_tokens:
            break
        if chosen[i].milestone and i in full:
            full.discard(i)  # first compress the milestone, then drop it if still over
            total += cost(i) - costs[i]
            costs[i] = cost(i)
            if total <= max_tokens:
                break
        total -= costs.pop(i)
        del chosen[i]
    if total > max_tokens:
        logger.warning(
            "history window over budget (%d > %d tokens): kept the %d most recent iterations",
            total,
            max_tokens,
            len(protected),
        )
    parts = [_render(chosen[i], i in full) for i in sorted(chosen)]
    text = "\n\n".join(parts)
    raw = sum(tokenizer.count(chosen[i].text) + 1 for i in chosen)
    return HistoryWindow(
        text=text,
        recent_iterations=tuple(i for i in sorted(chosen) if i in {e.iteration for e in recent}),
        milestone_iterations=tuple(i for i in sorted(chosen) if chosen[i].milestone),
        total_tokens=total,
        compression_ratio=total / raw if raw else 1.0,
    )
