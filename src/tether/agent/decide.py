"""What one agent iteration decides, as plain data: the pure half of the agent loop.

:func:`decide` reads the model's reply and the run's state and returns a :class:`Turn`:
the action to run through the tools (or none), the items to add to the context window,
the state update, and whether the run finishes or pauses. :func:`command_turn`,
:func:`refused_turn` and :func:`answer_turn` fold what the tools and the user answered
into a turn the same way. Nothing here calls a model, runs a command or touches a store,
so every branch is tested with plain calls; :class:`~tether.agent.loop.AgentLoop` does
the I/O and applies the turns.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from tether.agent.actions import AgentAction, parse_action
from tether.agent.interaction import InteractionRequest
from tether.context import ContextItem, new_item
from tether.errors import ApprovalRequired, ModelOutputError, ToolError
from tether.tools.guard import Provenance
from tether.tools.result import CommandResult

if TYPE_CHECKING:
    from tether.state import ExecutionContext

__all__ = [
    "Finish",
    "LoopLimits",
    "Turn",
    "answer_turn",
    "artifact_slice",
    "cancelled_turn",
    "command_turn",
    "confirmation",
    "decide",
    "logged",
    "output_of",
    "provenance",
    "question_of",
    "redacted",
    "refused_turn",
    "request_for",
]

Redact = Callable[[str], str]


@dataclass(frozen=True, slots=True, kw_only=True)
class Finish:
    """The run ends with this status and message (the state's ``final_output``)."""

    status: Literal["COMPLETED", "FAILED"]
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """One iteration's outcome, applied by the loop: items to the window, ``update``
    through the reducers, then ``action`` run, then finish or pause."""

    iteration: int
    action: AgentAction | None = None
    """To run through the tools: ``execute``, ``read_artifact``, or ``ask_user`` when a
    handler can answer now. None: nothing to run."""
    items: tuple[ContextItem, ...] = ()
    """Context items to add, in order."""
    update: Mapping[str, Any] = field(default_factory=dict)
    """State update, merged through the run's reducers."""
    finish: Finish | None = None
    pause: str | None = None
    """Why the run pauses after this iteration (it waits for an answer or an approval)."""
    failure: str | None = None
    """Why the reply was refused (an invalid reply); the model reads it next time."""


class LoopLimits(Protocol):
    """What :func:`decide` reads of a loop's configuration (``LoopConfig`` has both)."""

    max_iterations: int
    max_invalid_replies: int


def _keep(text: str) -> str:
    return text


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def decide(
    reply: str,
    state: Mapping[str, Any] | ExecutionContext,
    config: LoopLimits,
    *,
    interactive: bool = False,
    redact: Redact = _keep,
    now: str | None = None,
) -> Turn:
    """The turn a model ``reply`` makes in a run whose state is ``state``.

    ``interactive``: a question can be answered now (else the run pauses for it).
    ``now`` stamps the logged entries (default: the current time). Only the reply's whole
    text or a fenced block is an action: JSON quoted inside prose never runs.
    """
    n = int(state.get("iteration") or 0) + 1
    stamp = now or _now()
    try:
        action = parse_action(reply)
    except ModelOutputError as exc:
        return _invalid(n, exc, state, config, redact, stamp)
    shown = redact(json.dumps(action.to_dict(), ensure_ascii=False))
    call = new_item("tool_call", shown, id=f"call-{n}", tool_call_id=f"it{n}")
    update: dict[str, Any] = {"invalid_replies": 0, "last_error": None}
    kind = action.action_type
    if kind in ("execute", "read_artifact"):
        return Turn(iteration=n, action=action, items=(call,), update=update)
    update["actions"] = [logged(n, action, redact, stamp)]
    if kind == "ask_user":
        if interactive:
            return Turn(iteration=n, action=action, items=(call,), update=update)
        update["pending_question"] = question_of(n, action)
        return Turn(
            iteration=n, items=(call,), update=update, pause=f"waiting for an answer: {action.question}"
        )
    message = action.message or ""
    if kind == "failed":
        said = new_item("decision", f"failed: {action.message}", id=f"failed-{n}")
        return Turn(
            iteration=n, items=(call, said), update=update, finish=Finish(status="FAILED", message=message)
        )
    update["final_output"] = action.message
    if action.outputs is not None:
        update["step_outputs"] = action.outputs
    said = new_item("decision", f"done: {action.message}", id=f"done-{n}")
    return Turn(
        iteration=n, items=(call, said), update=update, finish=Finish(status="COMPLETED", message=message)
    )


def _invalid(
    n: int,
    exc: ModelOutputError,
    state: Mapping[str, Any] | ExecutionContext,
    config: LoopLimits,
    redact: Redact,
    stamp: str,
) -> Turn:
    count = int(state.get("invalid_replies") or 0) + 1
    shown = redact(str(exc))
    update = {
        "invalid_replies": count,
        "actions": [
            {
                "iteration": n,
                "timestamp": stamp,
                "action": "invalid",
                "error": shown,
                "reply": redact(str(getattr(exc, "raw", "") or ""))[:2000],
            }
        ],
        "last_error": f"your last reply was invalid: {shown}. Answer with exactly one JSON object.",
    }
    finish = None
    if count >= config.max_invalid_replies:
        finish = Finish(status="FAILED", message=f"the model sent {count} invalid replies in a row: {shown}")
    elif n >= config.max_iterations:  # the last reply decides: an invalid one is no success
        finish = Finish(status="FAILED", message=f"the last reply (iteration {n}) was invalid: {exc}")
    return Turn(iteration=n, update=update, finish=finish, failure=shown)


def question_of(n: int, action: AgentAction) -> dict[str, Any]:
    """A question as the state keeps it while it waits (``pending_question``)."""
    return {
        "question": action.question,
        "options": action.options,
        "input_type": action.input_type,
        "category": action.category,
        "context": action.context,
        "default_option": action.default_option,
        "iteration": n,
    }


def logged(n: int, action: AgentAction, redact: Redact = _keep, now: str | None = None) -> dict[str, Any]:
    """A non-command action as the run log's ``steps`` shows it."""
    entry: dict[str, Any] = {"iteration": n, "timestamp": now or _now()}
    for key, value in action.to_dict().items():
        if key in ("input_type", "category") and action.action_type != "ask_user":
            continue  # defaults that mean nothing outside a question
        entry[key] = redact(value) if isinstance(value, str) else value
    return entry


def command_turn(
    n: int,
    action: AgentAction,
    result: CommandResult,
    shown: str,
    *,
    artifact_id: str | None,
    origin: Provenance,
    redact: Redact = _keep,
    now: str | None = None,
) -> Turn:
    """A command that ran. ``result``'s outputs are already redacted (see :func:`redacted`);
    ``shown`` is its output as the window keeps it (trimmed, see :func:`output_of`)."""
    entry = {
        "iteration": n,
        "timestamp": now or _now(),
        "command": redact(action.command or ""),
        "reasoning": action.reasoning,
        "success": bool(result.success),
        "exit_code": result.exit_code,
        "stdout": result.stdout[-4000:],
        "stderr": result.stderr[-4000:],
        "artifact_id": artifact_id,
        "provenance": origin,
    }
    error = None if result.success else redact(f"`{action.command}` exited {result.exit_code}")
    item = new_item("tool_result", shown, id=f"result-{n}", tool_call_id=f"it{n}")
    return Turn(iteration=n, items=(item,), update={"command_history": [entry], "last_error": error})


def redacted(result: CommandResult, redact: Redact) -> CommandResult:
    """``result`` with secrets replaced in its outputs (done once: outputs can be long)."""
    return replace(result, stdout=redact(result.stdout or ""), stderr=redact(result.stderr or ""))


def output_of(result: CommandResult) -> tuple[str, str]:
    """A command's output as the model reads it (before trimming), and its last line."""
    body = f"exit code {result.exit_code}\n{result.stdout}"
    if result.stderr.strip():
        body += f"\n[stderr]\n{result.stderr}"
    last = (result.stdout.strip() or result.stderr.strip()).splitlines()[-1:] or [""]
    return body, last[0]


def artifact_slice(text: str, action: AgentAction) -> tuple[str, str]:
    """The part of a stored output a ``read_artifact`` asks for, and where it is."""
    start, end = (action.start or 1) - 1, action.end
    if action.unit == "bytes":
        data = text.encode()
        part = data[start : end or len(data)].decode(errors="replace")
        return part, f"bytes {start + 1}-{min(end or len(data), len(data))} of {len(data)}"
    lines = text.splitlines()
    part = "\n".join(lines[start : end or len(lines)])
    return part, f"lines {start + 1}-{min(end or len(lines), len(lines))} of {len(lines)}"


def refused_turn(
    n: int, action: AgentAction, exc: ToolError, *, origin: Provenance, redact: Redact = _keep
) -> Turn:
    """A command that did not run (refused, needing approval, timed out, session lost):
    the model reads why and adapts; a command needing approval pauses the run for a human."""
    text = redact(f"{type(exc).__name__}: {exc}")
    command = redact(action.command or "")
    entry = {
        "iteration": n,
        "command": command,
        "success": False,
        "exit_code": None,
        "stdout": "",
        "stderr": text,
        "reasoning": action.reasoning,
        "provenance": origin,
    }
    update: dict[str, Any] = {"command_history": [entry], "last_error": text}
    pause = None
    if isinstance(exc, ApprovalRequired):
        pause = redact(f"approval needed: {exc.reason}")
        update["pending_approval"] = {"key": exc.key, "command": command, "reason": text}
    item = new_item("tool_result", text, id=f"result-{n}", tool_call_id=f"it{n}")
    return Turn(iteration=n, items=(item,), update=update, pause=pause)


def answer_turn(n: int, question: Mapping[str, object], value: str, *, secret: str | None = None) -> Turn:
    """The user's answer to question ``n``. A secret answer is never shown: ``secret`` names
    the environment variable that holds it, and the model is told to use that."""
    shown = value
    if secret is not None:
        shown = f'(secret stored in ${secret}; use "${secret}" in commands, never ask for the value)'

    asked = {"iteration": n, "question": question.get("question"), "answer": shown}
    return Turn(
        iteration=n,
        items=(
            new_item("decision", f"Q: {question.get('question')}\nA: {shown}", id=f"answer-{n}"),
            new_item("tool_result", f"user answered: {shown}", id=f"result-{n}", tool_call_id=f"it{n}"),
        ),
        update={"user_interactions": [asked]},
    )


def cancelled_turn(n: int) -> Turn:
    """The user cancelled the question of iteration ``n``: the run fails, saying so."""
    item = new_item("tool_result", "the user cancelled", id=f"result-{n}", tool_call_id=f"it{n}")
    return Turn(iteration=n, items=(item,), finish=Finish(status="FAILED", message="cancelled by the user"))


def request_for(action: AgentAction) -> InteractionRequest:
    """The interaction handler's request for an ``ask_user`` action."""
    return InteractionRequest(
        question=action.question or "",
        options=action.options or (),
        input_type=action.input_type,
        category=action.category,
        context=action.context,
        default_option=action.default_option,
    )


def confirmation(command: str, reason: str) -> InteractionRequest:
    """The request that asks a human to allow a risky (already redacted) ``command``."""
    return InteractionRequest(
        question=f"Allow this command? {command}\n({reason})",
        options=["yes", "no"],
        input_type="confirm",
        category="confirmation",
        default_option="no",
    )


def provenance(command: str, items: Iterable[ContextItem]) -> Provenance:
    """``tool_output`` when the command appears in what commands printed (or files showed):
    the model copied it, perhaps from an injected instruction; else the model's own ``model``."""
    needle = " ".join(command.split())
    if len(needle) < 8:
        return "model"
    for item in items:
        refusal = item.content.startswith(("CommandRefused", "ApprovalRequired"))  # quotes the command itself
        if item.kind == "tool_result" and not refusal and needle in " ".join(item.content.split()):
            return "tool_output"
    return "model"
