"""Events as an async stream: one publisher (a Runner's ``on_event``), many subscribers.

A server streams a run's events to every browser watching it, and a client that lost
its connection asks again from the last id it saw (server-sent events' ``Last-Event-ID``).
So every event gets an increasing id, and the latest ``history`` events are kept to
replay. Ids are microseconds since the epoch (bumped by one when two events share a
microsecond), so they keep increasing across restarts and an id a client kept from an
earlier process still says when it was: what is older than :attr:`EventBroadcaster.floor`
can be replayed from the store instead. A subscriber that cannot keep up (its queue is
full) is closed rather than allowed to slow the runner down: it reconnects with its
last id and replays.

Usage::

    events = EventBroadcaster()
    runner = Runner(workflow, store, on_event=events.publish)
    async for event_id, event in events.subscribe(run_id="r1"):
        ...
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from tether.runtime.events import Event

__all__ = ["EventBroadcaster", "SubscriberOverflow"]


class SubscriberOverflow(Exception):
    """The subscriber fell more than ``queue_size`` events behind and was closed."""


@dataclass(eq=False, slots=True)
class _Subscriber:
    run_id: str | None
    queue: asyncio.Queue[tuple[int, Event] | None]
    loop: asyncio.AbstractEventLoop
    overflowed: bool = False


class EventBroadcaster:
    """Fans events out to subscribers, each optionally filtered to one run.

    ``publish`` never blocks and never raises, so it is safe as a Runner's ``on_event``
    (it may also be called from another thread: delivery then goes through the
    subscriber's own event loop).
    """

    def __init__(self, *, history: int = 2_000, queue_size: int = 1_000) -> None:
        self._history: collections.deque[tuple[int, Event]] = collections.deque(maxlen=history)
        self._queue_size = queue_size
        self._subs: set[_Subscriber] = set()
        self._last_id = time.time_ns() // 1000
        self._started = self._last_id
        self._lock = threading.Lock()

    @property
    def last_id(self) -> int:
        return self._last_id

    @property
    def floor(self) -> int:
        """Events with ids above this one are all still in memory (the oldest kept id, or
        the broadcaster's start while nothing has been dropped yet)."""
        with self._lock:
            if len(self._history) == self._history.maxlen:
                return self._history[0][0]
            return self._started

    def publish(self, event: Event) -> int:
        """Record ``event`` and hand it to every matching subscriber; returns its id."""
        with self._lock:
            self._last_id = max(self._last_id + 1, time.time_ns() // 1000)
            item = (self._last_id, event)
            if event.kind != "model_delta":  # live only: a replay would crowd out the run's events
                self._history.append(item)
            subs = [s for s in self._subs if s.run_id is None or s.run_id == event.run_id]
        for sub in subs:
            self._deliver(sub, item)
        return item[0]

    __call__ = publish

    def _deliver(self, sub: _Subscriber, item: tuple[int, Event]) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is sub.loop:
            self._put(sub, item)
        elif not sub.loop.is_closed():
            sub.loop.call_soon_threadsafe(self._put, sub, item)

    def _put(self, sub: _Subscriber, item: tuple[int, Event]) -> None:
        if sub.overflowed:
            return
        if sub.queue.qsize() >= self._queue_size:
            sub.overflowed = True
            sub.queue.put_nowait(None)  # wakes the reader, which then raises
            return
        sub.queue.put_nowait(item)

    def replay(self, *, after: int = 0, run_id: str | None = None) -> list[tuple[int, Event]]:
        """Kept events with an id above ``after`` (for one run when ``run_id`` is given)."""
        with self._lock:
            return [(i, e) for i, e in self._history if i > after and (run_id is None or e.run_id == run_id)]

    async def subscribe(
        self, *, run_id: str | None = None, last_id: int | None = None
    ) -> AsyncIterator[tuple[int, Event]]:
        """Events from now on (after replaying those past ``last_id`` when given).

        Raises :class:`SubscriberOverflow` when the reader fell too far behind.
        """
        async with contextlib.aclosing(self.watch(run_id=run_id, last_id=last_id)) as items:
            async for item in items:
                if item is not None:
                    yield item

    async def watch(
        self, *, run_id: str | None = None, last_id: int | None = None, idle: float | None = None
    ) -> AsyncGenerator[tuple[int, Event] | None, None]:
        """:meth:`subscribe`, also yielding None after every ``idle`` seconds without an
        event (a server sends a keep-alive then, and notices a client that left)."""
        sub = _Subscriber(run_id, asyncio.Queue(), asyncio.get_running_loop())
        with self._lock:
            self._subs.add(sub)
            backlog = (
                []
                if last_id is None
                else [
                    (i, e) for i, e in self._history if i > last_id and (run_id is None or e.run_id == run_id)
                ]
            )
        seen = last_id or 0
        try:
            for item in backlog:
                seen = item[0]
                yield item
            while True:
                try:
                    got = await asyncio.wait_for(sub.queue.get(), idle)
                except TimeoutError:
                    yield None
                    continue
                if got is None:
                    raise SubscriberOverflow(f"subscriber fell {self._queue_size} events behind")
                if got[0] <= seen:
                    continue  # already replayed from the history
                seen = got[0]
                yield got
        finally:
            with self._lock:
                self._subs.discard(sub)

    @property
    def subscribers(self) -> int:
        return len(self._subs)
