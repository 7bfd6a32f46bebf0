"""Distil the units a compression folds into lines, protected notes and structured facts.

The compressor decides *what* folds; this module decides what survives of it:

* one line per folded unit: a tool call as ``$ command → exit N: facts`` (see
  :mod:`tether.context.facts`), a message with every line kept up to the length limit;
* protected notes: a plan in a message becomes TODO items (status ticked off by later
  messages), an answered question becomes a decision with both, a user's "never ..."
  becomes a constraint (see :mod:`tether.context.notes`);
* structured fields in the shape of :class:`~tether.context.summaries.StepOutputs`
  (configurations, artefacts, environment, resolved issues), carried from one
  compression to the next in the summary item's metadata with capped sizes.

Pure and deterministic, like the compressor that calls it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tether.context.facts import (
    FactCache,
    OperationFacts,
    Resolution,
    extract_operation,
    find_resolutions,
    prose_configs,
)
from tether.context.items import ContextItem, Layer
from tether.context.notes import (
    PlanStep,
    StatusUpdate,
    constraint_lines,
    flatten,
    is_question,
    is_step_line,
    join_lines,
    lifts,
    matches,
    plan_steps,
    question_text,
    status_updates,
)
from tether.context.summaries import StepOutputs
from tether.context.supersede import changes_plan

__all__ = [
    "Distilled",
    "MessageFacts",
    "distill",
    "merge_fields",
    "message_line",
    "read_message",
    "step_outputs_from_commands",
]

Unit = tuple[ContextItem, ...]
CAPS = {"configurations": 40, "artifacts": 30, "environment": 20, "issues_resolved": 10}
"""Newest entries kept per structured field, so the summary stays bounded on any run."""
_ASK_TOOLS = frozenset({"ask_user", "ask_human", "ask", "request_user_input"})
_MARK = {"pending": " ", "done": "x", "in_progress": "~", "skipped": "-"}


@dataclass(slots=True, kw_only=True)
class Distilled:
    lines: dict[str, str] = field(default_factory=dict)
    """Unit head id → its line in the summary's completed work."""
    notes: list[ContextItem] = field(default_factory=list)
    """New or updated protected items (TODOs, decisions, constraints)."""
    absorbed: set[str] = field(default_factory=set)
    """Unit head ids fully represented by notes: they always fold."""
    fields: dict[str, Any] = field(default_factory=dict)
    """Structured facts of every fold so far (StepOutputs shape)."""
    resolutions: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageFacts:
    """What one message says that a compression reads, read once per message.

    A window reads each message when it arrives (:meth:`FactCache.memo`), so a
    compression of a long run reads these instead of matching every message again.
    """

    updates: tuple[StatusUpdate, ...]
    """Progress it reports on plan items (:func:`status_updates`)."""
    configs: Mapping[str, str]
    """Configuration stated in prose (:func:`prose_configs`)."""
    question: str | None
    """The question it asks (:func:`question_text`), when it asks one."""
    changes: bool
    """It changes a plan or lifts a restriction (:func:`changes_plan`, :func:`lifts`)."""
    steps: tuple[PlanStep, ...]
    """Plan steps it lists (:func:`plan_steps`)."""
    constraints: tuple[str, ...]
    """Restrictions it states (:func:`constraint_lines`)."""
    flat: str
    """``role: text`` on one line, unclipped (its summary line is this clipped)."""


def read_message(item: ContextItem) -> MessageFacts:
    """The :class:`MessageFacts` of a message item (pure: the same text, the same facts)."""
    text = item.content
    return MessageFacts(
        updates=tuple(status_updates(text)),
        configs=prose_configs(text),
        question=question_text(text) if is_question(text) else None,
        changes=changes_plan(text) or lifts(text),
        steps=tuple(plan_steps(text)),
        constraints=tuple(constraint_lines(text)),
        flat=join_lines(f"{item.effective_role}: {text}".splitlines()),
    )


def _todo_item(source: ContextItem, k: int, text: str, status: str) -> ContextItem:
    return ContextItem(
        id=f"todo:{source.id}:{k}",
        kind="todo",
        content=f"[{_MARK.get(status, ' ')}] {text}",
        layer=Layer.SESSION,
        seq=source.seq,
        phase=source.phase,
        metadata={"status": status, "text": text, "source": source.id},
    )


def _with_status(todo: ContextItem, status: str) -> ContextItem:
    text = str(todo.metadata.get("text", todo.content))
    content = f"[{_MARK.get(status, ' ')}] {text}"
    return replace(todo, content=content, tokens=-1, metadata={**todo.metadata, "status": status})


