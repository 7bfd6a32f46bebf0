"""A change feed: which runs changed in the store, whoever changed them.

A server shows runs that other processes execute (the CLI, Celery workers, another
server): it cannot hear their runners' events, so it listens to the store instead::

    async with open_feed(store) as feed:
        async for change in feed:        # Change(run_id, version)
            info = await store.get_run(change.run_id)   # re-read: the change says only which

How each store tells:

- PostgreSQL: ``LISTEN tether_runs``; a trigger on ``tether_runs`` (installed by the
  feed itself, once, idempotently) sends ``NOTIFY`` on every new version and status
  change, delivered when the writer's transaction commits. It does so only while some
  feed listens (listeners hold a shared advisory lock the trigger probes), because a
  transaction that notifies makes every other committing one wait for its log flush.
- Redis: the write and status scripts ``PUBLISH`` on ``<prefix>changes``.
- SQLite, MySQL/MariaDB, tiered, memory: polling. One small query every ``interval``
  seconds (default 0.25) reads the runs updated lately (``list_runs``, which walks the
  ``updated_at`` index); a run whose version, status or update time differs from what
  the feed last saw is a change.

Every one of these loses what happens while the listener is disconnected (NOTIFY and
PUBLISH are not queued for a listener that is gone). So a change carries only the run
id and its version, never what changed, and after every reconnect the feed reads the
runs updated since it last heard from the store and yields those that moved meanwhile:
a consumer that re-reads the run on each change misses nothing. The feed reconnects by
itself (with a backoff up to 5 s) and never raises because the store went away.

Not reported: deleted runs, and expired runs vanishing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from tether.errors import StoreError
from tether.stores.base import CheckpointStore

__all__ = ["CHANNEL", "Change", "Feed", "open_feed"]

logger = logging.getLogger(__name__)

CHANNEL = "tether_runs"
"""The PostgreSQL notification channel (``LISTEN tether_runs``)."""

POLL_INTERVAL = 0.25
"""Seconds between two polls of a store that cannot notify (SQLite, MySQL, tiered)."""

SLACK = 10.0
"""How far back (seconds) a poll or a resync looks before the newest update it saw: a
write's update time is taken before it commits, so a slow commit can become visible
after a later one; and writers' clocks on other hosts may lag a little."""

FIRST_PAGE = 10
"""Runs a poll reads first: a quiet store answers a poll with these few rows."""

PAGE = 100
"""Runs read per further query of a poll (read only while every run read so far is newer
than the poll's horizon)."""

KEEPALIVE = 5.0
"""Seconds without a notification after which a listening feed checks its connection."""

MAX_BACKOFF = 5.0
"""The longest wait (seconds) between two attempts to reconnect."""

CONNECT_WAIT = 5.0
"""Seconds :func:`open_feed` waits for the first connection before returning anyway."""


@dataclass(frozen=True, slots=True)
class Change:
    """A run reached ``version`` (or changed status at it): re-read it to see how."""

    run_id: str
    version: int


