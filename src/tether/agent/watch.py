"""The agent loop watching itself: stuck detection (:mod:`tether.agent.stuck`) applied to a
run, and event emission that never fails a step.

:class:`Watch` is called twice per iteration by :class:`~tether.agent.loop.AgentLoop`:
``before`` (a detection that reached its third strike pauses the run here, as a LOGIC
failure with a report, so the iteration that saw it keeps its result) and ``after`` (the
iteration's action and outcome go to the detector; a detection becomes an event in the
run's event log, a reminder in the instant layer, a re-plan request or a question).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from tether.agent.actions import AgentAction
from tether.agent.asking import Asker
from tether.agent.interaction import InteractionRequest
from tether.agent.stuck import (
    Observation,
    StuckConfig,
    StuckEvent,
    error_signature,
    fingerprint,
    observe,
    outcome_key,
)
from tether.context import ContextWindow, new_item
from tether.context.policy import ContextEvent
from tether.runtime import Event, StepContext
from tether.runtime.failures import LogicError
from tether.runtime.report import Decision, Suggestion, takeover_note
from tether.state.reserved import runtime_get, runtime_update

__all__ = ["AgentStuck", "Watch", "log_context_events", "observation_of", "safe_emit", "todo_done"]

logger = logging.getLogger(__name__)

EventSink = Callable[[Event], None]


def safe_emit(sink: EventSink | None, event: Event) -> None:
    """Give ``event`` to a subscriber; what it raises is logged, never the step's failure
    (a broken progress view must not pause a deployment)."""
    if sink is None:
        return
    try:
        sink(event)
    except Exception:
        logger.warning("on_event subscriber failed on %r; skipped", event.kind, exc_info=True)


def log_context_events(sc: StepContext, events: list[ContextEvent], emit: Callable[..., None]) -> None:
    """Context events (compression, overflow) to the subscriber and to the run's event log."""
    for event in events:
        emit(event.kind, sc, **event.detail())
    if events:
        step = sc.step.id
        logged = [
            Event(kind=e.kind, run_id=sc.run_id, step=step, detail=e.detail()).to_dict() for e in events
        ]
        sc.state.merge(runtime_update(event_log=logged))


class AgentStuck(LogicError):
    """The loop stayed stuck after a reminder and a re-plan request: the run pauses with a
    failure report whose suggestions say what a person can do."""

    def __init__(self, event: Mapping[str, Any]) -> None:
        super().__init__(str(event.get("message") or "the agent is stuck"))
        self.event = dict(event)
        self.suggestions = [
            Suggestion(
                label="let the agent try again",
                decision=Decision.RETRY,
                detail="it continues with a reminder of what repeated",
            ),
            Suggestion(
                label="do the stuck part by hand, then hand the run back",
                decision=Decision.TAKEOVER,
                detail="say what you did in the note: the agent reads it and continues from there",
            ),
            Suggestion(label="stop the run", decision=Decision.ABORT),
        ]


def todo_done(state: Mapping[str, Any] | Any) -> int:
    """TODO items done in a run's ``todo`` (a list or a mapping of items with a status)."""
    todo = state.get("todo")
    items = todo.values() if isinstance(todo, Mapping) else todo if isinstance(todo, list) else ()
    return sum(
        1
        for t in items
        if isinstance(t, Mapping) and str(t.get("status", "")).lower() in ("done", "completed")
    )


def observation_of(
    n: int, action: AgentAction, update: Mapping[str, Any], state: Mapping[str, Any] | Any
) -> Observation | None:
    """What iteration ``n`` did and saw; None for an action that is not a tool call."""
    progress = todo_done(state)
    if action.action_type == "execute":
        entries = update.get("command_history") or []
        if not entries:
            return None
        e = entries[-1]
        stdout, stderr = str(e.get("stdout") or ""), str(e.get("stderr") or "")
        failed = not e.get("success")
        return Observation(
            iteration=n,
            action=fingerprint("execute", str(e.get("command") or "")),  # redacted already
            outcome=outcome_key(f"{e.get('exit_code')}\n{stdout}\n{stderr}"),
            error=error_signature(e.get("exit_code"), stderr, stdout) if failed else None,
            progress=progress,
            shown=str(e.get("command") or "")[:160],
        )
    if action.action_type == "read_artifact":
        key = f"{action.artifact_id}:{action.start}:{action.end}:{action.unit}"
        return Observation(
            iteration=n,
            action=fingerprint("read_artifact", key),
            outcome=outcome_key(key),
            progress=progress,
            shown=f"read_artifact {key}",
        )
    return None


