"""Noticing that an agent loop is stuck: pure logic over what each iteration did and saw.

After every iteration the loop hands :func:`observe` one :class:`Observation` (the action's
fingerprint, the outcome's fingerprint, the error's signature when it failed, the TODO
progress) and the run's detector state (the ``stuck`` key, checkpointed with the run). Four
patterns are recognised, each reported as a :class:`StuckEvent` with its evidence:

* ``repeat``: the same action with the same outcome, ``repeat`` times in a row (a command
  that waits, ``sleep …``, counts as polling and needs ``poll_repeat`` times);
* ``cycle``: an action/outcome cycle of period 2 or 3 seen ``cycle_repeats`` times in a row;
* ``same_error``: ``same_error`` failures in a row with one error signature although the
  actions in between differed (fixes that did not fix);
* ``no_progress``: ``no_progress`` iterations in a row that saw nothing new (every action
  with its outcome seen before in the run) and completed no TODO item.

Escalation is per strike: a detection at an iteration is a strike, and strikes build up
while the loop stays stuck (``reset_after`` clean iterations clear them). Strike 1 tells
the model what repeated (a reminder in the instant layer); strike 2 asks for a re-plan (or
asks the user, when someone can answer); strike 3 pauses the run with a failure report.
Nothing here does I/O: the loop (see :mod:`tether.agent.watch`) applies the outcome.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from tether.errors import ConfigError

__all__ = [
    "Observation",
    "StuckConfig",
    "StuckEvent",
    "StuckPattern",
    "error_signature",
    "fingerprint",
    "observe",
    "outcome_key",
]

StuckPattern = Literal["repeat", "cycle", "same_error", "no_progress"]
Level = Literal["remind", "replan", "pause"]
_LEVELS: tuple[Level, ...] = ("remind", "replan", "pause")


@dataclass(frozen=True, slots=True, kw_only=True)
class StuckConfig:
    """Thresholds of the detector (counts of iterations; 0 turns a pattern off)."""

    enabled: bool = True
    repeat: int = 3
    """The same action with the same outcome this many times in a row."""
    poll_repeat: int = 6
    """The same for a command that waits (``sleep``, ``wait``, ``until``): polling is healthy."""
    cycle_repeats: int = 3
    """A cycle of period 2 or 3 seen this many times in a row (ABABAB for 3)."""
    same_error: int = 3
    """Failures in a row with the same error signature after different actions."""
    no_progress: int = 6
    """Iterations in a row with no new outcome and no TODO item done."""
    reset_after: int = 3
    """Clean iterations after which the strikes are forgotten."""
    ask_user: bool = True
    """At the second strike, ask the user (when a handler can answer) instead of only re-planning."""
    window: int = 24
    """Recent observations the patterns look at (enough for the largest)."""

    def __post_init__(self) -> None:
        for name in ("repeat", "poll_repeat", "cycle_repeats", "same_error", "no_progress"):
            value = getattr(self, name)
            if value != 0 and value < 2:
                raise ConfigError(f"StuckConfig.{name}={value}: use 0 (off) or at least 2")
        if self.reset_after < 1 or self.window < 4:
            raise ConfigError("StuckConfig.reset_after must be >= 1 and window >= 4")


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """What one iteration did and saw, reduced to comparable keys."""

    iteration: int
    action: str
    """The action's fingerprint (see :func:`fingerprint`)."""
    outcome: str
    """A short hash of the outcome (see :func:`outcome_key`)."""
    error: str | None = None
    """The failure's signature (see :func:`error_signature`); None when it succeeded."""
    progress: int = 0
    """TODO items done so far (a count that only grows)."""
    shown: str = ""
    """The action as a person reads it (the command, cut to 160 characters), for the evidence."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Observation:
        return cls(
            **{
                k: data[k]
                for k in ("iteration", "action", "outcome", "error", "progress", "shown")
                if k in data
            }
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class StuckEvent:
    """A detection: which pattern, at which strike, with the iterations that show it."""

    pattern: StuckPattern
    level: Level
    iteration: int
    strike: int
    message: str
    """One paragraph for the model (the reminder) and for people (the report)."""
    evidence: dict[str, Any] = field(default_factory=dict)
    """``iterations``, ``actions`` and the repeated ``outcome``/``error``."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# == fingerprints ===============================================================
