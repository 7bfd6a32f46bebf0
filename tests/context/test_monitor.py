from __future__ import annotations

import pytest

from tether.context import Layer, Thresholds, UsageEvent, UsageMonitor
from tether.context.window import LayerUsage, WindowUsage


def usage(tokens: int, budget: int = 1_000) -> WindowUsage:
    layers = {lay: LayerUsage(layer=lay, tokens=0, budget=0, items=0) for lay in Layer}
    return WindowUsage(tokens=tokens, raw_tokens=tokens, budget=budget, layers=layers)


def kinds(events: list[UsageEvent]) -> list[str]:
    return [e.kind for e in events]


def test_each_threshold_fires_once_per_upward_crossing() -> None:
    """70/85/90: one event each on the way up, none while hovering above."""
    m = UsageMonitor()
    seen: list[UsageEvent] = []
    m.subscribe(seen.append)
    assert m.observe(usage(500)) == []
    assert kinds(m.observe(usage(710))) == ["warn"]
    assert m.observe(usage(720)) == []
    assert kinds(m.observe(usage(860))) == ["standard_compression"]
    assert kinds(m.observe(usage(950))) == ["deep_compression"]
    assert m.observe(usage(990)) == []
    assert kinds(seen) == ["warn", "standard_compression", "deep_compression"]
    assert seen[-1].level == "deep" and seen[0].level is None


def test_thresholds_rearm_after_falling_back() -> None:
    """After compression drops usage below a threshold, the next crossing fires again."""
    m = UsageMonitor()
    m.observe(usage(950))
    assert m.observe(usage(400)) == []
    assert kinds(m.observe(usage(880))) == ["warn", "standard_compression"]
    m.observe(usage(800))  # back under 85 only: warn stays disarmed
    assert kinds(m.observe(usage(870))) == ["standard_compression"]


def test_exactly_at_threshold_does_not_fire() -> None:
    """The seed says "> 70%": equality is not a crossing."""
    m = UsageMonitor()
    assert m.observe(usage(700)) == []
    assert kinds(m.observe(usage(701))) == ["warn"]


def test_provider_usage_is_a_second_trigger() -> None:
    """A provider bill above our count fires; compression clears the stale bill."""
    m = UsageMonitor()
    m.observe(usage(600))
    events = m.observe_provider_usage(880, 1_000)
    assert kinds(events) == ["warn", "standard_compression"]
    assert all(e.source == "provider" for e in events)
    assert m.observe(usage(610)) == []  # bill still the higher reading
    assert m.observe(usage(300)) == []  # compressed: bill forgotten, thresholds re-arm
    assert m.ratio == pytest.approx(0.3)
    assert kinds(m.observe(usage(720))) == ["warn"]


def test_configurable_thresholds_and_validation() -> None:
    """Thresholds are configurable and must be ordered."""
    m = UsageMonitor(Thresholds(warn=0.5, standard=0.6, deep=0.7))
    assert kinds(m.observe(usage(650))) == ["warn", "standard_compression"]
    with pytest.raises(ValueError):
        Thresholds(warn=0.9, standard=0.8)


def test_on_demand_phase_and_checkpoint_events() -> None:
    """Phase and checkpoint compression are requested explicitly and always emitted."""
    m = UsageMonitor()
    seen: list[UsageEvent] = []
    unsubscribe = m.subscribe(seen.append)
    m.observe(usage(100))
    assert m.phase_finished("build").phase == "build"
    assert m.checkpoint_passed("cp-3").level == "checkpoint"
    assert kinds(seen) == ["phase_compression", "checkpoint_compression"]
    unsubscribe()
    m.phase_finished("x")
    assert len(seen) == 2


def test_a_failing_subscriber_does_not_break_the_others(caplog: pytest.LogCaptureFixture) -> None:
    """Subscriber errors are logged, not raised."""
    m = UsageMonitor()
    seen: list[UsageEvent] = []

    def boom(event: UsageEvent) -> None:
        raise RuntimeError("ui down")

    m.subscribe(boom)
    m.subscribe(seen.append)
    m.observe(usage(750))
    assert kinds(seen) == ["warn"]
    assert "subscriber failed" in caplog.text