class Watch:
    """Applies the detector to a loop's iterations (see the module docstring)."""

    def __init__(self, config: StuckConfig, asker: Asker, emit: Callable[..., None]) -> None:
        self.config = config
        self.asker = asker
        self.emit = emit
        """``emit(kind, sc, **detail)``: the loop's guarded emitter."""

    def before(self, sc: StepContext, window: ContextWindow) -> dict[str, object]:
        """At an iteration's start: pause for a pending third strike (raises AgentStuck),
        or continue after a person decided on it."""
        state = dict(sc.get("stuck") or {})
        pending = state.get("pause")
        if not pending:
            return {}
        note = takeover_note(sc.state, sc.step.id)
        report = runtime_get(sc.state, "failure_report") or {}
        decided = report.get("error_type") == AgentStuck.__name__ and report.get("error") == pending.get(
            "message"
        )
        if note is None and not decided:
            raise AgentStuck(pending)
        n = int(sc.get("iteration", 0)) + 1
        if note is not None:
            text = f"A person took over after the agent got stuck and did this by hand: {note}"
            window.add(new_item("decision", text, id=f"takeover-{n}"))
        reminder = f"A person reviewed why you were stuck ({pending.get('pattern')}). Do not repeat it."
        window.upsert(new_item("reminder", reminder, id="instant-stuck"))
        self.emit("stuck_resumed", sc, pattern=pending.get("pattern"), takeover=note is not None)
        return {"stuck": {"pause": None, "reset": True}}  # the strikes start again

    async def after(
        self, sc: StepContext, window: ContextWindow, n: int, action: AgentAction, update: dict[str, object]
    ) -> None:
        """Feed iteration ``n`` to the detector; apply what it finds."""
        obs = observation_of(n, action, update, sc.state)
        if obs is None or not self.config.enabled:
            return
        entries = list(sc.get("stuck_log") or ())
        counters = dict(entries[-1].get("c") or {}) if entries else {}
        flags = dict(sc.get("stuck") or {})
        if flags.get("reset"):  # a person decided after a pause
            counters.update(strikes=0, clean=0)
            update["stuck"] = {"pause": None}
        log = [Observation.from_dict(o) for o in entries]
        counters, event = observe(counters, [*log, obs], self.config)
        # appended: one small entry per iteration, the detector's counters with it
        update["stuck_log"] = [{**obs.to_dict(), "c": counters}]
        if event is None:
            if window.get("instant-stuck") is not None:
                window.remove("instant-stuck")  # the model changed course
            return
        self.emit("stuck_detected", sc, **event.to_dict())
        logged = Event(kind="stuck_detected", run_id=sc.run_id, step=sc.step.id, detail=event.to_dict())
        sc.state.merge(runtime_update(event_log=[logged.to_dict()]))
        window.upsert(new_item("reminder", event.message, id="instant-stuck"))
        if event.level == "replan":
            await self._replan(window, n, event)
        if event.level == "pause":
            update["stuck"] = {"pause": event.to_dict()}

    async def _replan(self, window: ContextWindow, n: int, event: StuckEvent) -> None:
        """The second strike: ask the user when someone can answer now, else ask the model
        to re-plan (a decision item, kept through compression)."""
        handler = self.asker.handler
        if self.config.ask_user and handler is not None:
            request = InteractionRequest(
                question=f"The agent seems stuck: {event.message} How should it proceed?",
                input_type="text",
                category="error_recovery",
            )
            response = await handler.ask(request)
            if not response.cancelled and response.value:
                text = f"Q: the agent was stuck ({event.pattern}); how to proceed?\nA: {response.value}"
                window.add(new_item("decision", text, id=f"stuck-answer-{n}"))
                return
        window.add(
            new_item(
                "decision", f"Re-plan requested at iteration {n}: {event.message}", id=f"stuck-replan-{n}"
            )
        )
