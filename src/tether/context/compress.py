"""Compressors: standard (~60% kept), deep (~30%), phase and checkpoint.

Every compressor is a pure function of items to items. The rules that make compression
safe hold at every level:

* pinned items, system constants, the goal, the TODO list, constraints and decisions come
  back byte-for-byte (they are the same objects);
* a tool call and its result are one unit: kept together or folded together;
* the output is a function of the input only (no clock, no randomness), so a resumed run
  compresses exactly as the original did.

Standard and deep compression fold the oldest operations into one-line entries of a
summary written in the template, then give detail back to the most recent folded
operations until the target ratio is reached: the budget the seed intends to free is
freed, and what stays is the freshest detail rather than arbitrary truncation.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Literal, cast

from tether.context.distill import distill
from tether.context.facts import FactCache
from tether.context.items import PROTECTED_KINDS, ContextItem, ItemCounter, Layer
from tether.context.session import bound_summary, paragraph_text
from tether.context.summarizer import (
    AsyncSummarizer,
    StructuredSummarizer,
    Summarizer,
    SummaryRequest,
)
from tether.context.supersede import find_superseded
from tether.errors import BudgetExceeded

logger = logging.getLogger(__name__)

__all__ = [
    "DEEP_TARGET",
    "STANDARD_TARGET",
    "SUMMARY_ID",
    "CompressionLevel",
    "CompressionResult",
    "LINE_LENGTHS",
    "Unit",
    "compress",
    "compress_async",
    "compress_phase",
    "PHASE_PREFIX",
    "fit",
    "group_units",
    "one_line",
]

STANDARD_TARGET = 0.60
DEEP_TARGET = 0.30
SUMMARY_ID = "ctx-summary"
"""Id of the rolling compression summary; each compression folds the previous one in."""
CompressionLevel = Literal["standard", "deep", "checkpoint"]
Unit = tuple[ContextItem, ...]
_LINE_CHARS = {"standard": 200, "checkpoint": 200, "deep": 200}
"""Deep folds more operations, not shorter lines: a clipped line loses a command's end."""
LINE_LENGTHS = tuple(sorted(set(_LINE_CHARS.values())))
"""Lengths of a folded operation's summary line, one per level (what a window pre-computes)."""
_KEEP_RECENT = {"standard": 3, "checkpoint": 0, "deep": 0}
_SAMPLE_LINES = 64
_OPERATION_KINDS = frozenset(
    {"operation", "tool_call", "tool_result", "message", "error", "report", "summary"}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class CompressionResult:
    """The compressed items and an account of what happened to the rest."""

    items: tuple[ContextItem, ...]
    level: str
    before_tokens: int
    after_tokens: int
    summarized_ids: tuple[str, ...] = ()
    """Folded into the summary as one line each."""
    dropped_ids: tuple[str, ...] = ()
    """Removed without a trace in the summary (query results, repeats, stale state)."""
    summary_id: str | None = None
    archive_id: str | None = None
    """Artefact holding every pre-compression item, when an archive was given."""
    warnings: tuple[str, ...] = ()
    """What could not be honoured, e.g. protected items alone filling the session layer."""

    @property
    def kept_ratio(self) -> float:
        return self.after_tokens / self.before_tokens if self.before_tokens else 1.0


_SEQ = attrgetter("seq")
_LAYER_SEQ = attrgetter("layer", "seq")


def group_units(items: Iterable[ContextItem]) -> list[Unit]:
    """Items in insertion order, each tool call grouped with the result(s) that follow it.

    Pairing is by position as well as id: some providers reuse ``tool_call_id`` across
    turns, so a call opens a unit that collects results with its id until the next call
    with the same id opens another. A result with no call before it is a unit of its own.
    """
    units: list[list[ContextItem]] = []
    open_calls: dict[str, list[ContextItem]] = {}
    for item in sorted(items, key=_SEQ):
        call_id = item.tool_call_id
        if not call_id:
            units.append([item])
        elif item.kind == "tool_call" or (item.effective_role == "assistant" and item.kind != "tool_result"):
            open_calls[call_id] = [item]
            units.append(open_calls[call_id])
        elif call_id in open_calls:
            open_calls[call_id].append(item)
        else:
            units.append([item])
    return [tuple(unit) for unit in units]


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)].rstrip() + "…"


