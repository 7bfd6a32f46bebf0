"""What the saver knows of one namespace run (``Space``), and the small rules the jobs share."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from tether.integrations.langgraph._layout import REF
from tether.state import ExecutionContext

__all__ = [
    "ATTEMPTS",
    "Batch",
    "FRESH",
    "LENT",
    "PLAIN",
    "PRIVATE",
    "Space",
    "as_ref",
    "running_loop",
    "write_key",
]

ATTEMPTS = 3
DROP_WRITES = 32
DROP_WRITE_BYTES = 32 * 1024
RECENT = 16


Batch = tuple[str, dict[str, Any], bool]
"""Writes of one ``put_writes`` call: checkpoint id, entries by key, all special."""

PLAIN: set[str] = set()
"""``dated`` for ``merge_trusted``: the saver's own values (bytes, str, int, None, lists
and dicts of them) hold no datetime and need no validating walk."""


def running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def as_ref(entry: list[Any], refs: Mapping[tuple[str, bytes], tuple[str, int]]) -> list[Any]:
    hit = refs.get((entry[3], entry[5]))
    if hit is None or hit[0] != entry[4]:
        return entry
    return [*entry[:4], REF, hit[1], entry[6]]


def write_key(entry: list[Any]) -> str:
    return f"{entry[0]}|{entry[1]}|{entry[2]}"


FRESH, PRIVATE, LENT = 0, 1, 2


class Space:
    """What this process knows of one namespace run: its latest context, decoded."""

    __slots__ = (
        "buffer",
        "ctx",
        "given",
        "key",
        "ns",
        "owner",
        "pos",
        "recent",
        "since",
        "snaps",
        "thread_id",
        "values",
        "version",
        "view",
        "__weakref__",
    )

    def __init__(self, key: str, thread_id: str, ns: str) -> None:
        self.key, self.thread_id, self.ns = key, thread_id, ns
        self.ctx: ExecutionContext | None = None
        """The latest state, ready to commit on (loaded when a write needs it)."""
        self.view: Any = None
        """The latest state for reading: ``ctx``, or a plain dict from a lean load."""
        self.version = 0
        self.values: dict[str, Any] = {}
        """Channel values at the context's version: decoded, or copies of what puts were
        handed (the graph and its caller keep the originals, and may edit them)."""
        self.snaps: dict[str, list[Any]] = {}
        """For list channels, the items as stored: a list of the saver's own, grown in place
        by the items each put appends."""
        self.owner = FRESH
        """Who may hold ``values``: nobody yet (FRESH, just decoded), nobody but the saver
        (PRIVATE), or a caller they were handed to as they are (LENT: they may have been
        edited since, so the next caller gets them decoded again from the stored bytes)."""
        self.given: dict[str, list[Any]] = {}
        """For list channels, the graph's items: those last handed out, or put. The next put
        of a graph that holds them extends them, which is an append; they are compared by
        identity only, never handed out."""
        self.pos: dict[str, int] = {}
        """Checkpoint id -> its (last) entry in ``ix``."""
        self.buffer: list[Batch] = []
        """Pending writes not stored yet (see ``PendingWrites.flush_delay``)."""
        self.since: float | None = None
        """When the oldest buffered batch was buffered (``time.monotonic``); None once a
        flush of them has been started."""
        self.recent: dict[tuple[str, bytes], tuple[str, int]] = {}
        """The chunks last appended to list channels, by channel and bytes: ``(type, index)``.
        A pending write with the same bytes is stored as a reference to its chunk."""

    def forget(self) -> None:
        self.ctx, self.view, self.version, self.values, self.snaps, self.pos = None, None, 0, {}, {}, {}
        self.recent, self.given, self.owner = {}, {}, FRESH
