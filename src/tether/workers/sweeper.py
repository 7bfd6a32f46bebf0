"""The sweeper: finds runs that should be executing but have no message, and enqueues them.

Broker redelivery covers a worker that dies holding a message (RabbitMQ redelivers at
once when the connection drops). It does not cover a message that is gone: purged,
lost with a broker's disk, never sent because the broker was down at submit time, or
parked on a Redis broker until its visibility timeout (which tether sets far above any
step, so a long step never runs twice). The store knows every run, so one process at a
time (under a lock held in the broker) looks for runs of its queue that are

* PENDING (submitted, never started) and not changed for ``grace`` seconds,
* RUNNING with a dead lease (its holder's process is gone, or stopped renewing it),
* INTERRUPTED (stopped by a shutdown whose message was lost),

and sends each one message. That message may duplicate one still in flight; the lease
decides, so the duplicate is dropped by whichever worker gets it second. Paused and
failed runs wait for a person and are never swept. While messages wait in the queue the
sweeper does nothing: the workers are behind, not missing messages.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
import threading
import time
import uuid
from typing import Any

from tether.errors import CheckpointCorrupt
from tether.state import RunStatus
from tether.state.reserved import runtime_get
from tether.stores.base import CheckpointStore
from tether.workers.dispatch import Dispatcher
from tether.workers.execute import holder_gone
from tether.workers.registry import QUEUE_KEY

__all__ = ["BrokerLock", "Sweeper"]

logger = logging.getLogger(__name__)

SWEPT = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.INTERRUPTED)


class BrokerLock:
    """One holder at a time across the fleet, kept in the broker itself.

    RabbitMQ: an exclusive queue (``tether.sweeper.QUEUE``), which exists only while the
    connection that declared it is open, so a holder that dies releases it at once. The
    connection asks for AMQP heartbeats of about ``ttl`` seconds and shows traffic at
    every sweep, so a holder that is alive but stopped (SIGSTOP, a partition) loses the
    lock too once the broker misses it: without that, a stopped holder would keep the
    fleet's only sweeper, and its own runs, parked.
    Redis: a key set with NX and a time to live, renewed at every sweep.
    """

    def __init__(self, broker_url: str, name: str, *, ttl: float) -> None:
        self.url = broker_url
        self.name = name
        self.ttl = ttl
        self.token = uuid.uuid4().hex
        self._conn: Any = None
        self._redis: Any = None

    def acquire(self) -> bool:
        """Take or keep the lock; False when another process holds it."""
        if self.url.startswith(("redis://", "rediss://")):
            return self._redis_acquire()
        return self._amqp_acquire()

    def release(self) -> None:
        try:
            if self._redis is not None:
                script = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end"
                self._redis.eval(script, 1, self.name, self.token)
                self._redis.close()
            if self._conn is not None:
                self._conn.release()
        except Exception:  # releasing on the way out: the lock lapses anyway
            logger.debug("sweeper lock release failed", exc_info=True)
        self._conn = self._redis = None

    def _redis_acquire(self) -> bool:
        if self._redis is None:
            import redis

            self._redis = redis.Redis.from_url(self.url)
        ms = int(self.ttl * 1000)
        script = (
            "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) "
            "elseif redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 else return 0 end"
        )
        return bool(self._redis.eval(script, 1, self.name, self.token, ms))

    def _amqp_acquire(self) -> bool:
        import kombu

        if self._conn is not None:
            try:
                self._conn.default_channel.queue_declare(queue=self.name, passive=True)
                return True  # still ours: the queue lives as long as our connection
            except Exception:
                self.release()
        beat = max(2, math.ceil(self.ttl))  # the broker drops a holder silent this long
        conn: Any = kombu.Connection(self.url, heartbeat=beat, connect_timeout=5)  # type: ignore[attr-defined,no-untyped-call]
        try:
            conn.default_channel.queue_declare(queue=self.name, exclusive=True, auto_delete=True)
        except Exception:  # RESOURCE_LOCKED: another connection holds it
            conn.release()
            return False
        self._conn = conn
        return True


class Sweeper:
    """Re-enqueues the runs of one queue that lost their message (see the module)."""

    def __init__(
        self,
        store: CheckpointStore,
        dispatcher: Dispatcher,
        *,
        interval: float = 10.0,
        grace: float = 10.0,
        limit: int = 10_000,
    ) -> None:
        self.store = store
        self.dispatcher = dispatcher
        self.queue = dispatcher.queue
        self.interval = interval
        self.grace = grace
        self.limit = limit
        self._sent: dict[str, float] = {}
        """When this sweeper last enqueued each run: not again before ``grace`` + ``interval``."""

    async def sweep(self) -> list[str]:
        """One pass; returns the run ids enqueued."""
        if await asyncio.to_thread(self.dispatcher.waiting):
            return []
        now = time.time()
        cutoff = dt.datetime.fromtimestamp(now - self.grace, tz=dt.UTC)
        again = now - (self.grace + self.interval)
        self._sent = {k: t for k, t in self._sent.items() if t > again}
        sent: list[str] = []
        for status in SWEPT:
            for info in await self._runs(status):
                updated = (
                    info.updated_at if info.updated_at.tzinfo else info.updated_at.replace(tzinfo=dt.UTC)
                )
                if info.run_id in self._sent or (status is not RunStatus.RUNNING and updated > cutoff):
                    continue
                if status is RunStatus.RUNNING and not info.fence:
                    continue  # never leased: not run by a runner (a LangGraph thread stays RUNNING)
                try:
                    cp = await self.store.load(info.run_id)
                except CheckpointCorrupt as exc:  # unreadable here: not a run this fleet can execute
                    logger.debug("sweeper: skipped run %s: %s", info.run_id, exc)
                    continue
                if cp is None or cp.state.get(QUEUE_KEY) != self.queue:
                    continue  # not a run of this queue (a CLI run, another fleet)
                if status is RunStatus.RUNNING and not holder_gone(runtime_get(cp.state, "lease"), info):
                    continue
                await self.dispatcher.enqueue(info.run_id)
                logger.warning("sweeper: run %s (%s) had no message; enqueued again", info.run_id, status)
                self._sent[info.run_id] = now
                sent.append(info.run_id)
        return sent

    async def _runs(self, status: RunStatus) -> list[Any]:
        found: list[Any] = []
        page = 500
        while len(found) < self.limit:
            batch = await self.store.list_runs(status=status, limit=page, offset=len(found))
            found.extend(batch)
            if len(batch) < page:
                break
        return found


class SweeperThread:
    """Runs a sweeper every ``interval`` seconds in a thread of a worker process, only
    while this process holds the fleet's sweeper lock."""

    def __init__(
        self, store_url: str, store_options: dict[str, Any], dispatcher: Dispatcher, **kw: Any
    ) -> None:
        self.store_url = store_url
        self.store_options = store_options
        self.dispatcher = dispatcher
        self.kw = kw
        self.interval = float(kw.get("interval", 10.0))
        self.lock = BrokerLock(
            str(dispatcher.app.conf.broker_url), f"tether.sweeper.{dispatcher.queue}", ttl=3 * self.interval
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="tether-sweeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.lock.release()

    def _main(self) -> None:
        asyncio.run(self._loop())

    async def _loop(self) -> None:
        from tether.stores import open_store

        while not self._stop.is_set():  # a store away when the worker starts: not the end
            try:
                async with open_store(self.store_url, **self.store_options) as store:
                    await self._sweeps(Sweeper(store, self.dispatcher, **self.kw))
                return
            except Exception as exc:
                logger.warning(
                    "sweeper: cannot open the store (%s: %s); trying again in %.0fs",
                    type(exc).__name__,
                    exc,
                    self.interval,
                )
            await asyncio.to_thread(self._stop.wait, self.interval)

    async def _sweeps(self, sweeper: Sweeper) -> None:
        while not self._stop.is_set():
            try:
                if await asyncio.to_thread(self.lock.acquire):
                    await sweeper.sweep()
            except Exception:  # a broker or store away: try again next round
                logger.warning("sweeper: pass failed; trying again in %.0fs", self.interval, exc_info=True)
                self.lock.release()
            await asyncio.to_thread(self._stop.wait, self.interval)