def one_line(unit: Unit, *, max_chars: int = 200) -> str:
    """The one-line account of an operation kept in the summary's completed work."""
    call = next((i for i in unit if i.kind == "tool_call"), None)
    result = next((i for i in unit if i.kind == "tool_result"), None)
    if call is not None and result is not None:
        name = call.metadata.get("name") or _first_line(call.content)
        text = f"{name} → {_first_line(result.content)}"
    else:
        text = _first_line(unit[0].text)
    phase = unit[0].phase
    return _clip(f"[{phase}] {text}" if phase else text, max_chars)


def _todo_done(item: ContextItem) -> bool:
    status = str(item.metadata.get("status", "")).lower()
    if status:
        return status in {"done", "completed", "complete", "skipped"}
    head = item.content.lstrip()[:4].lower()
    return head.startswith(("[x]", "✅", "done"))


def _unit_cost(unit: Unit, counter: ItemCounter) -> int:
    return sum(counter.cost(i) for i in unit)


@dataclass(slots=True, kw_only=True)
class _Plan:
    level: str
    items: list[ContextItem]
    before: int
    keep_ids: set[str] = field(default_factory=set)
    fold: list[Unit] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    carried: list[str] = field(default_factory=list)
    summary_seq: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    """Paragraphs that older completed lines were re-summarised into, oldest first."""
    warnings: list[str] = field(default_factory=list)
    notes: list[ContextItem] = field(default_factory=list)
    """TODOs, decisions and constraints distilled from what folds (new or updated)."""
    fields: dict[str, Any] = field(default_factory=dict)
    resolutions: list[str] = field(default_factory=list)
    decisions: list[ContextItem] = field(default_factory=list)
    """The current decisions (superseded ones left out), in seq order."""
    constraints: list[ContextItem] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)
    """One short line per decision replaced or constraint lifted, newest last (capped)."""
    phases: list[str] = field(default_factory=list)
    """One line per finished phase, oldest first (from phase compressions)."""
    cost_of: dict[str, int] = field(default_factory=dict)
    """Each input item's cost by id, counted once."""
    goal: str = ""
    todos: list[ContextItem] = field(default_factory=list)
    """TODO items other than the current-item copy, in prompt order."""
    states: list[ContextItem] = field(default_factory=list)
    errors: list[ContextItem] = field(default_factory=list)
    request: SummaryRequest | None = None


def _request(
    plan: _Plan, lines: Sequence[str], archive_id: str | None, max_tokens: int, *, details: bool = False
) -> SummaryRequest:
    goal, todos = plan.goal, plan.todos
    pending = next((t for t in todos if not _todo_done(t)), None)
    label = _todo_label(pending) if pending is not None else ""
    title = str(pending.metadata.get("text", "")) if pending is not None else ""
    in_progress = f"⏳ phase {label} – {_clip(title, 120)}: in progress" if label and title else ""
    states = plan.states
    errors = [i for i in plan.errors if i.id in plan.keep_ids]
    current = [_clip(_first_line(s.content), 200) for s in states[-1:]]
    current += [_clip(_first_line(e.text), 200) for e in errors[-1:]]
    current += [f"TODO {_clip(_first_line(t.content), 120)}" for t in todos if not _todo_done(t)]
    # once lines have been re-summarised into paragraphs, the structured fields keep what they lost
    shown = "\n".join(lines)
    changed = plan.fields.get("config_history") or {}
    configs = [  # every key once lines were re-summarised; else the keys whose value changed
        f"{k}={v}" + (f" (earlier: {', '.join(changed[k])})" if k in changed else "")
        for k, v in (plan.fields.get("configurations") or {}).items()
        if plan.history or k in changed
    ]
    artifacts = list(plan.fields.get("artifacts") or ()) if plan.history else []
    return SummaryRequest(
        configurations=tuple(c for c in configs if c not in shown),  # a changed key always shows
        artifacts=tuple(a for a in artifacts if a not in shown),
        level=plan.level,
        goal=_clip(_first_line(goal), 200),
        completed=tuple(lines),
        current_state=tuple(current),
        decisions=tuple(_flat(i.content, 200) for i in plan.decisions),
        next_step=(
            f"TODO #{label}: {_clip(title, 200)}"
            if label and title
            else _clip(_first_line(pending.content), 200)
            if pending
            else ""
        ),
        phases=tuple(plan.phases),
        in_progress=in_progress,
        constraints=tuple(_flat(i.content, 240) for i in plan.constraints),
        superseded=tuple(plan.superseded),
        resolved=tuple(plan.resolutions),
        history=tuple(paragraph_text(p) for p in plan.history),
        details=tuple("\n".join(i.text for i in unit) for unit in plan.fold) if details else (),
        archive_id=archive_id,
        max_tokens=max_tokens,
    )


