"""Failure classes and the one pure function that assigns them.

``classify(exc)`` walks a table of rules (exception types, exit codes, message
patterns). The most specific type match wins (closest in the exception's MRO); an
unmatched exception is SYSTEM, because an unknown failure must be rolled back and
alerted on, never retried blindly. Users extend the table per runner.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from tether.errors import (
    BudgetExceeded,
    CommandRefused,
    InvalidStateValue,
    MalformedResponse,
    ModelUnavailable,
    PromptTooLong,
    SessionError,
    StoreUnavailable,
)

__all__ = [
    "ACTIONS",
    "Classifier",
    "DataError",
    "FailureKind",
    "GaveUp",
    "LogicError",
    "PermissionDenied",
    "Rule",
    "TransientError",
    "classify",
    "finish_kind",
]


class FailureKind(enum.StrEnum):
    """The five failure classes."""

    TRANSIENT = "transient"
    """Timeout, service unavailable: retry with backoff (at most 3 tries)."""
    DATA = "data"
    """Missing resource, validation: roll back and report."""
    LOGIC = "logic"
    """A precondition is not met: re-plan."""
    PERMISSION = "permission"
    """Not allowed: roll back and report."""
    SYSTEM = "system"
    """Crash, database error, anything unknown: roll back and alert."""


ACTIONS: dict[FailureKind, str] = {
    FailureKind.TRANSIENT: "retry with backoff (up to 3 tries), then roll back and report",
    FailureKind.DATA: "roll back and report",
    FailureKind.LOGIC: "re-plan (if a re-planner is configured), else roll back and report",
    FailureKind.PERMISSION: "roll back and report",
    FailureKind.SYSTEM: "roll back, alert and report",
}


class StepFailure(Exception):
    """Base of the exceptions steps raise to say which class their failure is."""

    kind: FailureKind = FailureKind.SYSTEM


class TransientError(StepFailure):
    kind = FailureKind.TRANSIENT


class DataError(StepFailure):
    kind = FailureKind.DATA


class LogicError(StepFailure):
    kind = FailureKind.LOGIC


class PermissionDenied(StepFailure):
    kind = FailureKind.PERMISSION


class GaveUp(LogicError):
    """A step ended its run FAILED in its own words (``StepContext.finish("FAILED", …)``):
    the exception its failure report is written from."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One line of the table: any of its conditions matching assigns ``kind``."""

    kind: FailureKind
    types: tuple[type[BaseException], ...] = ()
    exit_codes: tuple[int, ...] = ()
    pattern: str | None = None
    """Regular expression searched (case-insensitive) in ``str(exc)``."""


_DEFAULT_RULES: tuple[Rule, ...] = (
    Rule(
        kind=FailureKind.TRANSIENT,
        types=(
            TimeoutError,
            ConnectionError,
            StoreUnavailable,
            ModelUnavailable,
            SessionError,
            TransientError,
        ),
    ),
    Rule(kind=FailureKind.PERMISSION, types=(CommandRefused,)),
    Rule(kind=FailureKind.DATA, types=(InvalidStateValue,)),  # a value the state refuses
    # the provider refuses this input as it is (too long after compression, a body that is
    # not a reply): asking again sends the same thing, so roll back and report
    Rule(kind=FailureKind.DATA, types=(PromptTooLong, BudgetExceeded, MalformedResponse)),
    Rule(kind=FailureKind.DATA, types=(DataError, KeyError, LookupError, ValueError, FileNotFoundError)),
    Rule(kind=FailureKind.LOGIC, types=(LogicError, AssertionError, NotImplementedError)),
    Rule(kind=FailureKind.PERMISSION, types=(PermissionDenied, PermissionError)),
    Rule(kind=FailureKind.SYSTEM, types=(MemoryError, OSError, RuntimeError)),
    # exit codes of shell commands (CommandFailed-like exceptions carry .exit_code)
    Rule(kind=FailureKind.TRANSIENT, exit_codes=(124, 75)),  # timeout(1), EX_TEMPFAIL
    Rule(kind=FailureKind.PERMISSION, exit_codes=(126, 77)),  # not executable, EX_NOPERM
    Rule(kind=FailureKind.DATA, exit_codes=(65, 66)),  # EX_DATAERR, EX_NOINPUT
    Rule(
        kind=FailureKind.TRANSIENT,
        pattern=r"timed? ?out|temporar(y|ily) unavailable|service unavailable|\b50[234]\b|"
        r"connection (reset|refused)|rate limit|too many requests|\b429\b|try again",
    ),
    Rule(
        kind=FailureKind.PERMISSION,
        pattern=r"permission denied|forbidden|\b403\b|unauthori[sz]ed|\b401\b|not allowed",
    ),
    Rule(kind=FailureKind.DATA, pattern=r"not found|no such|does not exist|\b404\b|invalid|validation"),
    Rule(kind=FailureKind.LOGIC, pattern=r"precondition|must first|requires? .* first|not ready"),
)


@dataclass(slots=True)
class Classifier:
    """The rule table; ``add`` puts user rules in front of the defaults."""

    rules: list[Rule] = field(default_factory=lambda: list(_DEFAULT_RULES))

    def add(self, rule: Rule) -> Classifier:
        self.rules.insert(0, rule)
        return self

    def extend(self, rules: Iterable[Rule]) -> Classifier:
        for rule in reversed(list(rules)):
            self.add(rule)
        return self

    def classify(self, exc: BaseException) -> FailureKind:
        if isinstance(exc, StepFailure) and type(exc).kind is not StepFailure.kind:
            return type(exc).kind
        best: tuple[int, FailureKind] | None = None
        mro = type(exc).__mro__
        for rule in self.rules:
            for tp in rule.types:
                if tp in mro:
                    distance = mro.index(tp)
                    if best is None or distance < best[0]:
                        best = (distance, rule.kind)
        # a specific type (ours or the user's) beats generic message and code guesses,
        # but the broad builtin bases (OSError, ValueError…) do not
        if best is not None and best[0] <= 1 and not _is_broad(mro[best[0]]):
            return best[1]
        code = getattr(exc, "exit_code", None)
        if isinstance(code, int):
            for rule in self.rules:
                if code in rule.exit_codes:
                    return rule.kind
        # words last, and only where the type says little: an unknown failure (RuntimeError,
        # OSError, no type match) is refined by its message, but a ValueError stays DATA
        # whatever it says ("… not allowed by the schema" is bad data, not a permission);
        # rules a user added apply to any message
        typed = best is not None and best[1] is not FailureKind.SYSTEM
        text = str(exc)
        for rule in self.rules:
            if typed and rule in _DEFAULT_RULES:
                continue
            if rule.pattern and re.search(rule.pattern, text, re.IGNORECASE):
                return rule.kind
        return best[1] if best is not None else FailureKind.SYSTEM


_BROAD = {OSError, ValueError, RuntimeError, LookupError, Exception}


def _is_broad(tp: type) -> bool:
    return tp in _BROAD


_DEFAULT = Classifier()


def classify(exc: BaseException) -> FailureKind:
    """Classify with the default table."""
    return _DEFAULT.classify(exc)


def finish_kind(message: str) -> FailureKind:
    """The class of a run a step ended FAILED in its own words (no exception): the default
    table's message patterns, else LOGIC (the goal was not reached)."""
    for rule in _DEFAULT_RULES:
        if rule.pattern and re.search(rule.pattern, message, re.IGNORECASE):
            return rule.kind
    return FailureKind.LOGIC
