"""When to compress: the usage monitor's thresholds applied to a window before each model call.

An agent loop calls :meth:`ContextPolicy.before_call` between model calls. It returns what
happened as :class:`ContextEvent` records (the 70% warning, each compression with its level,
tokens before and after and what was folded, overflow recoveries, a session layer that its
protected items alone overflow), which the loop puts in the run's event log.

The order of checks: the monitor's thresholds read the window as it stands (so the 70%
warning reaches the log even when a layer's compression is about to bring usage down);
then a session or working layer over its own budget is compressed (the rolling summary is
re-bounded; the working layer keeps in detail only what fits in 60% of its budget); then
the highest threshold level crossed (standard or deep, once per crossing) compresses the
window, unless the layer's compression already took it back under that threshold; and a
window still over its budget is fitted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from tether.context.artifacts import ArtifactStore
from tether.context.compress import CompressionResult
from tether.context.items import Layer
from tether.context.monitor import Thresholds, UsageMonitor
from tether.context.window import ContextWindow

logger = logging.getLogger(__name__)

__all__ = ["ContextEvent", "ContextPolicy"]

EventKind = Literal["context_warning", "context_compressed", "context_overflow", "context_session_over"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextEvent:
    kind: EventKind
    level: str = ""
    """``standard``, ``deep``, ``squeeze`` or ``none`` for compressions."""
    ratio: float = 0.0
    before_tokens: int = 0
    after_tokens: int = 0
    folded: int = 0
    """Items folded into the summary."""
    dropped: int = 0
    reason: str = ""
    warnings: tuple[str, ...] = ()

    def detail(self) -> dict[str, Any]:
        """JSON-like fields for an event log."""
        return {
            "level": self.level,
            "ratio": round(self.ratio, 4),
            "before_tokens": self.before_tokens,
            "after_tokens": self.after_tokens,
            "folded": self.folded,
            "dropped": self.dropped,
            "reason": self.reason,
            "warnings": list(self.warnings),
        }


def _compressed(result: CompressionResult, reason: str, ratio: float) -> ContextEvent:
    return ContextEvent(
        kind="context_compressed",
        level=result.level,
        ratio=ratio,
        before_tokens=result.before_tokens,
        after_tokens=result.after_tokens,
        folded=len(result.summarized_ids),
        dropped=len(result.dropped_ids),
        reason=reason,
        warnings=result.warnings,
    )


@dataclass(slots=True, kw_only=True)
class ContextPolicy:
    """The usage monitor plus the compressions it asks for; state is the monitor's arming."""

    thresholds: Thresholds = field(default_factory=Thresholds)
    archive: ArtifactStore | None = None
    """Where the full history goes before each compression (recoverable by id)."""
    monitor: UsageMonitor = field(init=False)

    def __post_init__(self) -> None:
        self.monitor = UsageMonitor(self.thresholds)

    def before_call(self, window: ContextWindow) -> list[ContextEvent]:
        events: list[ContextEvent] = []
        usage = window.usage()  # the thresholds see the window the model would get
        level = None
        for ev in self.monitor.observe(usage):
            if ev.kind == "warn":
                reason = f"context at {ev.ratio:.0%} of {ev.budget} tokens"
                events.append(
                    ContextEvent(
                        kind="context_warning", ratio=ev.ratio, before_tokens=ev.tokens, reason=reason
                    )
                )
            elif ev.level in ("standard", "deep") and level != "deep":
                level = ev.level
        layered = False
        for layer in (Layer.SESSION, Layer.WORKING):  # a layer over its own budget first
            over = window.usage().layers[layer]
            if not over.budget or over.tokens <= over.budget:
                continue
            result = window.compress("standard", archive=self.archive)
            layered = True
            name = layer.name.lower()
            events.append(
                _compressed(result, f"{name} layer over its budget ({over.tokens}/{over.budget})", over.ratio)
            )
            if layer is Layer.SESSION and window.usage().layers[layer].tokens > over.budget:
                events.append(ContextEvent(kind="context_session_over", reason="; ".join(result.warnings)))
        threshold = self.thresholds.deep if level == "deep" else self.thresholds.standard
        if level is not None and (not layered or window.usage().ratio > threshold):
            result = window.compress(level, archive=self.archive)
            events.append(
                _compressed(result, f"usage {usage.ratio:.0%} crossed the {level} threshold", usage.ratio)
            )
        if level is not None or layered:
            self.monitor.observe(window.usage())  # re-arm the thresholds it fell back under
        if window.usage().tokens > window.budget:
            before = window.usage()
            result = window.fit(archive=self.archive)
            events.append(ContextEvent(
                kind="context_overflow", level=result.level, ratio=before.ratio, before_tokens=before.tokens,
                after_tokens=window.usage().tokens, folded=len(result.summarized_ids),
                dropped=len(result.dropped_ids), reason="over the budget after compression: fitted",
            ))  # fmt: skip
            self.monitor.observe(window.usage())
        for event in events:
            logger.info("context event %s %s", event.kind, event.detail())
        return events

    def after_refusal(self, window: ContextWindow, reason: str) -> ContextEvent:
        """Record an overflow recovery after the provider refused the prompt as too long."""
        return ContextEvent(kind="context_overflow", reason=reason, after_tokens=window.usage().tokens)
