"""The agent's context window: built from the goal, read back from a run's state, and its
instant layer (the iteration count, the last error) refreshed before each model call."""

from __future__ import annotations

from collections.abc import Callable

from tether.agent.config import LoopConfig
from tether.context import ContextWindow, Layer, new_item
from tether.state import ExecutionContext

__all__ = ["load_window", "new_window", "remind"]


def new_window(config: LoopConfig, goal: str, redact: Callable[[str], str]) -> ContextWindow:
    """A run's first window: the system prompt and the goal (pinned), then the session blocks."""
    window = ContextWindow(config.model_name, budget=config.budget)
    window.start_journal()
    window.add(new_item("system", config.system_prompt, id="system", pinned=True))
    window.add(new_item("goal", goal, id="goal", pinned=True))  # the item labels itself "Goal:"
    for name, text in config.blocks.items():
        if text.strip():
            window.add(new_item("state", redact(text), id=f"block-{name}", layer=Layer.SESSION))
    return window


def load_window(ctx: ExecutionContext) -> ContextWindow:
    """The run's window as its state holds it, journalling what this iteration changes."""
    if ctx.get("context_meta") is not None:
        window = ContextWindow.from_log(ctx.get("context_meta"), ctx.get("context_log") or [])
    else:  # a run started before the window was stored as a log
        window = ContextWindow.from_state(ctx.get("context_window"))
    window.start_journal()
    return window


def remind(window: ContextWindow, n: int, max_iterations: int, error: str | None) -> None:
    """Refresh the instant layer: where the loop stands, and the last error if any."""
    reminder = f"Iteration {n} of {max_iterations} ({max_iterations - n} left)."
    window.upsert(new_item("reminder", reminder, id="instant-iteration"))
    if error:
        window.upsert(new_item("error", f"Last error: {error}", id="instant-error"))
    elif window.get("instant-error") is not None:
        window.remove("instant-error")