class Feed:
    """Changes of one store, as an async iterator; built by :func:`open_feed`.

    ``kind`` says how it learns of them (``"listen"``, ``"pubsub"`` or ``"poll"``),
    ``interval`` how often it polls (the time it waits between two keep-alive checks
    when it listens), ``reconnects`` how many times it lost the store and came back.
    """

    def __init__(self, store: CheckpointStore, *, interval: float = POLL_INTERVAL) -> None:
        self.store = store
        self.interval = interval
        self.kind = "poll"
        self.reconnects = 0
        self.listener_pid: int | None = None
        """The PostgreSQL backend pid of the listening connection (tests terminate it)."""
        self.connected = asyncio.Event()
        """Set once the feed first read the store (and, listening, subscribed)."""
        self._opened = time.time()
        self._seen: dict[str, tuple[int, str, float]] = {}
        self._newest = self._opened
        self._pending: dict[str, int] = {}
        """Changes not yet taken, one per run (a run that moves again before its consumer
        took it is reported once, at its newest version): bounded by the runs, not by
        the writes."""
        self._ready = asyncio.Event()

    def __aiter__(self) -> AsyncIterator[Change]:
        return self._changes()

    async def _changes(self) -> AsyncIterator[Change]:
        while True:
            await self._ready.wait()
            run_id = next(iter(self._pending))
            version = self._pending.pop(run_id)
            if not self._pending:
                self._ready.clear()
            yield Change(run_id, version)

    @property
    def pending(self) -> int:
        """Changes waiting for the consumer."""
        return len(self._pending)

    def _put(self, run_id: str, version: int) -> None:
        self._pending[run_id] = max(version, self._pending.get(run_id, 0))
        self._ready.set()

    # -- what every kind shares: the store read after a (re)connect, and polls -----------
    async def scan(self) -> int:
        """Read the runs updated since the feed last heard from the store (minus
        :data:`SLACK`) and queue those that moved; returns how many it queued. The first
        read is a baseline: it queues only runs updated since the feed was opened."""
        first = not self.connected.is_set()
        horizon = self._newest - SLACK
        found, offset, size = 0, 0, FIRST_PAGE
        while True:
            page = await self.store.list_runs(limit=size, offset=offset)
            older = False
            for info in page:
                at = info.updated_at.timestamp()
                if at < horizon:
                    older = True
                    break
                key = (info.version, str(info.status), at)
                if self._seen.get(info.run_id) != key:
                    self._seen[info.run_id] = key
                    if not first or at >= self._opened:
                        self._put(info.run_id, info.version)
                        found += 1
                self._newest = max(self._newest, at)
            if older or len(page) < size:
                break
            offset, size = offset + size, PAGE
        self.connected.set()
        cut = self._newest - SLACK
        for run_id in [r for r, k in self._seen.items() if k[2] < cut]:
            del self._seen[run_id]
        return found

    def notified(self, run_id: str, version: int) -> None:
        """A notification arrived: queue it for the consumer."""
        self._put(run_id, version)

    async def _poll(self) -> None:
        failing = False
        while True:
            try:
                await self.scan()
                failing = False
            except StoreError as exc:  # the store's own connection comes back by itself
                if not failing:
                    logger.warning("change feed: polling failed, trying again: %s", exc)
                    self.reconnects += 1
                failing = True
                await asyncio.sleep(min(MAX_BACKOFF, self.interval * 4))
            await asyncio.sleep(self.interval)

    async def _listen_loop(self, connect: Any) -> None:
        """Keep a listening connection: ``connect()`` is an async context manager that
        subscribes and yields an async iterator of ``(run_id, version)``, raising when the
        connection is lost. After each (re)connection the feed resyncs from the store."""
        backoff = 0.1
        while True:
            try:
                async with connect() as notes:
                    await self.scan()
                    backoff = 0.1
                    async for run_id, version in notes:
                        self.notified(run_id, version)
            except _CannotListen as exc:
                logger.warning("change feed: %s; polling every %g s instead", exc, POLL_INTERVAL)
                self.kind, self.interval = "poll", POLL_INTERVAL
                await self._poll()
            except (StoreError, OSError, ConnectionError, _DriverError) as exc:
                logger.warning("change feed: lost the %s connection, reconnecting: %s", self.kind, exc)
            self.reconnects += 1
            await asyncio.sleep(backoff)
            backoff = min(MAX_BACKOFF, backoff * 2)


class _DriverError(Exception):
    """A driver's error, translated (psycopg's and redis-py's are caught where raised)."""


class _CannotListen(Exception):
    """The database refuses what listening needs (creating the trigger): poll instead."""


def _parse(payload: str | bytes) -> tuple[str, int] | None:
    text = payload.decode() if isinstance(payload, bytes) else payload
    version, sep, run_id = text.partition(":")
    if not sep or not version.isdigit():
        return None
    return run_id, int(version)


# -- PostgreSQL ------------------------------------------------------------------------
LISTENING_LOCK = 727368657203
"""The advisory lock every listening connection holds (shared) for as long as it listens:
the trigger notifies only when it cannot take it exclusively."""

_PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION tether_runs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF pg_try_advisory_lock({LISTENING_LOCK}) THEN
    PERFORM pg_advisory_unlock({LISTENING_LOCK});
  ELSE
    PERFORM pg_notify('{CHANNEL}', NEW.version::text || ':' || NEW.run_id);
  END IF;
  RETURN NULL;
