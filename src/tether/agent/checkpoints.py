"""Checkpoint compression in the agent loop: what precedes a checkpoint that passed.

The loop saves a checkpoint after every iteration. The ones that *pass* are those that
close an item of the run's plan: the agent reports a TODO item done ("Done: ...", "step 2
done", ``- [x] ...``), the iteration's checkpoint is saved, and the next iteration ticks the
item off. From then on the operations before that checkpoint are history the run keeps
(the checkpoint, and the archive each compression writes), so before the next model call
the finished phase folds into its one line (phase compression) and the rest of what
precedes the checkpoint is compressed with the standard rules, when the window holds
enough to gain from it (:meth:`~tether.context.policy.ContextPolicy.on_checkpoint`: over
half the warning threshold). A run without a plan, or with ``checkpoint_compression``
off, is compressed by the 70/85/90% thresholds alone.

Deterministic: a resumed run rebuilds the window from the same checkpoint, ticks the same
item off and compresses the same way.
"""

from __future__ import annotations

from tether.agent.prompt import remind
from tether.context import ContextWindow, Layer
from tether.context.policy import ContextEvent, ContextPolicy
from tether.runtime import StepContext

__all__ = ["remind_at_checkpoint", "todos_done"]


def todos_done(window: ContextWindow) -> int:
    """TODO items of the plan that are done or skipped."""
    return sum(
        1
        for i in window.items(Layer.SESSION)
        if i.kind == "todo" and str(i.metadata.get("status", "")).lower() in ("done", "skipped")
    )


def remind_at_checkpoint(
    policy: ContextPolicy, window: ContextWindow, n: int, max_iterations: int, sc: StepContext
) -> list[ContextEvent]:
    """:func:`~tether.agent.prompt.remind` (the run's last error and when its last iteration
    ended are read from ``sc``), then checkpoint compression when the checkpoint of
    iteration ``n - 1`` closed a TODO item: the phases it finished fold first, then what
    the checkpoint holds (its items, up to the last one it saved) is compressed."""
    held = max((i.seq for i in window.items()), default=0)  # the window as the checkpoint saved it
    done = todos_done(window)
    remind(window, n, max_iterations, sc.get("last_error"), sc.get("iteration_at"))
    if n <= 1 or not policy.checkpoint_compression or todos_done(window) <= done:
        return []
    events = [e for phase in window.phases_done() for e in policy.on_phase_end(window, phase)]
    return events + policy.on_checkpoint(window, f"iteration-{n - 1}", before_seq=held)