_SPACE = re.compile(r"\s+")
_TIMESTAMP = re.compile(
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?|\b\d\d:\d\d:\d\d(\.\d+)?\b"
)
_DURATION = re.compile(r"\b\d+(\.\d+)?\s?(ms|s|sec|seconds)\b")
_NUMBER = re.compile(r"\d{3,}")  # pids, ports, sizes; short numbers (names, lines) kept
_HEX = re.compile(r"\b[0-9a-f]{8,}\b", re.IGNORECASE)
_POLL = re.compile(r"\b(sleep|wait|until|watch|timeout)\b")


def fingerprint(kind: str, text: str) -> str:
    """An action as a short comparable key: its kind and its text (whitespace collapsed), hashed."""
    return hashlib.sha1(f"{kind}:{_SPACE.sub(' ', text).strip()}".encode()).hexdigest()[:12]


def outcome_key(text: str) -> str:
    """A short hash of an outcome with timestamps and durations removed (a clock in the
    output must not make two identical results look different)."""
    cleaned = _DURATION.sub("<t>", _TIMESTAMP.sub("<ts>", text))
    return hashlib.sha1(_SPACE.sub(" ", cleaned).strip().encode()).hexdigest()[:12]


def error_signature(exit_code: int | None, stderr: str, stdout: str = "") -> str:
    """What identifies an error across attempts: the exit code and the last line the
    command printed (its stderr first), timestamps, ids and long numbers masked."""
    text = stderr.strip() or stdout.strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    masked = _NUMBER.sub("#", _HEX.sub("<id>", _TIMESTAMP.sub("<ts>", last)))
    return f"exit {exit_code}: {_SPACE.sub(' ', masked).strip()[:200]}"


def _polls(obs: Observation) -> bool:
    return bool(_POLL.search(obs.shown))


# == detection ==================================================================
def observe(
    state: Mapping[str, Any] | None, observations: Sequence[Observation], config: StuckConfig
) -> tuple[dict[str, Any], StuckEvent | None]:
    """The detector's new state after the last of ``observations`` (the run's, oldest
    first: an append-only log, so a checkpoint stores one small entry per iteration), and
    the detection it makes (or None). ``state`` is the small rest (strikes, counters)."""
    old = dict(state or {})
    obs = observations[-1]
    history = list(observations[-config.window :])
    novel = all(o.action != obs.action or o.outcome != obs.outcome for o in observations[:-1])
    progressed = obs.progress > int(old.get("progress", 0))
    quiet = 0 if novel or progressed else int(old.get("quiet", 0)) + 1
    new: dict[str, Any] = {
        "progress": max(obs.progress, int(old.get("progress", 0))),
        "quiet": quiet,
        "strikes": int(old.get("strikes", 0)),
        "clean": int(old.get("clean", 0)),
    }
    found = _detect(history, quiet, config) if config.enabled else None
    if found is None:
        new["clean"] += 1
        if new["clean"] >= config.reset_after:
            new["strikes"] = 0
        return new, None
    pattern, evidence = found
    strike = new["strikes"] + 1
    level = _LEVELS[min(strike, len(_LEVELS)) - 1]
    event = StuckEvent(
        pattern=pattern,
        level=level,
        iteration=obs.iteration,
        strike=strike,
        message=_message(pattern, evidence, level),
        evidence=evidence,
    )
    new.update(strikes=strike, clean=0)
    return new, event


def _detect(
    history: Sequence[Observation], quiet: int, config: StuckConfig
) -> tuple[StuckPattern, dict[str, Any]] | None:
    for check in (_repeat, _cycle, _same_error):
        found = check(history, config)
        if found is not None:
            return found
    if config.no_progress and quiet >= config.no_progress:
        tail = history[-quiet:]
        return "no_progress", _evidence(tail, quiet=quiet)
    return None


