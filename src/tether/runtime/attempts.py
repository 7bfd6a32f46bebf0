"""The attempts of one step: retries of TRANSIENT failures with backoff, counted durably.

Before every attempt whose start must be on record (any retry, and every attempt of a
step declared ``idempotent=False``) the runner checkpoints the attempt number with the
run (``mark``), so a crash during attempt 2 of 3 leaves exactly one attempt for the
resume. Each attempt runs inside a :func:`~tether.models.budget.retry_budget` of the
attempts left: retries that the clients a step calls make themselves (a model client's
retries on 503) count as attempts of the step, so the two never multiply.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from tether.models.budget import retry_budget
from tether.runtime.failures import TransientError
from tether.runtime.workflow import RetryPolicy, Step, StepContext

__all__ = ["AttemptsExhausted", "StepTimeout", "attempt_step"]

Update = Mapping[str, Any] | None


class StepTimeout(TimeoutError):
    """A step ran past its ``timeout`` or went silent past its ``idle_timeout``."""


class AttemptsExhausted(TransientError):
    """A resumed step had no attempt left: the last one was cut short by a crash."""


async def attempt_step(
    step: Step,
    sc: StepContext,
    *,
    policy: RetryPolicy,
    first: int,
    transient: Callable[[BaseException], bool],
    mark: Callable[[int], Awaitable[None]],
    on_retry: Callable[[int, BaseException], None],
) -> Update:
    """Attempts ``first``, ``first + 1``… of ``step`` until one succeeds, a failure is not
    transient, or ``policy.attempts`` are used; the last failure is raised."""
    attempt = first
    if attempt > policy.attempts:
        sc.attempt = attempt - 1
        raise AttemptsExhausted(
            f"step {step.id!r} used its {policy.attempts} attempts "
            "(the last one was cut short when its process stopped)"
        )
    while True:
        if attempt > 1 or not step.idempotent:
            await mark(attempt)
        with retry_budget(policy.attempts - attempt) as budget:
            try:
                return await _once(step, sc, attempt)
            except Exception as exc:
                attempt += budget.spent  # the step's clients retried: those were attempts too
                sc.attempt = attempt
                if attempt >= policy.attempts or not transient(exc):
                    raise
                on_retry(attempt + 1, exc)
        await asyncio.sleep(_backoff(policy, attempt))
        attempt += 1


def _backoff(policy: RetryPolicy, attempt: int) -> float:
    """Exponential backoff with jitter after ``attempt`` failed."""
    wait: float = min(policy.maximum, policy.initial * 2.0 ** (attempt - 1))
    return wait + random.uniform(0, policy.jitter)


async def _once(step: Step, sc: StepContext, attempt: int) -> Update:
    sc.attempt = attempt
    sc.compensations.clear()
    try:
        return await _call(step, sc)
    except Exception as exc:
        if step.on_error is not None:
            handled: Update = await _maybe_await(step.on_error(exc, sc))
            if handled is not None:
                return handled
        raise


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def _call(step: Step, sc: StepContext) -> Update:
    if inspect.iscoroutinefunction(step.fn):
        work: Awaitable[Any] = step.fn(sc)
    else:
        work = asyncio.to_thread(step.fn, sc)
    if step.timeout is None and step.idle_timeout is None:  # no watchdog needed
        result: Update = await _maybe_await(await work)
        return result
    task = asyncio.ensure_future(work)
    deadline = None if step.timeout is None else time.monotonic() + step.timeout
    sc.heartbeat()
    try:
        while True:
            waits = [1.0]
            if deadline is not None:
                waits.append(deadline - time.monotonic())
            if step.idle_timeout is not None:
                waits.append(sc.last_heartbeat + step.idle_timeout - time.monotonic())
            done, _ = await asyncio.wait({task}, timeout=max(0.0, min(waits)))
            if done:
                finished: Update = await _maybe_await(task.result())
                return finished
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise StepTimeout(f"step {step.id!r} timed out after {step.timeout}s")
            if step.idle_timeout is not None and now - sc.last_heartbeat >= step.idle_timeout:
                raise StepTimeout(f"step {step.id!r} sent no heartbeat for {step.idle_timeout}s")
    finally:
        if not task.done():
            task.cancel()