def _todo_label(todo: ContextItem) -> str:
    number = todo.metadata.get("number")
    return todo.phase or ("" if number is None else str(number))


def _flat(text: str, limit: int) -> str:
    """A multi-line note on one line, its head and its end kept (a question and its answer)."""
    flat = " / ".join(p.strip() for p in text.splitlines() if p.strip())
    if len(flat) <= limit:
        return flat
    head = limit // 3
    return f"{flat[:head].rstrip()} … {flat[len(flat) - (limit - head - 3) :].lstrip()}"


_SUPERSEDED_LINES = 12


def _supersede(plan: _Plan, previous: ContextItem | None, facts: FactCache | None) -> None:
    """Keep only the current decisions and constraints; the replaced ones become lines."""
    replaced = {n.id for n in plan.notes}
    kinds = ("decision", "constraint")
    kept = [i for i in plan.items if i.kind in kinds and i.id in plan.keep_ids and i.id not in replaced]
    candidates = kept + [n for n in plan.notes if n.kind in kinds]
    lines = [str(x) for x in previous.metadata.get("superseded", [])] if previous is not None else []
    gone: set[str] = set()
    for s in find_superseded(candidates, facts=facts):
        gone.add(s.old_id)
        lines.append(s.line)
    if gone:
        plan.keep_ids -= gone
        plan.dropped.extend(i.id for i in kept if i.id in gone)
        plan.notes = [n for n in plan.notes if n.id not in gone]
    plan.superseded = lines[-_SUPERSEDED_LINES:]
    current = sorted((c for c in candidates if c.id not in gone), key=lambda i: i.seq)
    plan.decisions = [c for c in current if c.kind == "decision"]
    plan.constraints = [c for c in current if c.kind == "constraint"]


def _working_cost(unit: Unit, cost: Mapping[str, int]) -> int:
    return sum(cost[i.id] for i in unit if i.layer is Layer.WORKING)


