"""When to compress: the usage monitor's thresholds applied to a window before each model call.

An agent loop calls :meth:`ContextPolicy.before_call` between model calls. It returns what
happened as :class:`ContextEvent` records (the 70% warning, each compression with its level,
tokens before and after and what was folded, overflow recoveries, a session layer that its
protected items alone overflow), which the loop puts in the run's event log.

Only the window's usage against its budget decides: below 70% nothing is compressed, over
70% a warning, over 85% standard compression, over 90% deep (each once per upward
crossing); a window still over its budget is then fitted. A layer over its own budget
does not compress a window that fits: the layer budgets bound each layer when a threshold
compression runs. What each call sends is recorded on the window (:meth:`ContextWindow.
record_sent`), so the run's state says how much of its window the model got. Phase and
checkpoint compression are asked for by the loop or an orchestrator through
:meth:`ContextPolicy.on_phase_end` and :meth:`ContextPolicy.on_checkpoint`.
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
    phase_compression: bool = True
    """Fold a plan phase into one line when it ends (:meth:`on_phase_end`)."""
    checkpoint_compression: bool = True
    """Compress what precedes a checkpoint once it passed (:meth:`on_checkpoint`)."""
    monitor: UsageMonitor = field(init=False)

    def __post_init__(self) -> None:
        self.monitor = UsageMonitor(self.thresholds)

    def before_call(self, window: ContextWindow) -> list[ContextEvent]:
        """Compress as the window's usage against its budget asks, then record what is sent.

        Below the warning threshold nothing is compressed, whatever the layers hold: a layer
        past its own budget borrows the room the others leave, and the budgets bound each
        layer only when a threshold compression runs (the summary re-summarised into the
        session layer's share, the operations kept in detail into the working layer's).
        """
        events: list[ContextEvent] = []
        for phase in window.phases_done() if self.phase_compression else ():
            events += self.on_phase_end(window, phase)
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
        if level is not None:
            result = window.compress(level, archive=self.archive)
            events.append(
                _compressed(result, f"usage {usage.ratio:.0%} crossed the {level} threshold", usage.ratio)
            )
            session = window.usage().layers[Layer.SESSION]
            if session.budget and session.tokens > session.budget:
                events.append(ContextEvent(kind="context_session_over", reason="; ".join(result.warnings)))
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
        window.record_sent()
        for event in events:
            logger.info("context event %s %s", event.kind, event.detail())
        return events

    def on_phase_end(self, window: ContextWindow, phase: str) -> list[ContextEvent]:
        """Phase compression for a plan phase that just ended (a no-op when it is disabled)."""
        if not self.phase_compression:
            return []
        self.monitor.phase_finished(phase)
        before = window.usage()
        result = window.compress_phase(phase, archive=self.archive)
        if not result.summarized_ids:
            return []
        self.monitor.observe(window.usage())
        return [_compressed(result, f"phase {phase} ended", before.ratio)]

    def on_checkpoint(
        self, window: ContextWindow, checkpoint_id: str, *, before_seq: int | None = None
    ) -> list[ContextEvent]:
        """Checkpoint compression once a checkpoint passed: what precedes it is compressed
        with the standard rules, what follows stays as it is. Runs only when the window
        holds enough to gain from it (over the warning threshold's half).

        ``before_seq`` is where the checkpoint stands in the window: the ``seq`` of the last
        item it saved (default: every item now in the window). ``checkpoint_id`` names it in
        the event. Returns the ``context_compressed`` event, or nothing when it did not run.
        """
        if not self.checkpoint_compression:
            return []
        before = window.usage()
        if before.ratio <= self.thresholds.warn / 2:
            return []
        self.monitor.checkpoint_passed(checkpoint_id)
        seq = max((i.seq for i in window.items()), default=0) if before_seq is None else before_seq
        result = window.compress("checkpoint", archive=self.archive, before_seq=seq)
        if not result.summarized_ids:
            return []
        self.monitor.observe(window.usage())
        return [_compressed(result, f"checkpoint {checkpoint_id} passed", before.ratio)]

    def after_refusal(self, window: ContextWindow, reason: str) -> ContextEvent:
        """Record an overflow recovery after the provider refused the prompt as too long."""
        return ContextEvent(kind="context_overflow", reason=reason, after_tokens=window.usage().tokens)
