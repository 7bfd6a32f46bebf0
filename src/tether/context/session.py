"""Keep the rolling summary inside its budget: operation lines → phase paragraphs → run paragraph.

Every compression adds the lines of what it folds to the summary's completed work, so on a
long run the summary would grow until it fills the window and compression runs on every
step. When the summary's share of the session layer is exceeded, the oldest lines are
re-summarised into paragraphs (one per block of operations: how many, which programs, how
many failed, the first facts), and when paragraphs alone are too many, the oldest two are
merged into one run paragraph. Configurations, artefacts and resolved issues survive in
the summary's structured fields, so a paragraph can be short. Deterministic, like the rest.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["Paragraph", "bound_summary", "paragraph_text"]

Paragraph = dict[str, Any]
"""``{"ops": n, "failed": k, "programs": {name: count}, "facts": [...]}``, JSON-like."""
BLOCK = 12
"""Operation lines folded into one paragraph at a time."""
KEEP_LINES = 6
"""Newest lines always kept as lines: the recent past stays detailed."""
_MAX_FACTS = 4
_CMD = re.compile(r"^\$ (\S+)(?: (\S+))?.*?(?:→ exit (-?\d+))?(?::|$)")


def _program(line: str) -> tuple[str, bool]:
    """``("docker build", failed?)`` for an operation line; the role for a message line."""
    m = _CMD.match(line)
    if m is None:
        return line.split(":", 1)[0][:20], False
    name = m.group(1) if not m.group(2) or m.group(2).startswith("-") else f"{m.group(1)} {m.group(2)}"
    return name, m.group(3) not in (None, "0") or "✗" in line


def _facts(line: str) -> list[str]:
    if "→ exit" not in line or ": " not in line.split("→ exit", 1)[1]:
        return []
    tail = line.split("→ exit", 1)[1].split(": ", 1)[1]
    return [f.strip() for f in tail.split("; ") if f.strip() and not f.startswith("✗")][:1]


def fold_lines(lines: Sequence[str]) -> Paragraph:
    programs: dict[str, int] = {}
    failed = 0
    facts: list[str] = []
    for line in lines:
        name, bad = _program(line)
        programs[name] = programs.get(name, 0) + 1
        failed += bad
        facts += [f for f in _facts(line) if f not in facts]
    return {"ops": len(lines), "failed": failed, "programs": programs, "facts": facts[:_MAX_FACTS]}


def merge_paragraphs(a: Mapping[str, Any], b: Mapping[str, Any]) -> Paragraph:
    programs = dict(a.get("programs") or {})
    for name, n in (b.get("programs") or {}).items():
        programs[name] = programs.get(name, 0) + int(n)
    top = dict(sorted(programs.items(), key=lambda kv: -kv[1])[:8])
    other = sum(programs.values()) - sum(top.values())
    if other:
        top["other"] = top.get("other", 0) + other
    facts = [*(a.get("facts") or []), *(b.get("facts") or [])]
    return {
        "ops": int(a.get("ops", 0)) + int(b.get("ops", 0)),
        "failed": int(a.get("failed", 0)) + int(b.get("failed", 0)),
        "programs": top,
        "facts": facts[-_MAX_FACTS:],
    }


def paragraph_text(p: Mapping[str, Any]) -> str:
    """One line: ``42 earlier operations (3 failed): docker build ×9, … Facts: …``."""
    progs = ", ".join(f"{name} ×{n}" for name, n in (p.get("programs") or {}).items())
    failed = f" ({p.get('failed')} failed)" if p.get("failed") else ""
    facts = "; ".join(str(f)[:80] for f in p.get("facts") or [])
    return f"{p.get('ops', 0)} earlier operations{failed}: {progs}" + (f". Facts: {facts}" if facts else "")


def bound_summary(
    history: Sequence[Mapping[str, Any]],
    lines: Sequence[str],
    *,
    budget: int,
    count: Callable[[str], int],
    overhead: int = 0,
) -> tuple[list[Paragraph], list[str]]:
    """Fold the oldest lines into paragraphs, then merge paragraphs, until under ``budget``.

    ``overhead`` is what the rest of the summary costs (goal, decisions, sections). The
    newest :data:`KEEP_LINES` lines and one paragraph always remain, so the result can
    stay above a budget too small for them; the caller reports that.
    """
    paragraphs: list[Paragraph] = [dict(p) for p in history]
    kept = list(lines)
    line_cost = [count(x) + 2 for x in kept]
    para_cost = [count(paragraph_text(p)) + 2 for p in paragraphs]
    total = overhead + sum(line_cost) + sum(para_cost)
    while total > budget:
        if len(kept) > KEEP_LINES:
            n = min(BLOCK, len(kept) - KEEP_LINES)
            para = fold_lines(kept[:n])
            kept, removed, line_cost = kept[n:], sum(line_cost[:n]), line_cost[n:]
            paragraphs.append(para)
            cost = count(paragraph_text(para)) + 2
            para_cost.append(cost)
            total += cost - removed
        elif len(paragraphs) > 1:
            merged = merge_paragraphs(paragraphs[0], paragraphs[1])
            cost = count(paragraph_text(merged)) + 2
            total += cost - para_cost[0] - para_cost[1]
            paragraphs[:2], para_cost[:2] = [merged], [cost]
        else:
            break
    return paragraphs, kept