def _plan(
    items: Sequence[ContextItem],
    level: CompressionLevel,
    *,
    counter: ItemCounter,
    target_ratio: float,
    before_seq: int | None,
    archive_id: str | None,
    summary_budget: int | None = None,
    working_budget: int | None = None,
    facts_cache: FactCache | None = None,
    counted: bool = False,
    details: bool = True,
) -> _Plan:
    items = list(items) if counted else [counter.counted(i) for i in items]
    cost_of = counter.costs(items)  # once: every total below reads it
    plan = _Plan(
        level=level, items=items, before=counter.fmt.reply_priming + sum(cost_of.values()), cost_of=cost_of
    )
    previous: ContextItem | None = None
    goal: str | None = None
    for i in items:  # one pass for what the summary's sections read
        kind = i.kind
        if previous is None and i.id == SUMMARY_ID and not i.pinned:
            previous = i
        if kind == "todo":
            if not i.metadata.get("current"):
                plan.todos.append(i)
        elif kind == "goal":
            if goal is None:
                goal = i.content
        elif kind == "state":
            plan.states.append(i)
        elif kind == "error":
            plan.errors.append(i)
    plan.goal = goal or ""
    if previous is not None:
        plan.carried = [str(x) for x in previous.metadata.get("completed", [])]
        plan.history = [dict(p) for p in previous.metadata.get("history", []) if isinstance(p, dict)]
        plan.summary_seq = previous.seq
    units = group_units(i for i in items if i is not previous)
    line_chars = _LINE_CHARS[level]

    ops: list[Unit] = []
    seen: set[tuple[tuple[str, str], ...]] = set()
    # the latest working-layer state is current; session-layer states are standing context
    latest_state = max((i.seq for i in plan.states if i.layer is not Layer.SESSION), default=-1)
    protected: list[bool] = []
    last_op_seq = -1
    for u in units:
        p = _protected(u)
        protected.append(p)
        if not p and u[0].kind in _OPERATION_KINDS and u[-1].seq > last_op_seq:
            last_op_seq = u[-1].seq
    # newest first, so the last copy of a repeat survives
    finished: list[ContextItem] = []
    keep_ids, dropped = plan.keep_ids, plan.dropped
    for unit, prot in zip(reversed(units), reversed(protected), strict=True):
        head = unit[0]
        key = ((head.kind, head.content),) if len(unit) == 1 else tuple([(i.kind, i.content) for i in unit])
        size = len(seen)
        seen.add(key)  # one hash: added now, a repeat when the set did not grow
        if head.id.startswith(PHASE_PREFIX) and not prot:  # a finished phase's line joins the summary
            finished.append(head)
            dropped.append(head.id)
        elif prot or (before_seq is not None and unit[-1].seq > before_seq):
            keep_ids.update([i.id for i in unit])
        elif len(seen) == size or (
            head.kind == "state" and head.layer is not Layer.SESSION and head.seq != latest_state
        ):
            dropped.extend([i.id for i in unit])
        elif head.kind == "query_result":
            if head.seq > last_op_seq:  # the current, not yet used result
                keep_ids.update([i.id for i in unit])
            else:
                dropped.extend([i.id for i in unit])
        elif head.kind in _OPERATION_KINDS:
            ops.append(unit)
        else:  # reminders, checkpoints, current state: small and per-request
            keep_ids.update([i.id for i in unit])
    ops.reverse()
    plan.phases = [str(x) for x in previous.metadata.get("phases", [])] if previous is not None else []
    plan.phases += [i.content for i in sorted(finished, key=lambda i: i.seq)]

    # The working layer's own budget: what stays in detail there fits under its share.
    working_cap = round(working_budget * target_ratio) if working_budget is not None else None
    working = sum(cost_of[i.id] for i in items if i.id in plan.keep_ids and i.layer is Layer.WORKING)
    recent = _KEEP_RECENT[level]
    split = len(ops) - min(recent, len(ops))
    keep_from = len(ops)
    for k in range(len(ops) - 1, split - 1, -1):  # newest first; the newest one always stays
        cost = _working_cost(ops[k], cost_of)
        if working_cap is not None and keep_from < len(ops) and working + cost > working_cap:
            break
        working += cost
        keep_from = k
    for unit in ops[keep_from:]:
        plan.keep_ids.update(i.id for i in unit)
    plan.fold = ops[:keep_from]
    if plan.fold and not plan.summary_seq:
        plan.summary_seq = plan.fold[0][0].seq

    # Give detail back to the newest folded operations while under the target.
    target = round(plan.before * target_ratio)
    facts = previous.metadata.get("facts") if previous is not None else None
    d = distill(plan.fold, units, items, previous=facts, line_chars=line_chars, cache=facts_cache)
    plan.notes = [counter.counted(n) for n in d.notes]
    plan.fields, plan.resolutions = d.fields, d.resolutions
    _supersede(plan, previous, facts_cache)
    replaced = {n.id for n in plan.notes}
    kept = counter.fmt.reply_priming + sum(counter.cost(n) for n in plan.notes)
    kept += sum(cost_of[i] for i in plan.keep_ids if i not in replaced)
    tokenize = counter.tokenizer.count
    position: dict[str, int] = {}  # a folded unit's line: its index in carried + new lines
    remaining = list(plan.carried)
    lines: dict[str, str] = {}
    for unit in plan.fold:
        head_id = unit[0].id
        line = lines[head_id] = d.lines.get(head_id, "")
        if line:
            position[head_id] = len(remaining)
            remaining.append(line)
    estimate = _estimator(tokenize, remaining)
    total_lines = len(remaining)
    if summary_budget is not None:
        frame = StructuredSummarizer().summarize(_request(plan, [], archive_id, 0))
        bound = counter.upper_bound(frame)  # when even this fits, the exact count changes nothing
        history, bounded = bound_summary(
            plan.history, remaining, budget=summary_budget, count=estimate, overhead=bound
        )
        if len(bounded) != len(remaining) or len(history) != len(plan.history):
            history, bounded = bound_summary(
                plan.history,
                remaining,
                budget=summary_budget,
                count=estimate,
                overhead=counter.count_text(frame),
            )
        plan.history, remaining = history, bounded
    cut = total_lines - len(remaining)  # the oldest lines went into paragraphs
    summary_tokens = estimate(StructuredSummarizer().summarize(_request(plan, remaining, archive_id, 0)))
    cost = kept + counter.fmt.per_message + 1 + summary_tokens
    if summary_budget is not None and summary_tokens > summary_budget:
        plan.warnings.append(
            f"the summary needs {summary_tokens} tokens, over its budget of {summary_budget}: "
            "the session layer's protected items (goal, TODOs, decisions, constraints) leave too little room"
        )
    given: set[str] = set()
    taken: set[int] = set()
    for unit in reversed(plan.fold):
        head_id = unit[0].id
        if head_id in d.absorbed:
            continue
        at = position.get(head_id)
        if at is not None and at < cut:
            break  # a line in a paragraph stays folded
        delta = -estimate(lines[head_id]) - 3
        more = 0
        for i in unit:
            delta += cost_of[i.id]
            if i.layer is Layer.WORKING:
                more += cost_of[i.id]
        if cost + delta > target * 0.98 or (working_cap is not None and working + more > working_cap * 0.98):
            break  # margin: the final summary may differ a little
        cost += delta
        working += more
        given.add(head_id)
        plan.keep_ids.update([i.id for i in unit])
        if at is not None:
            taken.add(at - cut)
    if taken:
        remaining = [x for k, x in enumerate(remaining) if k not in taken]
    plan.fold = [u for u in plan.fold if u[0].id not in given]
    if working_budget is not None and working > working_budget:
        plan.warnings.append(
            f"the working layer keeps {working} tokens, over its budget of {working_budget}: "
            "its newest operation alone is larger (trim long outputs before adding them)"
        )
    max_tokens = max(target - kept, 0)
    plan.request = _request(plan, remaining, archive_id, max_tokens, details=details)
    return plan


