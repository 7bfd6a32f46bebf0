"""Reactive recovery when a provider answers that the prompt is too long.

Our count can be wrong (an approximated tokenizer, tool schemas we do not see), so the
provider's refusal is the last trigger: compress harder, retry, and give up with
:class:`BudgetExceeded` after a bounded number of attempts rather than loop forever.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tether.context.artifacts import ArtifactStore
from tether.context.summarizer import Summarizer
from tether.context.window import ContextWindow
from tether.errors import BudgetExceeded, PromptTooLong

logger = logging.getLogger(__name__)

__all__ = ["call_with_recovery", "is_prompt_too_long", "reported_prompt_tokens"]

T = TypeVar("T")

_TOO_LONG = re.compile(
    r"(?i)prompt is too long|context_length_exceeded|maximum context length|"
    r"context window|too many (?:input )?tokens|reduce the length|input is too long|"
    r"request too large|exceeds? the (?:model'?s? )?(?:maximum|context)"
)
_COUNTS = (
    re.compile(r"(?i)prompt is too long:\s*(\d+)\s*tokens"),
    re.compile(r"(?i)resulted in\s*(\d+)\s*tokens"),
    re.compile(r"(?i)you requested\s*(\d+)\s*tokens"),
    re.compile(r"(?i)(\d+)\s*(?:input\s*)?tokens\s*>\s*\d+"),
)


def is_prompt_too_long(exc: BaseException) -> bool:
    """Whether an exception (of any SDK) says the prompt exceeded the context window."""
    if isinstance(exc, PromptTooLong):
        return True
    text = f"{type(exc).__name__}: {exc}"
    code = getattr(exc, "code", None)
    return code == "context_length_exceeded" or bool(_TOO_LONG.search(text))


def reported_prompt_tokens(exc: BaseException) -> int | None:
    """The prompt size the provider states in its refusal, when it states one."""
    reported = getattr(exc, "reported_tokens", None)
    if isinstance(reported, int):
        return reported
    text = str(exc)
    for pattern in _COUNTS:
        if match := pattern.search(text):
            return int(match.group(1))
    return None


async def call_with_recovery(
    window: ContextWindow,
    call: Callable[[ContextWindow], Awaitable[T]],
    *,
    max_attempts: int = 3,
    shrink: float = 0.8,
    summarizer: Summarizer | None = None,
    archive: ArtifactStore | None = None,
) -> T:
    """``await call(window)``; on "prompt too long", compress harder and call again.

    Each retry fits the window into ``shrink`` × the size that was refused (the provider's
    own number when it gives one, which also calibrates the window). Other exceptions
    pass through untouched. After ``max_attempts`` refusals: :class:`BudgetExceeded`.
    """
    last: BaseException | None = None
    for attempt in range(1, max_attempts + 1):
        try:
            return await call(window)
        except Exception as exc:
            if not is_prompt_too_long(exc):
                raise
            last = exc
            reported = reported_prompt_tokens(exc)
            if reported is not None:
                window.observe_provider_usage(reported)
            size = window.usage().tokens
            target = max(int(size * shrink**attempt / shrink), 1)
            logger.warning(
                "prompt too long (attempt %d/%d, %d tokens); fitting into %d",
                attempt,
                max_attempts,
                size,
                target,
            )
            if attempt == max_attempts:
                break
            window.fit(min(target, int(size * shrink)), summarizer=summarizer, archive=archive)
    raise BudgetExceeded(
        f"the provider refused the prompt as too long {max_attempts} times, even after "
        "compression; raise the budget or unpin content"
    ) from last
