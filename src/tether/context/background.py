"""Compression in the background, between model calls.

``start()`` snapshots the window (items are immutable, so a snapshot is a tuple) and
computes the compressed items in a task; the agent keeps adding messages meanwhile.
``apply_pending()``, called before building the next prompt, swaps the result in and
re-appends everything added since the snapshot. If an item of the snapshot was replaced
or removed in between, the result is stale and is discarded (logged), never merged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tether.context.artifacts import ArtifactStore, archive_items
from tether.context.compress import CompressionLevel, CompressionResult, compress_async
from tether.context.items import ContextItem, ItemCounter
from tether.context.summarizer import AsyncSummarizer, Summarizer
from tether.context.window import ContextWindow

if TYPE_CHECKING:
    import asyncio

logger = logging.getLogger(__name__)

__all__ = ["BackgroundCompressor"]


class BackgroundCompressor:
    """One pending compression at a time for one window."""

    def __init__(
        self,
        window: ContextWindow,
        *,
        summarizer: Summarizer | AsyncSummarizer | None = None,
        archive: ArtifactStore | None = None,
    ) -> None:
        self.window = window
        self.summarizer = summarizer
        self.archive = archive
        self._task: asyncio.Task[CompressionResult] | None = None
        self._snapshot: tuple[ContextItem, ...] = ()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def ready(self) -> bool:
        return self._task is not None and self._task.done()

    def start(self, level: CompressionLevel = "standard") -> bool:
        """Begin compressing a snapshot; False if one is already pending."""
        import asyncio  # lazy: the rest of tether.context never needs an event loop

        if self._task is not None:
            return False
        self._snapshot = self.window.snapshot()
        archive_id = archive_items(self.archive, self._snapshot) if self.archive else None
        # a private counter: the task must not mutate the window's cache concurrently
        counter = ItemCounter(self.window.tokenizer, self.window.counter.fmt)
        self._task = asyncio.create_task(
            compress_async(
                self._snapshot,
                level,
                counter=counter,
                summarizer=self.summarizer,
                archive_id=archive_id,
            )
        )
        return True

    async def wait(self) -> CompressionResult | None:
        """Wait for the pending compression (without applying it)."""
        return None if self._task is None else await self._task

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._task = None
        self._snapshot = ()

    def apply_pending(self) -> CompressionResult | None:
        """Apply a finished compression; ``None`` if none is ready or it went stale."""
        task = self._task
        if task is None or not task.done():
            return None
        snapshot, self._task, self._snapshot = self._snapshot, None, ()
        if task.cancelled():
            return None
        error = task.exception()
        if error is not None:
            logger.warning("background compression failed: %r", error)
            return None
        result = task.result()
        in_snapshot = {item.id for item in snapshot}
        if any(self.window.get(item.id) is not item for item in snapshot):
            logger.info("background compression discarded: the window changed underneath it")
            return None
        added = [item for item in self.window.items() if item.id not in in_snapshot]
        produced = {item.id for item in result.items}
        self.window.replace_all([*result.items, *(i for i in added if i.id not in produced)])
        return result
