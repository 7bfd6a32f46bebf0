"""Usage monitor: the 70 / 85 / 90% thresholds as events a UI or log subscribes to.

Each threshold fires once when usage crosses it upwards and re-arms only after usage
falls back under it, so a window hovering at 86% does not compress on every call. Two
readings feed it: our own count (``observe``) and what the provider billed
(``observe_provider_usage``); the higher one decides, because an under-count is the
failure that overflows the window.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from tether.context.window import WindowUsage

logger = logging.getLogger(__name__)

__all__ = ["EventKind", "Thresholds", "UsageEvent", "UsageMonitor"]

EventKind = Literal[
    "warn",
    "standard_compression",
    "deep_compression",
    "phase_compression",
    "checkpoint_compression",
]
Source = Literal["count", "provider", "request"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Thresholds:
    """Fractions of the budget; the defaults."""

    warn: float = 0.70
    """Tell the user; suggest a manual compression."""
    standard: float = 0.85
    """Compress automatically (standard, ~60% kept)."""
    deep: float = 0.90
    """Compress at once (deep, ~30% kept)."""

    def __post_init__(self) -> None:
        if not 0 < self.warn <= self.standard <= self.deep:
            raise ValueError("thresholds must satisfy 0 < warn <= standard <= deep")


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageEvent:
    kind: EventKind
    ratio: float
    """Usage that triggered it (0 for on-demand requests)."""
    tokens: int
    budget: int
    source: Source
    phase: str | None = None
    checkpoint_id: str | None = None

    @property
    def level(self) -> Literal["standard", "deep", "phase", "checkpoint"] | None:
        """The compression the event asks for; ``None`` for a warning."""
        return {
            "standard_compression": "standard",
            "deep_compression": "deep",
            "phase_compression": "phase",
            "checkpoint_compression": "checkpoint",
        }.get(self.kind)  # type: ignore[return-value]


Callback = Callable[[UsageEvent], None]
_ORDER: tuple[tuple[EventKind, str], ...] = (
    ("warn", "warn"),
    ("standard_compression", "standard"),
    ("deep_compression", "deep"),
)


class UsageMonitor:
    """Edge-triggered threshold events over the window's and the provider's usage."""

    def __init__(self, thresholds: Thresholds | None = None) -> None:
        self.thresholds = thresholds or Thresholds()
        self._subscribers: list[Callback] = []
        self._armed: dict[EventKind, bool] = {kind: True for kind, _ in _ORDER}
        self._count: tuple[int, int] = (0, 0)
        self._provider: tuple[int, int] | None = None
        self._provider_at_count = 0

    def subscribe(self, callback: Callback) -> Callable[[], None]:
        """Call ``callback`` for every event; returns a function that unsubscribes."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    def _emit(self, event: UsageEvent) -> None:
        log = logger.warning if event.kind != "warn" else logger.info
        log(
            "context %s: %d/%d tokens (%.0f%%, from %s)",
            event.kind,
            event.tokens,
            event.budget,
            100 * event.ratio,
            event.source,
        )
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception:  # a broken UI hook must not break the agent loop
                logger.exception("usage monitor subscriber failed on %s", event.kind)

    def _check(self, source: Source) -> list[UsageEvent]:
        tokens, budget = self._count
        if self._provider is not None and self._provider[0] > tokens:
            tokens, budget = self._provider
        else:
            source = "count"
        ratio = tokens / budget if budget else 0.0
        events: list[UsageEvent] = []
        for kind, attr in _ORDER:
            limit: float = getattr(self.thresholds, attr)
            if ratio > limit:
                if self._armed[kind]:
                    self._armed[kind] = False
                    events.append(
                        UsageEvent(kind=kind, ratio=ratio, tokens=tokens, budget=budget, source=source)
                    )
            else:
                self._armed[kind] = True
        for event in events:
            self._emit(event)
        return events

    def observe(self, usage: WindowUsage) -> list[UsageEvent]:
        """Feed our own count; returns (and emits) the thresholds crossed just now.

        A provider reading is forgotten once our count drops below what it was when the
        reading arrived: the window was compressed, so that bill is stale.
        """
        self._count = (usage.tokens, usage.budget)
        if self._provider is not None and usage.tokens < self._provider_at_count:
            self._provider = None
        return self._check("count")

    def observe_provider_usage(self, prompt_tokens: int, budget: int) -> list[UsageEvent]:
        """Feed what the provider reported for the last request (the second trigger)."""
        self._provider = (prompt_tokens, budget)
        self._provider_at_count = self._count[0]
        return self._check("provider")

    @property
    def ratio(self) -> float:
        tokens, budget = self._count
        if self._provider is not None and self._provider[0] > tokens:
            tokens, budget = self._provider
        return tokens / budget if budget else 0.0

    def phase_finished(self, phase: str) -> UsageEvent:
        """Ask for phase compression (optional in the seed): always emits."""
        event = UsageEvent(
            kind="phase_compression",
            ratio=self.ratio,
            tokens=self._count[0],
            budget=self._count[1],
            source="request",
            phase=phase,
        )
        self._emit(event)
        return event

    def checkpoint_passed(self, checkpoint_id: str) -> UsageEvent:
        """Ask for checkpoint compression (optional in the seed): always emits."""
        event = UsageEvent(
            kind="checkpoint_compression",
            ratio=self.ratio,
            tokens=self._count[0],
            budget=self._count[1],
            source="request",
            checkpoint_id=checkpoint_id,
        )
        self._emit(event)
        return event
