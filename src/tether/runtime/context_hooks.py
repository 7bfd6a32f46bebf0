"""Runner hooks that keep a run's context window compact (optional phase and
checkpoint compression), with the window stored in the run's state.

The window lives under one state key as ``ContextWindow.to_state()`` data, so it is
checkpointed, resumed and rolled back with everything else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tether.context import ContextWindow
from tether.context.artifacts import ArtifactStore
from tether.runtime.workflow import Phase, Workflow
from tether.state import ExecutionContext

__all__ = ["checkpoint_compression", "load_window", "phase_compression", "save_window"]

WINDOW_KEY = "context_window"


def load_window(ctx: ExecutionContext, key: str = WINDOW_KEY) -> ContextWindow | None:
    data = ctx.get(key)
    return None if not isinstance(data, dict) else ContextWindow.from_state(data)


def save_window(ctx: ExecutionContext, window: ContextWindow, key: str = WINDOW_KEY) -> None:
    """Store the window in the run's state (checkpointed at the next step)."""
    ctx.put(key, window.to_state())


def phase_compression(
    key: str = WINDOW_KEY, *, archive: ArtifactStore | None = None, workflow: Workflow | None = None
) -> Callable[[Phase, ExecutionContext], Mapping[str, Any] | None]:
    """A ``Runner(on_phase_complete=...)`` hook: fold the finished phase into one paragraph.

    With ``workflow``, a phase holding a step marked ``compressible=False`` is left as it is.
    """

    def hook(phase: Phase, ctx: ExecutionContext) -> Mapping[str, Any] | None:
        if workflow is not None and any(not s.compressible for s in workflow.phase_steps(phase.id)):
            return None
        window = load_window(ctx, key)
        if window is None:
            return None
        result = window.compress_phase(phase.id, archive=archive)
        if result.after_tokens >= result.before_tokens:
            return None
        return {key: window.to_state()}

    return hook


def checkpoint_compression(
    key: str = WINDOW_KEY, *, threshold: float = 0.85, archive: ArtifactStore | None = None
) -> Callable[[int, ExecutionContext], Mapping[str, Any] | None]:
    """A ``Runner(on_checkpoint=...)`` hook: standard compression once usage passes ``threshold``."""

    def hook(version: int, ctx: ExecutionContext) -> Mapping[str, Any] | None:
        window = load_window(ctx, key)
        if window is None or window.usage().ratio < threshold:
            return None
        window.compress("standard", archive=archive)
        return {key: window.to_state()}

    return hook
