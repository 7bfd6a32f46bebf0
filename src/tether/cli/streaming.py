"""The CLI's live view of a reply while the model writes it (``model_delta`` events).

On a terminal the pieces are written as they arrive, dimmed, on one growing line that the
next event closes; piped output stays one line per event (scripts read whole lines), so
the pieces are dropped there: the complete reply is in the run's prompt records
(``tether prompt RUN``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["DeltaPrinter", "ModelActivity", "run_tracer", "traced_events", "traced_model", "traced_workflow"]

DELTA = "model_delta"


class DeltaPrinter:
    """Call it with every event; it returns True for the events it consumed (the deltas)."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.open = False
        self.live = bool(getattr(console, "is_terminal", False))

    def __call__(self, event: Any) -> bool:
        if event.kind != DELTA:
            self.close()
            return False
        if not self.live:
            return True
        text = str(event.detail.get("text", ""))
        if not self.open:
            self.console.print("  [dim]model:[/] ", end="")
            self.open = True
        self.console.print(text, end="", style="dim", markup=False, highlight=False, soft_wrap=True)
        return True

    def close(self) -> None:
        if self.open:
            self.console.print()
            self.open = False


class ModelActivity:
    """A spinner with the elapsed time while the model is asked (terminals only).

    An agent iteration starts with its model call (``step_started``); the next event (a
    streamed piece, the command, the end of the step) means the model has answered, so
    the line goes away. A model that takes a minute to answer no longer looks like a hung
    command. Piped output gets nothing: scripts read whole lines.
    """

    def __init__(self, console: Any) -> None:
        self.console = console
        self.live = bool(getattr(console, "is_terminal", False))
        self._status: Any = None
        self._since = 0.0

    def __call__(self, event: Any) -> None:
        if not self.live:
            return
        if event.kind == "step_started":
            self.start()
        else:
            self.stop()

    def start(self) -> None:
        import time

        self.stop()
        self._since = time.monotonic()
        self._status = self.console.status(self, spinner="dots")
        self._status.start()

    def stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def __rich__(self) -> str:
        import time

        return f"[dim]waiting for the model · {time.monotonic() - self._since:.0f}s[/]"


_TRACING: dict[str, Any] = {}


def _provider() -> Any:
    """The tracer provider the standard OTEL_* variables ask for, built once per process."""
    if "provider" not in _TRACING:
        import atexit

        from tether.tracing import configure_from_env

        _TRACING["provider"] = provider = configure_from_env()
        if provider is not None:
            atexit.register(getattr(provider, "shutdown", lambda: None))  # flush a short command's spans
    return _TRACING["provider"]


def run_tracer(workflow: str | None = None) -> Any:
    """A RunTracer for the CLI's runs, or None when tracing is off."""
    provider = _provider()
    if provider is None:
        return None
    from tether.tracing import RunTracer

    return RunTracer(provider, workflow=workflow)


def traced_events(on_event: Callable[[Any], None], *, workflow: str | None = None) -> Callable[[Any], None]:
    """``on_event``, also feeding a RunTracer when the standard OTEL_* variables turn
    tracing on (every entry point traces the way ``tether serve`` does)."""
    traced = run_tracer(workflow)
    if traced is None:
        return on_event

    def both(event: Any) -> None:
        traced.on_event(event)
        on_event(event)

    return both


def traced_workflow(workflow: Any) -> Any:
    """``workflow`` with the chat models its steps hold traced, when tracing is on."""
    provider = _provider()
    if provider is not None:
        from tether.tracing import trace_models

        trace_models(workflow, provider)
    return workflow


def traced_model(model: Any) -> Any:
    """``model`` wrapped in a TracedModel when tracing is on (its calls become chat spans)."""
    provider = _provider()
    if provider is None:
        return model
    from tether.tracing import TracedModel

    return TracedModel(model, provider=provider)
