"""Checkpoint compression for orchestrations: once a checkpoint passes, what precedes it in
the run's context window is compressed into a summary, so a long orchestration's window
does not carry every finished stage's detail forward.

The plan orchestrator and the multi-agent orchestrator pass :func:`checkpoint_compaction`
to their runner as ``on_checkpoint``: after every plan step or stage is checkpointed, the
context window the run's state keeps under ``context_window`` (the shape the runtime's
context hooks and the server's context API use) goes through
:meth:`~tether.context.policy.ContextPolicy.on_checkpoint`, which compresses only when the
window holds enough to gain from it. The compressed window is committed with the run and
each compression is published as a ``context_compressed`` event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from tether.agent.watch import safe_emit
from tether.context import ContextWindow
from tether.context.policy import ContextPolicy
from tether.runtime import Event
from tether.runtime.context_hooks import WINDOW_KEY
from tether.state import ExecutionContext

__all__ = ["checkpoint_compaction"]

logger = logging.getLogger(__name__)

CheckpointHook = Callable[[int, ExecutionContext], "Mapping[str, Any] | None"]


def checkpoint_compaction(
    policy: ContextPolicy | None = None,
    *,
    key: str = WINDOW_KEY,
    on_event: Callable[[Event], None] | None = None,
) -> CheckpointHook:
    """A ``Runner(on_checkpoint=...)`` hook compressing the run's window as checkpoints pass.

    One ``policy`` serves every run of the orchestrator (its monitor records each passed
    checkpoint); ``on_event`` receives a ``context_compressed`` event per compression.
    """
    chosen = policy or ContextPolicy()

    def hook(version: int, ctx: ExecutionContext) -> Mapping[str, Any] | None:
        data = ctx.get(key)
        if not isinstance(data, Mapping):
            return None
        window = ContextWindow.from_state(data)
        events = chosen.on_checkpoint(window, f"{ctx.run_id}@{version}")
        if not events:
            return None
        for ev in events:
            logger.info("checkpoint compression %s %s", ctx.run_id, ev.detail(), extra={"run_id": ctx.run_id})
            detail = {**ev.detail(), "version": version}
            safe_emit(on_event, Event(kind=ev.kind, run_id=ctx.run_id, step=ctx.node_id, detail=detail))
        return {key: window.to_state()}

    return hook