class _Notes:
    """Collects TODOs, decisions and constraints while walking the units in order."""

    def __init__(self, items: Sequence[ContextItem]) -> None:
        self.todos: dict[str, ContextItem] = {
            i.id: i for i in items if i.kind == "todo" and "source" in i.metadata
        }
        self.changed: dict[str, ContextItem] = {}
        self.existing = {i.id for i in items}

    def plan(self, item: ContextItem, steps: Sequence[PlanStep]) -> int:
        """New TODO items from the plan ``steps`` of ``item``; a step already known updates its status."""
        created = 0
        for k, step in enumerate(steps):
            known = next(
                (t for t in self.todos.values() if matches(str(t.metadata.get("text", "")), step.text)),
                None,
            )
            if known is not None:
                if known.metadata.get("status") != step.status and step.status != "pending":
                    self.todos[known.id] = self.changed[known.id] = _with_status(known, step.status)
                continue
            todo = _todo_item(item, k, step.text, step.status)
            if step.number is not None:
                todo = replace(todo, metadata={**todo.metadata, "number": step.number})
            self.todos[todo.id] = self.changed[todo.id] = todo
            created += 1
        return len(steps) and (created or -1)

    def progress(self, item: ContextItem, updates: Sequence[StatusUpdate]) -> None:
        for update in updates:
            for todo in self.todos.values():
                if todo.seq >= item.seq or todo.metadata.get("status") == update.status:
                    continue
                hit = (update.number is not None and todo.metadata.get("number") == update.number) or (
                    bool(update.text) and matches(str(todo.metadata.get("text", "")), update.text)
                )
                if hit:
                    self.todos[todo.id] = self.changed[todo.id] = _with_status(todo, update.status)

    def add(self, item: ContextItem) -> None:
        if item.id not in self.existing:
            self.changed[item.id] = item


def message_line(flat: str, limit: int) -> str:
    """:func:`flatten` of the message's one-line form (what it returns, from the cached join)."""
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)].rstrip() + "…"


def distill(
    fold: Sequence[Unit],
    units: Sequence[Unit],
    items: Sequence[ContextItem],
    *,
    previous: Mapping[str, Any] | None,
    line_chars: int,
    cache: FactCache | None = None,
) -> Distilled:
    """Lines, notes and fields for the units in ``fold`` (``units`` is every unit, in order).

    ``cache`` holds facts mined when the items were added (a window's); without one, every
    output is mined here.
    """
    out = Distilled()
    cache = cache if cache is not None else FactCache()
    notes = _Notes(items)
    folded = {u[0].id for u in fold}
    ops: list[tuple[str, OperationFacts]] = []
    question: tuple[ContextItem, str] | None = None
    for unit in units:
        head = unit[0]
        is_folded = head.id in folded
        call = result = None
        for i in unit:  # the first call and the first result (inlined: once per unit of the window)
            kind = i.kind
            if kind == "tool_call":
                if call is None:
                    call = i
            elif kind == "tool_result" and result is None:
                result = i
        if call is not None:
            name = str(call.metadata.get("name", ""))
            args = call.metadata.get("arguments")
            if name in _ASK_TOOLS and isinstance(args, Mapping) and result is not None:
                q = str(args.get("question", "")).strip()
                if is_folded and q:
                    out.absorbed.add(head.id)
                    notes.add(_decision(call, q, result.content))
                continue
            facts, line = cache.mined(call, result, max_chars=line_chars if is_folded else 0)
            ops.append((head.id, facts))
            if is_folded:
                out.lines[head.id] = line
            question = None
            continue
        if head.kind != "message":
            if is_folded:
                out.lines[head.id] = flatten(head.text, line_chars)
            continue
        role = head.effective_role
        said = cache.memo(head, read_message)
        if said.updates:
            notes.progress(head, said.updates)
        if said.configs:  # "set WORKERS to 4" in a message counts like WORKERS=4 in a file
            ops.append((head.id, OperationFacts(configurations=dict(said.configs))))
        if role == "assistant" and said.question is not None:
            question = (head, said.question)
            if is_folded:
                out.lines[head.id] = message_line(said.flat, line_chars)
            continue
        if role == "user" and said.changes and (question is None or not is_folded):
            notes.add(_statement(head))  # a changed plan or a lifted rule is a decision
            if is_folded:
                out.absorbed.add(head.id)
                out.lines[head.id] = message_line(said.flat, line_chars)
                continue
        if not is_folded:
            if role == "user" and question is not None and question[0].id in folded:
                q_item, q_text = question  # the question folds, its answer stays: keep both as a decision
                notes.add(_decision(head, q_text, head.content))
                out.absorbed.add(q_item.id)
                out.lines.pop(q_item.id, None)
            question = None if role == "user" else question
            continue
        planned = notes.plan(head, said.steps) if said.steps else 0
        if planned:
            out.absorbed.add(head.id)
            rest = " ".join(ln for ln in head.content.splitlines() if ln.strip() and not is_step_line(ln))
            what = f"plan of {planned} steps → TODO items" if planned > 0 else "TODO progress"
            out.lines[head.id] = flatten(
                f"{role}: {rest} ({what})" if rest else f"{role}: {what}", line_chars
            )
            continue
        if role == "user" and question is not None:
            q_item, q_text = question
            notes.add(_decision(head, q_text, head.content))
            out.absorbed.update({head.id, q_item.id} & folded)
            out.lines.pop(q_item.id, None)
            question = None
            continue
        if role == "user":
            for k, line in enumerate(said.constraints):
                notes.add(ContextItem(
                    id=f"constraint:{head.id}:{k}", kind="constraint", content=line,
                    layer=Layer.SESSION, seq=head.seq, phase=head.phase, metadata={"source": head.id},
                ))  # fmt: skip
                out.absorbed.add(head.id)
        out.lines[head.id] = message_line(said.flat, line_chars)
    out.notes = sorted(notes.changed.values(), key=lambda i: (i.seq, i.id))
    resolved = [
        r for r in find_resolutions(ops, program=cache.program) if r.unit_ids and r.unit_ids[0] in folded
    ]
    out.fields = merge_fields(previous, [f for u, f in ops if u in folded], resolved)
    out.resolutions = [
        f"{i['issue']} → fixed by {i['resolution']}" for i in out.fields.get("issues_resolved", [])
    ]
    return out


