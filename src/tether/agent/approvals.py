"""The operator's answer to a command an unattended agent run paused on.

A run without an interaction handler pauses when a command needs approval, with
``pending_approval`` (``key``, ``command``, ``reason``) in its state. Deciding records the
answer in the checkpoint and leaves the run PAUSED, so whoever resumes it (``tether
resume``, ``AgentLoop.resume``, the server) continues with the decision: approved, the
command's key joins ``approvals`` and the command runs when the model proposes it again
(a resumed run never asks twice); denied, the model is told the operator refused.
"""

from __future__ import annotations

from typing import Any

from tether.errors import ConfigError
from tether.stores.base import CheckpointStore

__all__ = ["decide_approval", "find_pending_approval"]

_MAX_NESTED = 1000
"""Plan steps run as ``RUN.1``, ``RUN.2``...: how far to look for the one waiting."""


async def find_pending_approval(store: CheckpointStore, run_id: str) -> tuple[str, dict[str, Any]] | None:
    """The run (``run_id`` or one of its plan steps) waiting on an approval, and what it waits on."""
    cp = await store.load(run_id)
    if cp is None:
        raise ConfigError(f"run {run_id!r} not found: check the id with `tether runs`")
    pending = cp.state.get("pending_approval")
    if isinstance(pending, dict) and pending:
        return run_id, pending
    for i in range(1, _MAX_NESTED + 1):
        step = await store.load(f"{run_id}.{i}")
        if step is None:
            break
        pending = step.state.get("pending_approval")
        if isinstance(pending, dict) and pending:
            return f"{run_id}.{i}", pending
    return None


async def decide_approval(
    store: CheckpointStore, run_id: str, approved: bool = True
) -> tuple[str, dict[str, Any]]:
    """Record the decision on the command ``run_id`` waits on; the run stays PAUSED.

    Returns the id of the run that waited (a plan step's, for a plan) and the pending
    approval decided. Raises :class:`ConfigError` when nothing waits on an approval, and
    ``RunNotPaused`` when the run is not paused.
    """
    found = await find_pending_approval(store, run_id)
    if found is None:
        raise ConfigError(f"run {run_id!r} is not waiting on an approval")
    waiting, pending = found
    cp = await store.load(waiting)
    state = cp.state if cp is not None else {}
    update: dict[str, Any] = {"pending_approval": None}
    if approved:
        update["approvals"] = sorted({*(state.get("approvals") or ()), pending["key"]})
    else:
        update["last_error"] = f"the operator refused: {pending.get('command', '')}"
    await store.update_state(waiting, update)
    return waiting, pending