def _estimator(count: Callable[[str], int], texts: Sequence[str]) -> Callable[[str], int]:
    """Tokens of a line from its length and the tokens per character of a sample of lines.

    Tokenizing every summary line (or all of them joined) cost more than the rest of a
    compression; a sample spread over old and new lines gives the same ratio, and the
    final summary is still counted exactly.
    """
    if not texts:
        return count
    sample = texts[:: max(1, len(texts) // _SAMPLE_LINES)]
    chars = sum(len(t) for t in sample) + len(sample) - 1
    per_char = count("\n".join(sample)) / max(chars, 1)
    return lambda text: max(1, round(len(text) * per_char)) if text else 0


def _protected(unit: Unit) -> bool:
    """Any item of the unit is protected (a pinned summary is pinned, so it is too)."""
    for i in unit:  # noqa: SIM110 - any() builds a generator per unit; this runs once per unit
        if i.pinned or i.layer is Layer.SYSTEM or i.kind in PROTECTED_KINDS:
            return True
    return False


def _finish(plan: _Plan, text: str, counter: ItemCounter, archive_id: str | None) -> CompressionResult:
    replaced = {n.id for n in plan.notes}
    keep_ids, cost_of = plan.keep_ids, plan.cost_of
    kept = [i for i in plan.items if i.id in keep_ids and i.id not in replaced]
    after = counter.fmt.reply_priming + sum([cost_of[i.id] for i in kept])
    kept += plan.notes
    after += sum([counter.cost(n) for n in plan.notes])
    summary_id: str | None = None
    assert plan.request is not None
    if plan.request.completed or plan.history or plan.fold or plan.carried or plan.phases:
        summary = counter.counted(
            ContextItem(
                id=SUMMARY_ID,
                kind="summary",
                content=text,
                layer=Layer.SESSION,
                seq=plan.summary_seq,
                metadata={
                    "level": plan.level,
                    "completed": list(plan.request.completed),
                    "archive_id": archive_id,
                    "facts": plan.fields,
                    "history": plan.history,
                    "superseded": plan.superseded,
                    "phases": plan.phases,
                },
            )
        )
        kept.append(summary)
        after += counter.cost(summary)
        summary_id = SUMMARY_ID
    kept.sort(key=_LAYER_SEQ)
    logger.info(
        "context %s compression: %d -> %d tokens (%.0f%%), %d folded, %d dropped",
        plan.level,
        plan.before,
        after,
        100 * after / plan.before if plan.before else 100.0,
        sum(len(u) for u in plan.fold),
        len(plan.dropped),
    )
    return CompressionResult(
        items=tuple(kept),
        level=plan.level,
        before_tokens=plan.before,
        after_tokens=after,
        summarized_ids=tuple(i.id for u in plan.fold for i in u),
        dropped_ids=tuple(plan.dropped),
        summary_id=summary_id,
        archive_id=archive_id,
        warnings=tuple(plan.warnings),
    )


def _target(level: CompressionLevel, target_ratio: float | None) -> float:
    if target_ratio is not None:
        return target_ratio
    return DEEP_TARGET if level == "deep" else STANDARD_TARGET


def compress(
    items: Sequence[ContextItem],
    level: CompressionLevel = "standard",
    *,
    counter: ItemCounter,
    summarizer: Summarizer | None = None,
    target_ratio: float | None = None,
    before_seq: int | None = None,
    archive_id: str | None = None,
    summary_budget: int | None = None,
    working_budget: int | None = None,
    facts: FactCache | None = None,
    counted: bool = False,
) -> CompressionResult:
    """Compress ``items`` to about ``target_ratio`` of their tokens (60% standard, 30% deep).

    ``checkpoint`` compresses only what precedes ``before_seq`` (the checkpoint's position)
    with the standard rules and leaves everything after it untouched. ``summary_budget``
    bounds the rolling summary: older lines are re-summarised into paragraphs to fit it.
    ``working_budget`` bounds the working layer: what it keeps in detail (recent operations
    included, the newest one excepted) fits in ``target_ratio`` of it. ``facts`` holds facts
    mined when the items were added (:attr:`ContextWindow.facts`). ``counted=True`` says
    every item's ``tokens`` is already ``counter``'s count (a window's items are), which
    spares a cache lookup per item.
    """
    if level == "checkpoint" and before_seq is None:
        raise ValueError("checkpoint compression needs before_seq")
    chosen = summarizer or StructuredSummarizer()
    plan = _plan(
        items,
        level,
        counter=counter,
        target_ratio=_target(level, target_ratio),
        before_seq=before_seq,
        archive_id=archive_id,
        summary_budget=summary_budget,
        working_budget=working_budget,
        facts_cache=facts,
        counted=counted,
        details=_reads_details(chosen),
    )
    assert plan.request is not None
    text = chosen.summarize(plan.request)
    return _finish(plan, text, counter, archive_id)


def _reads_details(summarizer: object) -> bool:
    """The structured summariser never reads the folded text; building it costs a copy of it."""
    return type(summarizer) is not StructuredSummarizer


async def compress_async(
    items: Sequence[ContextItem],
    level: CompressionLevel = "standard",
    *,
    counter: ItemCounter,
    summarizer: Summarizer | AsyncSummarizer | None = None,
    target_ratio: float | None = None,
    before_seq: int | None = None,
    archive_id: str | None = None,
    summary_budget: int | None = None,
    working_budget: int | None = None,
    facts: FactCache | None = None,
    counted: bool = False,
) -> CompressionResult:
    """:func:`compress` with a summariser that may await a model."""
    chosen = summarizer or StructuredSummarizer()
    plan = _plan(
        items,
        level,
        counter=counter,
        target_ratio=_target(level, target_ratio),
        before_seq=before_seq,
        archive_id=archive_id,
        summary_budget=summary_budget,
        working_budget=working_budget,
        facts_cache=facts,
        counted=counted,
        details=_reads_details(chosen),
    )
    assert plan.request is not None
    if inspect.iscoroutinefunction(chosen.summarize):
        text = await cast(AsyncSummarizer, chosen).summarize(plan.request)
    else:
        text = cast(Summarizer, chosen).summarize(plan.request)
    return _finish(plan, text, counter, archive_id)


PHASE_PREFIX = "phase-summary:"
"""Ids of phase paragraphs; the next compression moves them into the rolling summary."""


def compress_phase(
    items: Sequence[ContextItem],
    phase: str,
    *,
    counter: ItemCounter,
    status: str = "done",
    summarizer: Summarizer | None = None,
    title: str = "",
    facts: FactCache | None = None,
    counted: bool = False,
) -> CompressionResult:
    """Fold a finished phase into one line: its status, item count and artefact ids.

    ``✅ phase 2 – Build the image (14 items): artefacts reg/app:1.4; config K=V; fixed …``.
    The phase's configurations, artefacts and resolved issues are read like a standard
    compression reads them, so the line keeps the values a later phase needs. Protected
    items of the phase (decisions, TODOs, constraints, pinned) stay as they are.
    """
    items = list(items) if counted else [counter.counted(i) for i in items]
    before = counter.total(items)
    summary_id = f"{PHASE_PREFIX}{phase}"
    previous = next((i for i in items if i.id == summary_id), None)
    count = int(previous.metadata.get("items", 0)) if previous else 0
    units = group_units(i for i in items if i is not previous)
    fold = [
        u for u in units if not _protected(u) and all(i.phase == phase for i in u) and u[0].id != SUMMARY_ID
    ]
    if not fold:
        return CompressionResult(items=tuple(items), level="phase", before_tokens=before, after_tokens=before)
    prev_fields = previous.metadata.get("facts") if previous else None
    d = distill(fold, units, items, previous=prev_fields, line_chars=_LINE_CHARS["standard"], cache=facts)
    count += sum(1 for u in fold if u[0].kind in _OPERATION_KINDS)
    artifacts = list(previous.metadata.get("artifacts", [])) if previous else []
    stored = [str(i.metadata["artifact_id"]) for u in fold for i in u if i.metadata.get("artifact_id")]
    artifacts += [a for a in [*d.fields.get("artifacts", []), *stored] if a not in artifacts]
    request = SummaryRequest(
        level="phase",
        phase=phase,
        status=status,
        goal=title,
        completed=tuple(d.lines.get(u[0].id, "") for u in fold if d.lines.get(u[0].id)),
        artifacts=tuple(artifacts),
        configurations=tuple(f"{k}={v}" for k, v in (d.fields.get("configurations") or {}).items()),
        resolved=tuple(d.resolutions),
        current_state=(f"{count} items",),
    )
    text = (summarizer or StructuredSummarizer()).summarize(request)
    gone = {i.id for u in fold for i in u} | ({previous.id} if previous else set())
    seq = previous.seq if previous else min(i.seq for u in fold for i in u)
    paragraph = counter.counted(
        ContextItem(
            id=summary_id,
            kind="summary",
            content=text,
            layer=Layer.SESSION,
            phase=phase,
            seq=seq,
            metadata={"status": status, "items": count, "artifacts": artifacts, "facts": d.fields},
        )
    )
    replaced = {n.id for n in d.notes}
    kept = [i for i in items if i.id not in gone and i.id not in replaced] + list(d.notes) + [paragraph]
    kept.sort(key=lambda i: (i.layer, i.seq))
    return CompressionResult(
        items=tuple(kept),
        level="phase",
        before_tokens=before,
        after_tokens=counter.total(kept),
        summarized_ids=tuple(i.id for u in fold for i in u),
        summary_id=summary_id,
    )


_KIND_RANK = {"decision": 0, "todo": 1, "constraint": 2, "goal": 3, "system": 4}


def fit(
    items: Sequence[ContextItem],
    budget: int,
    *,
    counter: ItemCounter,
    summarizer: Summarizer | None = None,
    archive_id: str | None = None,
    counted: bool = False,
) -> CompressionResult:
    """The least compression that brings ``items`` under ``budget`` tokens.

    Standard, then deep, then (last resort) dropping whole units: unprotected ones first,
    then the summary's oldest lines, then unpinned protected items by priority. Pinned
    items are never touched; if they alone exceed the budget, :class:`BudgetExceeded`.
    """
    items = list(items) if counted else [counter.counted(i) for i in items]
    before = counter.total(items)
    if before <= budget:
        return CompressionResult(items=tuple(items), level="none", before_tokens=before, after_tokens=before)
    pinned = counter.total(i for i in items if i.pinned)
    if pinned > budget:
        raise BudgetExceeded(
            f"pinned items alone need {pinned} tokens, over the budget of {budget}; "
            "unpin something or raise the budget"
        )
    result: CompressionResult | None = None
    for level, ratio in (("standard", STANDARD_TARGET), ("deep", DEEP_TARGET)):
        result = compress(
            items,
            cast(CompressionLevel, level),
            counter=counter,
            summarizer=summarizer,
            target_ratio=min(ratio, budget / before),
            archive_id=archive_id,
            counted=True,
        )
        if result.after_tokens <= budget:
            return result
    assert result is not None
    return _squeeze(result, budget, counter, before)


def _squeeze(result: CompressionResult, budget: int, counter: ItemCounter, before: int) -> CompressionResult:
    items = list(result.items)
    total = counter.total(items)
    dropped = list(result.dropped_ids)
    units = [u for u in group_units(items) if not any(i.pinned for i in u)]

    def rank(unit: Unit) -> tuple[int, int, int, int]:
        head = unit[0]
        if head.id == SUMMARY_ID:
            tier = 1
        elif _protected(unit):
            tier = 2
        else:
            tier = 0
        kind_rank = _KIND_RANK.get(head.kind, 0) if tier == 2 else 0
        return (tier, head.priority, kind_rank, head.seq)

    for unit in sorted(units, key=rank):
        if total <= budget:
            break
        head = unit[0]
        if head.id == SUMMARY_ID:
            head, total = _shrink_summary(items, head, budget, total, counter)
            if total <= budget:
                break
        items = [i for i in items if i not in unit and i is not head]
        total = counter.total(items)
        dropped.extend(i.id for i in unit)
    logger.warning("context squeezed to fit %d tokens: %d -> %d", budget, before, total)
    return CompressionResult(
        items=tuple(items),
        level="squeeze",
        before_tokens=before,
        after_tokens=total,
        summarized_ids=result.summarized_ids,
        dropped_ids=tuple(dropped),
        summary_id=SUMMARY_ID if any(i.id == SUMMARY_ID for i in items) else None,
        archive_id=result.archive_id,
    )


def _shrink_summary(
    items: list[ContextItem], summary: ContextItem, budget: int, total: int, counter: ItemCounter
) -> tuple[ContextItem, int]:
    """Halve the summary's completed lines (oldest first) until the window fits."""
    lines = [str(x) for x in summary.metadata.get("completed", [])]
    index = items.index(summary)
    while total > budget and lines:
        lines = lines[len(lines) // 2 + (len(lines) % 2) :] if len(lines) > 1 else []
        note = f"(earlier operations folded; {summary.metadata.get('archive_id') or 'no archive'})"
        text = "\n".join(["Context summary (squeezed)", note, *(f"- {x}" for x in lines)])
        summary = counter.counted(
            ContextItem(
                id=SUMMARY_ID,
                kind="summary",
                content=text,
                layer=summary.layer,
                seq=summary.seq,
                metadata={**summary.metadata, "completed": lines},
            )
        )
        items[index] = summary
        total = counter.total(items)
    return summary, total