def _statement(source: ContextItem) -> ContextItem:
    return ContextItem(
        id=f"decision:{source.id}",
        kind="decision",
        content=flatten(source.content, 300),
        layer=Layer.SESSION,
        seq=source.seq,
        phase=source.phase,
        metadata={"answer": flatten(source.content, 300), "source": source.id},
    )


def _decision(source: ContextItem, question: str, answer: str) -> ContextItem:
    answer = flatten(answer, 300)
    return ContextItem(
        id=f"decision:{source.id}",
        kind="decision",
        content=f"{flatten(question, 300)} → user: {answer}",
        layer=Layer.SESSION,
        seq=source.seq,
        phase=source.phase,
        metadata={"question": question, "answer": answer, "source": source.id},
    )


def merge_fields(
    previous: Mapping[str, Any] | None,
    ops: Sequence[OperationFacts],
    resolved: Sequence[Resolution],
) -> dict[str, Any]:
    """Fold the facts of ``ops`` into the previous fields; newest win, sizes capped."""
    prev = previous or {}
    configs = dict(prev.get("configurations") or {})
    earlier = {k: list(v) for k, v in (prev.get("config_history") or {}).items()}
    artifacts = list(prev.get("artifacts") or [])
    environment = list(prev.get("environment") or [])
    seen_artifacts, seen_environment = set(artifacts), set(environment)
    issues = [dict(i) for i in prev.get("issues_resolved") or []]
    for facts in ops:
        for key, value in facts.configurations.items():
            old = configs.pop(key, None)
            if old is not None and old != value:  # the latest value wins; the history is one line
                earlier[key] = [v for v in earlier.get(key, []) if v != value and v != old][-2:] + [old]
            configs[key] = value
        for a in facts.artifacts:
            if a not in seen_artifacts:
                seen_artifacts.add(a)
                artifacts.append(a)
        for e in facts.environment:
            if e not in seen_environment:
                seen_environment.add(e)
                environment.append(e)
    issues += [r.to_dict() for r in resolved if r.to_dict() not in issues]
    current = dict(list(configs.items())[-CAPS["configurations"] :])
    return {
        "configurations": current,
        "config_history": {k: v for k, v in earlier.items() if k in current},
        "artifacts": artifacts[-CAPS["artifacts"] :],
        "environment": environment[-CAPS["environment"] :],
        "issues_resolved": issues[-CAPS["issues_resolved"] :],
    }


def step_outputs_from_commands(commands: Iterable[Mapping[str, Any]], *, summary: str) -> StepOutputs:
    """:class:`StepOutputs` read from a run's command history, for a step that gave none.

    Each entry needs ``command`` and may have ``exit_code``, ``stdout`` and ``stderr`` (the
    agent loop's ``command_history``); configurations, artefacts, the environment and
    resolved issues come from the same extraction as the summary's.
    """
    ops: list[tuple[str, OperationFacts]] = []
    for k, entry in enumerate(commands):
        text = f"{entry.get('stdout') or ''}\n{entry.get('stderr') or ''}"
        call = ContextItem(id=f"cmd-{k}", kind="tool_call", content="", metadata={
            "name": "execute", "arguments": {"command": str(entry.get("command") or "")}})  # fmt: skip
        facts = extract_operation(call, ContextItem(id=f"out-{k}", kind="tool_result", content=text))
        code = entry.get("exit_code")
        if isinstance(code, int):
            facts = replace(facts, exit_code=code)
        ops.append((call.id, facts))
    fields = merge_fields(None, [f for _, f in ops], find_resolutions(ops))
    return StepOutputs(
        summary=summary or "Step completed",
        environment_changes=dict.fromkeys(fields["environment"], True),
        new_configurations=fields["configurations"],
        artifacts=tuple(fields["artifacts"]),
        issues_resolved=tuple(fields["issues_resolved"]),
    )
