"""The event broadcaster: fan-out, per-run filter, replay after an id, slow readers closed."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from tether.runtime import Event
from tether.runtime.stream import EventBroadcaster, SubscriberOverflow


def ev(kind: str, run_id: str = "r1") -> Event:
    return Event(kind=kind, run_id=run_id)


async def collect(it, n: int) -> list:
    out = []
    async with contextlib.aclosing(it):
        async for item in it:
            out.append(item)
            if len(out) == n:
                break
    return out


async def test_every_subscriber_gets_its_runs_events_in_order():
    """Two subscribers see all events; a run filter drops other runs'."""
    b = EventBroadcaster()
    all_events = asyncio.create_task(collect(b.subscribe(), 3))
    only_r2 = asyncio.create_task(collect(b.subscribe(run_id="r2"), 1))
    await asyncio.sleep(0)
    ids = [b.publish(ev("a")), b.publish(ev("b", "r2")), b.publish(ev("c"))]
    got = await asyncio.wait_for(all_events, 2)
    assert [(i, e.kind) for i, e in got] == list(zip(ids, "abc", strict=True))
    assert ids == sorted(set(ids))
    assert [e.kind for _, e in await asyncio.wait_for(only_r2, 2)] == ["b"]
    assert b.subscribers == 0


async def test_replay_after_last_id_then_live_without_duplicates():
    """last_id replays the kept events after it, then continues live, each id once."""
    b = EventBroadcaster(history=10)
    ids = [b.publish(ev(k)) for k in "abcd"]
    task = asyncio.create_task(collect(b.subscribe(last_id=ids[1]), 3))
    await asyncio.sleep(0)
    ids.append(b.publish(ev("e")))
    assert [(i, e.kind) for i, e in await asyncio.wait_for(task, 2)] == list(zip(ids[2:], "cde", strict=True))


async def test_ids_are_clock_based_so_they_keep_increasing_across_restarts():
    """A new broadcaster (a restarted server) never reuses an id an earlier one gave out;
    everything above its floor is in its memory."""
    import time

    first = EventBroadcaster(history=3)
    old = [first.publish(ev(k)) for k in "abcd"]
    assert first.floor == old[1]  # "a" was dropped
    time.sleep(0.001)
    second = EventBroadcaster(history=3)
    assert second.floor >= old[-1] and second.floor >= time.time_ns() // 1000 - 5_000_000
    assert second.publish(ev("e")) > old[-1]


async def test_a_slow_subscriber_is_closed_not_waited_for():
    """Past queue_size unread events the reader gets SubscriberOverflow; publish never blocks."""
    b = EventBroadcaster(queue_size=3)
    it = b.subscribe().__aiter__()
    first = asyncio.ensure_future(it.__anext__())
    await asyncio.sleep(0)
    for k in "abcdefg":
        b.publish(ev(k))
    assert (await first)[1].kind == "a"
    with pytest.raises(SubscriberOverflow):
        while True:
            await it.__anext__()