def _same_step(a: Observation, b: Observation) -> bool:
    return a.action == b.action and a.outcome == b.outcome


def _repeat(
    history: Sequence[Observation], config: StuckConfig
) -> tuple[StuckPattern, dict[str, Any]] | None:
    last = history[-1]
    need = config.poll_repeat if _polls(last) else config.repeat
    if not need or len(history) < need:
        return None
    tail = history[-need:]
    if all(_same_step(o, last) for o in tail):
        return "repeat", _evidence(tail, times=need)
    return None


def _cycle(history: Sequence[Observation], config: StuckConfig) -> tuple[StuckPattern, dict[str, Any]] | None:
    if not config.cycle_repeats:
        return None
    for period in (2, 3):
        size = period * config.cycle_repeats
        if len(history) < size:
            continue
        tail = history[-size:]
        if len({(o.action, o.outcome) for o in tail[:period]}) < 2:
            continue  # one step over and over: a repeat, not a cycle
        if all(_same_step(tail[i], tail[i - period]) for i in range(period, size)):
            return "cycle", _evidence(tail, period=period, times=config.cycle_repeats)
    return None


def _same_error(
    history: Sequence[Observation], config: StuckConfig
) -> tuple[StuckPattern, dict[str, Any]] | None:
    need = config.same_error
    last = history[-1]
    if not need or last.error is None:
        return None
    failures: list[int] = []
    for i in range(len(history) - 1, -1, -1):
        o = history[i]
        if o.error is None:
            continue
        if o.error != last.error:
            break
        failures.append(i)
        if len(failures) == need:
            break
    if len(failures) < need:
        return None
    span = history[failures[-1] :]
    if len(span) > 3 * need:
        return None  # failures far apart: unrelated work in between, not a fix loop
    if len({o.action for o in span}) < 2:
        return None  # one action over and over: that is a repeat, not fixes that fail
    failing = {o.action for o in span if o.error is not None}
    if any(o.error is None and o.action in failing for o in span):
        return None  # a failing action succeeded in between: that error was fixed once
    return "same_error", _evidence(span, error=last.error, times=need)


def _evidence(tail: Sequence[Observation], **extra: Any) -> dict[str, Any]:
    return {
        "iterations": [o.iteration for o in tail],
        "actions": [o.shown or o.action for o in tail],
        **extra,
    }


def _message(pattern: StuckPattern, evidence: Mapping[str, Any], level: Level) -> str:
    its = evidence.get("iterations") or []
    where = f"iterations {its[0]}-{its[-1]}" if its else "recent iterations"
    actions = list(dict.fromkeys(evidence.get("actions") or []))
    shown = "; ".join(f"`{a[:120]}`" for a in actions[:3])
    if pattern == "repeat":
        times = evidence.get("times")
        what = f"you ran {shown} {times} times in a row ({where}) and got the same result each time"
    elif pattern == "cycle":
        what = (
            f"you are alternating between {shown} ({where}, a cycle of {evidence.get('period')} "
            f"seen {evidence.get('times')} times) with the same results"
        )
    elif pattern == "same_error":
        what = (
            f"{evidence.get('times')} attempts ended with the same error ({where}): "
            f"{evidence.get('error')}; the fixes in between ({shown}) did not change it"
        )
    else:
        what = f"{evidence.get('quiet')} iterations ({where}) produced nothing new and finished no TODO item"
    if level == "remind":
        advice = "Do not repeat it: read the output, find the cause, try something different."
        return f"You seem stuck: {what}. {advice}"
    if level == "replan":
        return (
            f"Still stuck: {what}. Re-plan now: state in your reasoning why the approach fails, "
            "choose a different approach, or ask the user if you need a decision."
        )
    return f"The agent is stuck: {what}. It was told twice and did not change course."