END $$"""
_PG_TRIGGER = (
    "CREATE TRIGGER tether_runs_notify AFTER INSERT OR UPDATE OF version, status ON tether_runs "
    "FOR EACH ROW EXECUTE FUNCTION tether_runs_notify()"
)
_PG_HAS_TRIGGER = (
    "SELECT 1 FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid "
    "WHERE t.tgname = 'tether_runs_notify' AND t.tgrelid = to_regclass('tether_runs') "
    f"AND p.prosrc LIKE '%{LISTENING_LOCK}%'"
)
_PG_TRIGGER_EXISTS = (
    "SELECT 1 FROM pg_trigger WHERE tgname = 'tether_runs_notify' AND tgrelid = to_regclass('tether_runs')"
)
_PG_IN_FLIGHT = (
    "SELECT coalesce(array_agg(x::text), '{}') FROM unnest(%s::xid8[]) x "
    "WHERE pg_xact_status(x) = 'in progress'"
)
SETTLE_POLL = 0.01
"""Seconds before the first check, after subscribing, of whether the writers that were in
flight meanwhile have finished (doubled at each check, up to a second)."""


async def install_pg_trigger(conn: Any) -> None:
    """The trigger that notifies ``tether_runs`` listeners, created once (concurrent
    setups are serialised by an advisory lock; an up-to-date trigger is left alone, one
    from an older version that notified on every commit is replaced)."""
    cur = await conn.execute("SELECT to_regclass('tether_runs')")
    row = await cur.fetchone()
    if row is None or row[0] is None:
        raise StoreError("postgresql: no tether_runs table here: set the store up first (store.setup())")
    if await (await conn.execute(_PG_HAS_TRIGGER)).fetchone():
        return
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(727368657202)")
        if await (await conn.execute(_PG_HAS_TRIGGER)).fetchone():
            return
        await conn.execute(_PG_FUNCTION)
        if not await (await conn.execute(_PG_TRIGGER_EXISTS)).fetchone():
            await conn.execute(_PG_TRIGGER)


_PG_NOW = "SELECT pg_current_snapshot()::text, pg_current_xact_id()::text"


def _in_flight(snapshot: str, assigned: str) -> list[str]:
    """The ids of the transactions that ``snapshot`` (``xmin:xmax:xip,…``) holds in
    progress and that began before transaction ``assigned``."""
    _, xmax, listed = snapshot.split(":")
    return [x for x in listed.split(",") if x] + [str(x) for x in range(int(xmax), int(assigned))]


async def _pg_value(conn: Any, query: str, *params: object) -> Any:
    row = await (await conn.execute(query, params or None)).fetchone()
    return row[0]


def _pg_connect(conninfo: str, feed: Feed) -> Any:
    import psycopg

    @contextlib.asynccontextmanager
    async def connect() -> AsyncIterator[AsyncIterator[tuple[str, int]]]:
        try:
            conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True, connect_timeout=5)
        except psycopg.Error as exc:
            raise _DriverError(str(exc)) from exc
        try:
            try:
                await install_pg_trigger(conn)
            except psycopg.errors.InsufficientPrivilege as exc:
                raise _CannotListen(f"no right to create the notify trigger on tether_runs: {exc}") from exc
            await conn.execute(f"SELECT pg_advisory_lock_shared({LISTENING_LOCK})")
            await conn.execute(f"LISTEN {CHANNEL}")
            feed.listener_pid = conn.info.backend_pid
            # A writer whose trigger looked before the lock above found nobody listening
            # and did not notify; if it had not committed yet, the feed's first read
            # misses it too. Such writers were in flight now: read again once they end.
            # Those are the transactions a snapshot taken now holds in progress (listed,
            # or from its xmax on) with an id below one assigned after it.
            ((snapshot, assigned),) = await (await conn.execute(_PG_NOW)).fetchall()
            in_flight = _in_flight(snapshot, assigned)

            async def notes() -> AsyncIterator[tuple[str, int]]:
                nonlocal in_flight
                wait = SETTLE_POLL
                while in_flight:
                    in_flight = await _pg_value(conn, _PG_IN_FLIGHT, in_flight)
                    if not in_flight:
                        await feed.scan()
                        break
                    wait = min(2 * wait, 1.0)  # a writer idle in its transaction may take long
                    async for note in conn.notifies(timeout=wait):
                        parsed = _parse(note.payload)
                        if parsed is not None:
                            yield parsed
                while True:
                    async for note in conn.notifies(timeout=feed.interval):
                        parsed = _parse(note.payload)
                        if parsed is not None:
                            yield parsed
                    await conn.execute("SELECT 1")  # quiet: is the connection still there?

            yield _translated(notes(), psycopg.Error)
        except psycopg.Error as exc:
            raise _DriverError(str(exc)) from exc
        finally:
            with contextlib.suppress(Exception):
                await conn.close()

    return connect


async def _translated(notes: AsyncIterator[tuple[str, int]], errors: Any) -> AsyncIterator[tuple[str, int]]:
    try:
        async for note in notes:
            yield note
    except errors as exc:
        raise _DriverError(str(exc)) from exc


# -- Redis -------------------------------------------------------------------------------
def redis_channel(prefix: str) -> str:
    """The channel a Redis store's scripts publish its changes on."""
    return f"{prefix}changes"


