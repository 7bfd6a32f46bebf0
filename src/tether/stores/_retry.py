"""Retries of transient store failures: one policy, one loop, used by every backend.

A store retries an operation that failed with :class:`StoreUnavailable` (connection lost,
deadlock, serialization failure), with exponential backoff, a bounded number of times.
Retries do not nest: inside a retried operation, a failing call raises at once and the
outer loop decides, so the attempts never multiply.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from tether.errors import ConfigError, StoreUnavailable

__all__ = ["RetryPolicy", "retried", "retry_call"]

logger = logging.getLogger("tether.stores")

T = TypeVar("T")
P = ParamSpec("P")


class _HasRetry(Protocol):
    retry: RetryPolicy


S = TypeVar("S", bound=_HasRetry)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How a store retries an operation that failed for a transient cause: the connection
    was lost (a server restart, a killed session, a network blip), a deadlock or a
    serialization failure (the server rolled the transaction back). Backoff is exponential
    from ``first_delay`` up to ``max_delay`` a wait, for at most ``attempts`` tries in all
    and ``deadline`` seconds; then :class:`StoreUnavailable` reaches the caller.

    A retried write is safe: each carries a write id, so one that landed before its reply
    was lost is recognised and not stored twice (see ``Write.write_id``).
    """

    attempts: int = 8
    first_delay: float = 0.05
    max_delay: float = 2.0
    deadline: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigError("RetryPolicy.attempts must be >= 1 (1: no retries)")


_RETRYING: ContextVar[bool] = ContextVar("tether_store_retrying", default=False)
"""Set while a store retries, so that a retried operation's own calls do not retry too."""


def retried(
    method: Callable[Concatenate[S, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
    """A backend method retried on :class:`StoreUnavailable` by its store's ``retry`` policy
    (for the public reads and changes the base class does not wrap itself)."""

    @functools.wraps(method)
    async def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(self, *args, **kwargs)
        except StoreUnavailable as exc:
            return await retry_call(
                self.retry, type(self).__name__, lambda: method(self, *args, **kwargs), exc
            )

    return call


async def retry_call(
    policy: RetryPolicy, name: str, call: Callable[[], Awaitable[T]], failed: StoreUnavailable
) -> T:
    """Run ``call`` again after it failed with ``failed``, with backoff (tenacity), until it
    works or the policy gives up (then the last :class:`StoreUnavailable` is raised). Inside
    another retry, raise at once."""
    if _RETRYING.get() or policy.attempts <= 1:
        raise failed
    import asyncio  # on the failure path only: `import tether` stays light (no asyncio)

    from tenacity import (
        AsyncRetrying,
        RetryCallState,
        retry_if_exception_type,
        stop_after_attempt,
        stop_after_delay,
        wait_exponential,
    )

    def log(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else failed
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        logger.warning(
            "%s: %s; retry %d/%d in %.2fs", name, error, state.attempt_number + 1, policy.attempts - 1, wait
        )

    logger.warning("%s: %s; retry 1/%d in %.2fs", name, failed, policy.attempts - 1, policy.first_delay)
    token = _RETRYING.set(True)
    try:
        await asyncio.sleep(policy.first_delay)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(policy.attempts - 1) | stop_after_delay(policy.deadline),
            wait=wait_exponential(multiplier=policy.first_delay * 2, max=policy.max_delay),
            retry=retry_if_exception_type(StoreUnavailable),
            before_sleep=log,
            reraise=True,
        )

        async def attempt() -> T:  # a coroutine function, so tenacity awaits it
            return await call()

        return await retrying(attempt)
    finally:
        _RETRYING.reset(token)
