"""Blocking twins of the stores: the same backend code, run in the caller's thread.

A store is async and lives on one event loop; a sync caller (a LangGraph sync graph, a
script) that hands each call to that loop's thread pays two thread switches per call, and
SQLite two more (the loop hands its transaction to the DB thread). For the calls that
decide a sync caller's speed, :func:`blocking_twin` opens a second store on the same
database whose driver is a synchronous one, wrapped so that its awaits never suspend: every
coroutine of the twin runs to completion in one step (:func:`run_inline`), in the thread
that calls it, with the backend's own code, checks and errors.

Each backend offers its twin through its own public constructor, and names it in a
``blocking_from_url`` classmethod: SQLite ``caller_thread=True`` (``sqlite3`` on a
connection of its own), PostgreSQL ``connect=`` and ``lock=`` (psycopg's sync connection
and a thread lock), Redis a sync client (redis-py's, behind ``SyncRedisClient``) with
``owns_client=True``. This module keeps what they share: :class:`Ready`,
:func:`run_inline`, :class:`BlockingLock` and :func:`blocking_twin`.

The twin never retries (``RetryPolicy(attempts=1)``): a caller that gets
:class:`StoreUnavailable` from it redoes the call on the async store, which retries (a
commit keeps its write id, so a write that did land is not stored twice). Backends with
no synchronous driver (MySQL's asyncmy, tiered, memory) have no twin.
"""

from __future__ import annotations

import threading
from collections.abc import Coroutine, Generator
from typing import TYPE_CHECKING, Any, TypeVar

from tether.stores._retry import RetryPolicy
from tether.stores.base import split_store_options

if TYPE_CHECKING:
    from tether.stores.base import CheckpointStore

__all__ = ["BlockingLock", "Ready", "blocking_twin", "run_inline"]

T = TypeVar("T")


class Ready:
    """An awaitable that is already done: ``await Ready(v)`` is ``v``, without suspending."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, Any]:
        return self.value
        yield  # pragma: no cover - makes this a generator that returns at once


def run_inline(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine whose awaits never suspend to its end, in this thread."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a blocking store call awaited something that suspends")


class BlockingLock:
    """A thread lock used as the asyncio lock a backend takes (``async with``, ``locked``):
    acquiring blocks the calling thread instead of suspending. ``lock``: a lock to use
    (an ``RLock`` for a backend that takes it around calls that take it again)."""

    __slots__ = ("_lock", "__weakref__")

    def __init__(self, lock: Any = None) -> None:
        self._lock = threading.Lock() if lock is None else lock

    def locked(self) -> bool:
        return bool(self._lock.locked())

    async def __aenter__(self) -> None:
        self._lock.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self._lock.release()


def blocking_twin(store: CheckpointStore, url: str, options: dict[str, Any]) -> CheckpointStore | None:
    """A store on the database ``store`` was opened on (from ``url`` and ``options``, as
    ``open_store`` was given them) whose coroutines never suspend, or None when its backend
    has no synchronous driver. Its methods run with :func:`run_inline`, from any thread
    (one call at a time per connection); close it with ``run_inline(twin.aclose())``.

    Each backend builds its own twin, through its public constructor, in a classmethod
    ``blocking_from_url(url, **options)`` (None: not for these options)."""
    backend_options = dict(options)
    split_store_options(backend_options)
    make = getattr(type(store).backend_class, "blocking_from_url", None)
    if make is None:
        return None
    try:
        backend = make(url, **backend_options)
    except ImportError:  # (no synchronous driver installed)
        return None
    if backend is None:
        return None
    twin = type(store).wrap(
        backend,
        codec=store.codec,
        expiry=store.expiry,
        compaction=store.compaction,
        retry=RetryPolicy(attempts=1),
    )
    try:
        # connect now, as the store's setup did, with a read: a new database session's first
        # chain read loads the tables' catalog entries and plans its statement
        run_inline(twin.load("tether-connect"))
    except BaseException:
        run_inline(twin.aclose())
        raise
    return twin
