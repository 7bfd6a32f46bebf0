"""One retry budget shared by a step's attempts and the retries of the clients it calls.

Without it retries multiply: a runner allowing 3 attempts of a step whose model client
retries 5 times makes 18 calls to a provider that is down. The runner opens a budget per
attempt (``retry_budget(left)``, the attempts the step has left); a client that retries
asks :func:`retries_allowed` how many it may make and reports each with
:func:`spend_retry`, and the runner counts those as attempts of the step. Outside a
runner there is no budget and clients keep their own limits.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["RetryBudget", "retries_allowed", "retry_budget", "spend_retry"]


@dataclass(slots=True)
class RetryBudget:
    left: int
    """Retries still allowed to whatever runs inside this budget."""
    spent: int = 0
    """Retries made by clients inside it (the runner adds them to the step's attempts)."""


_current: ContextVar[RetryBudget | None] = ContextVar("tether_retry_budget", default=None)


@contextmanager
def retry_budget(left: int) -> Iterator[RetryBudget]:
    """Run the block with ``left`` retries to share (a ContextVar: threads started with
    ``asyncio.to_thread`` and tasks created inside see it too)."""
    budget = RetryBudget(left=max(0, left))
    token = _current.set(budget)
    try:
        yield budget
    finally:
        _current.reset(token)


def retries_allowed(own_limit: int) -> int:
    """How many retries a client may make now: its own limit, capped by the budget."""
    budget = _current.get()
    return own_limit if budget is None else min(own_limit, budget.left)


def spend_retry() -> None:
    """Record one retry against the budget (no-op outside one)."""
    budget = _current.get()
    if budget is not None:
        budget.left = max(0, budget.left - 1)
        budget.spent += 1
