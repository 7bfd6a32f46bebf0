"""Failure reports and the decisions they offer."""

from __future__ import annotations

import datetime as dt
import enum
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from tether.runtime.failures import FailureKind

__all__ = [
    "CallbackDecisions",
    "Decision",
    "DecisionHandler",
    "FailureReport",
    "PolicyDecisions",
    "Suggestion",
    "possible_causes",
    "suggestions_of",
    "takeover_note",
]


class Decision(enum.StrEnum):
    """What to do after a failure."""

    RETRY = "retry"
    SKIP = "skip"
    REPLAN = "replan"
    ABORT = "abort"
    TAKEOVER = "takeover"
    """A person did the step by hand: it counts as done, with their note of what they did."""


_OPTIONS = {
    Decision.RETRY: "run the failed item again from the restored state",
    Decision.SKIP: "mark the item skipped and continue with the next one",
    Decision.REPLAN: "ask the re-planner for new remaining steps",
    Decision.ABORT: "stop the run (status CANCELLED)",
    Decision.TAKEOVER: "you did the step by hand: mark it done (with a note of what you did) and continue",
}

_CAUSES = {
    FailureKind.TRANSIENT: [
        "the service is temporarily unavailable or overloaded",
        "a network timeout or dropped connection",
    ],
    FailureKind.DATA: [
        "a name or id is misspelled",
        "the resource was deleted or never created",
        "the input does not pass validation",
    ],
    FailureKind.LOGIC: [
        "a precondition of this item is not met yet",
        "the plan no longer matches the environment",
    ],
    FailureKind.PERMISSION: [
        "the current user or credentials lack the permission",
        "the credentials expired or were revoked",
    ],
    FailureKind.SYSTEM: [
        "a crash of the service or of the step's code",
        "a database or infrastructure error",
    ],
}


def possible_causes(kind: FailureKind) -> list[str]:
    return list(_CAUSES[kind])


@dataclass(frozen=True, slots=True, kw_only=True)
class Suggestion:
    """An option a failing step offers in its own words ("search again", "choose by hand"):
    a label for people and the decision that applies it."""

    label: str
    decision: Decision
    detail: str = ""
    """What choosing it does, or what a person should do first."""

    def to_dict(self) -> dict[str, str]:
        return {"label": self.label, "decision": str(self.decision), "detail": self.detail}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Suggestion:
        return cls(
            label=str(data["label"]), decision=Decision(data["decision"]), detail=str(data.get("detail", ""))
        )


def suggestions_of(exc: BaseException) -> list[Suggestion]:
    """The suggestions an exception carries (a ``suggestions`` attribute of Suggestion
    objects or their dicts); a step raises such an exception to offer its own options."""
    raw = getattr(exc, "suggestions", None) or ()
    out: list[Suggestion] = []
    for item in raw:
        if isinstance(item, Suggestion):
            out.append(item)
        elif isinstance(item, dict) and "label" in item and "decision" in item:
            out.append(Suggestion.from_dict(item))
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureReport:
    """Where, why, what was rolled back and what can be done next."""

    run_id: str
    item_id: str
    item_name: str
    phase: str
    position: int
    total: int
    kind: FailureKind
    error_type: str
    error: str
    attempts: int
    possible_causes: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    """Compensations that ran, and the state restore."""
    rollback_failures: list[str] = field(default_factory=list)
    """Compensations that themselves failed: never hidden."""
    restored_version: int | None = None
    options: list[Decision] = field(default_factory=list)
    suggestions: list[Suggestion] = field(default_factory=list)
    """The step's own options, each applying one of ``options``."""
    note: str = ""
    """What the person deciding said (for ``takeover``: what they did by hand)."""
    timestamp: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat())

    def to_dict(self) -> dict[str, Any]:
        """JSON-like form, stored in the run's state and shown by the API."""
        data = asdict(self)
        data["kind"] = str(self.kind)
        data["options"] = [str(o) for o in self.options]
        data["suggestions"] = [s.to_dict() for s in self.suggestions]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FailureReport:
        fields = dict(data)
        fields["kind"] = FailureKind(fields["kind"])
        fields["options"] = [Decision(o) for o in fields.get("options", [])]
        fields["suggestions"] = [Suggestion.from_dict(x) for x in fields.get("suggestions") or []]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in fields.items() if k in known})

    def render(self, *, symbols: bool = True) -> str:
        """The failure report template as plain text.

        ``symbols=False`` drops the emoji from the headings: a web page or a terminal
        without an emoji font would show them as empty boxes.
        """

        def head(symbol: str, title: str) -> str:
            return f"{symbol} {title}" if symbols else title

        lines = [
            head("⚠️", "Task failed"),
            "",
            head("📍", "Where"),
            f'   TODO item: "{self.item_name}" ({self.item_id})',
            f"   Phase: {self.phase} (item {self.position} of {self.total})",
            "",
            head(
                "❌", f"Why ({self.kind} failure, {self.attempts} attempt{'s' if self.attempts != 1 else ''})"
            ),
            f"   {self.error_type}: {self.error}",
            "   Possible causes:",
            *(f"   • {c}" for c in self.possible_causes),
            "",
            head("🔄", "Rolled back"),
            *(f"   • {r}" for r in self.rolled_back or ["nothing needed rolling back"]),
        ]
        if self.rollback_failures:
            lines += [
                "",
                head("‼️", "Rollback problems (check by hand)"),
                *(f"   • {r}" for r in self.rollback_failures),
            ]
        lines += ["", head("💡", "Options"), *(f"   [{o}] {_OPTIONS[o]}" for o in self.options)]
        if self.suggestions:
            lines += ["", head("🧭", "Suggested by the step")]
            lines += [
                f"   [{s.decision}] {s.label}" + (f": {s.detail}" if s.detail else "")
                for s in self.suggestions
            ]
        return "\n".join(lines)


class DecisionHandler(Protocol):
    """Chooses what happens after a failure; None leaves the run PAUSED for a human."""

    async def decide(self, report: FailureReport) -> Decision | None: ...


@dataclass(slots=True)
class PolicyDecisions:
    """For unattended runs: one decision per failure class (None: pause)."""

    policy: dict[FailureKind, Decision | None] = field(default_factory=dict)
    default: Decision | None = None

    async def decide(self, report: FailureReport) -> Decision | None:
        choice = self.policy.get(report.kind, self.default)
        return choice if choice is None or choice in report.options else self.default


@dataclass(slots=True)
class CallbackDecisions:
    """Asks a function (sync or async) for the decision."""

    fn: Callable[[FailureReport], Decision | None | Awaitable[Decision | None]]

    async def decide(self, report: FailureReport) -> Decision | None:
        result = self.fn(report)
        if inspect.isawaitable(result):
            result = await result
        return None if result is None else Decision(result)


def takeover_note(state: Any, step_id: str) -> str | None:
    """The note of a ``takeover`` decision on ``step_id`` when it is the run's latest
    history entry, else None. A step that loops (it routes to itself, or is queued again)
    runs once more after a takeover: it reads this to continue from what the person did
    instead of doing the work again."""
    history = state.get("execution_history") or []
    last = history[-1] if history else None
    if isinstance(last, dict) and last.get("node") == step_id and last.get("status") == "takeover":
        return str(last.get("note") or "")
    return None