class _Reconnected:
    """Told by redis-py when the pub/sub connection connects again (the client retries
    silently, and re-subscribes, but what was published meanwhile is lost)."""

    def __init__(self) -> None:
        self.happened = False

    async def __call__(self, connection: Any) -> None:
        self.happened = True


def _redis_connect(store: CheckpointStore, feed: Feed) -> Any:
    from redis import exceptions as rexc

    client: Any = store.client  # type: ignore[attr-defined]
    channel = redis_channel(str(store.prefix))  # type: ignore[attr-defined]

    @contextlib.asynccontextmanager
    async def connect() -> AsyncIterator[AsyncIterator[tuple[str, int]]]:
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        seen = _Reconnected()
        try:
            await pubsub.subscribe(channel)
            pubsub.connection.register_connect_callback(seen.__call__)

            async def notes() -> AsyncIterator[tuple[str, int]]:
                heard = time.monotonic()
                while True:
                    message = await pubsub.get_message(timeout=min(1.0, feed.interval))
                    if seen.happened:
                        raise _DriverError("the pub/sub connection was re-established")
                    if message is None or message.get("type") != "message":
                        if time.monotonic() - heard >= feed.interval:
                            heard = time.monotonic()
                            await pubsub.ping()  # quiet: is the connection still there?
                        continue
                    heard = time.monotonic()
                    parsed = _parse(message["data"])
                    if parsed is not None:
                        yield parsed

            yield _translated(notes(), rexc.RedisError)
        except rexc.RedisError as exc:
            raise _DriverError(str(exc)) from exc
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    return connect


# -- choosing ----------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def open_feed(store: CheckpointStore, *, interval: float | None = None) -> AsyncIterator[Feed]:
    """Changes of ``store``'s runs, from now on, for as long as the block runs.

    ``interval``: seconds between polls (stores that cannot notify), or between checks
    of a quiet listening connection (default :data:`POLL_INTERVAL`, :data:`KEEPALIVE`).
    The store must be set up; the feed opens its own connection to PostgreSQL and Redis
    and uses the store's for polls.
    """
    scheme = getattr(store, "scheme", "")
    feed = Feed(store, interval=interval or POLL_INTERVAL)
    conninfo = str(getattr(store, "conninfo", "") or "")
    if scheme == "postgresql" and conninfo:
        feed.kind, feed.interval = "listen", interval or KEEPALIVE
        job = feed._listen_loop(_pg_connect(conninfo, feed))
    elif scheme == "redis":
        feed.kind, feed.interval = "pubsub", interval or KEEPALIVE
        job = feed._listen_loop(_redis_connect(store, feed))
    else:
        job = feed._poll()
    task = asyncio.create_task(job, name=f"tether change feed ({feed.kind})")
    try:
        with contextlib.suppress(TimeoutError):  # not reachable yet: it keeps trying
            await asyncio.wait_for(feed.connected.wait(), CONNECT_WAIT)
        yield feed
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
