"""Blocking twins of the stores: the same backend code, run in the caller's thread.

A store is async and lives on one event loop; a sync caller (a LangGraph sync graph, a
script) that hands each call to that loop's thread pays two thread switches per call, and
SQLite two more (the loop hands its transaction to the DB thread). For the calls that
decide a sync caller's speed, :func:`blocking_twin` opens a second store on the same
database whose driver is a synchronous one (``sqlite3`` on a connection of its own,
redis-py's and psycopg's sync clients) wrapped so that its awaits never suspend: every
coroutine of the twin runs to completion in one step (:func:`run_inline`), in the thread
that calls it, with the backend's own code, checks and errors.

The twin never retries (``RetryPolicy(attempts=1)``): a caller that gets
:class:`StoreUnavailable` from it redoes the call on the async store, which retries (a
commit keeps its write id, so a write that did land is not stored twice). Backends with
no synchronous driver (MySQL's asyncmy, tiered, memory) have no twin.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Coroutine, Generator, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tether.errors import TetherError
from tether.stores._retry import RetryPolicy
from tether.stores.base import CheckpointStore, split_store_options

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
    (one call at a time per connection); close it with ``run_inline(twin.aclose())``."""
    backend_options = dict(options)
    split_store_options(backend_options)
    scheme = url.partition("://")[0].lower()
    try:
        if scheme == "sqlite":
            backend: Any = _sqlite(url, backend_options)
        elif scheme in ("redis", "rediss"):
            backend = _redis(url, backend_options)
        elif scheme in ("postgresql", "postgres") and backend_options.get("conn") is None:
            backend = _postgres(url, backend_options)  # (not on a connection the caller gave)
        else:
            return None
    except ImportError:
        return None
    twin = type(store).wrap(
        backend,
        codec=store.codec,
        expiry=store.expiry,
        compaction=store.compaction,
        retry=RetryPolicy(attempts=1),
    )
    try:
        run_inline(twin.get_run("tether-connect"))  # connect now, as the store's setup did
    except BaseException:
        run_inline(twin.aclose())
        raise
    return twin


# == SQLite: its own connection, used in the caller's thread ==========================
def _sqlite(url: str, options: dict[str, Any]) -> Any:
    from tether.stores.sqlite import SqliteBackend

    class InlineSqliteBackend(SqliteBackend):
        """Statements run in the calling thread, on a connection of this twin's own. Calls
        from several threads take turns: every read and transaction holds ``_conn_lock``
        (the async backend lets small reads skip its lock, safe on one event loop only)."""

        _conn_lock: threading.RLock

        async def _query(
            self, sql: str, params: Sequence[Any] = (), *, run_id: str | None = None
        ) -> list[tuple[Any, ...]]:
            with self._conn_lock:
                return self._inline(lambda c: c.execute(sql, params).fetchall())

        def latest_chain_inline(self, run_id: str) -> list[tuple[int, bytes]] | None:
            with self._conn_lock:  # held: no other thread's transaction is open meanwhile
                return super().latest_chain_inline(run_id)

        async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
            if self._conn is None:
                self._conn = self._connect()
            try:
                return fn(self._conn)
            except TetherError:
                raise
            except sqlite3.IntegrityError:
                raise
            except sqlite3.Error as exc:
                raise self._translate(exc) from exc

        async def aclose(self) -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._pool.shutdown(wait=False)

    backend = InlineSqliteBackend.from_url(url, **options)
    assert isinstance(backend, InlineSqliteBackend)
    backend._conn_lock = threading.RLock()
    backend._lock = _HeldLock(backend._conn_lock)  # type: ignore[assignment]
    return backend


class _HeldLock(BlockingLock):
    """The SQLite twin's transaction lock: its connection lock (reentrant), which every call
    holds, so ``locked()`` never tells a read to wait for a transaction of another thread."""

    __slots__ = ()

    def locked(self) -> bool:
        return False


# == Redis: redis-py's sync client, behind the async client's interface ================
class _Held:
    """One connection of the sync pool kept by the twin for its hot calls (a script, a raw
    pipeline): taking a connection from redis-py's pool and giving it back (its liveness
    poll) cost more CPU than the round trip itself. A caller that finds it taken (another
    thread's call in progress) uses the pool as usual. Disconnected after a call that
    failed half-way; redis-py connects it again on its next send."""

    __slots__ = ("conn", "lock", "pid", "pool")

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.conn: Any = None
        self.lock = threading.Lock()
        self.pid = os.getpid()

    def take(self) -> Any:
        """The held connection, now this caller's until :meth:`give`; None when taken."""
        if not self.lock.acquire(blocking=False):
            return None
        if self.pid != os.getpid():  # a forked child never shares its parent's socket
            self.conn, self.pid = None, os.getpid()
        if self.conn is None:
            try:
                self.conn = self.pool.get_connection()  # (the pool's: closed with it)
            except BaseException:
                self.lock.release()
                raise
        return self.conn

    def give(self, failed: bool = False) -> None:
        if failed and self.conn is not None:
            self.conn.disconnect()
        self.lock.release()

    def close(self) -> None:
        """Give the connection back to its pool, unless a call holds it (then the pool's
        own close disconnects it); never waits (a forked child may find the lock taken)."""
        if not self.lock.acquire(blocking=False):
            return
        conn, self.conn = self.conn, None
        self.lock.release()
        if conn is not None and self.pid == os.getpid():
            self.pool.release(conn)


class _Script:
    def __init__(self, script: Any, held: _Held) -> None:
        from redis import exceptions
        from redis.utils import HIREDIS_AVAILABLE

        self._script, self.sha, self.script = script, script.sha, script.script
        self._held = held
        self._errors = exceptions
        self._pack: Callable[[tuple[Any, ...]], bytes] | None = None
        """hiredis' packer, which redis-py's own calls (minus its checks, which a script's
        fixed command name never needs); None: redis-py's pure-Python one."""
        if HIREDIS_AVAILABLE:
            import hiredis

            self._pack = hiredis.pack_command

    def __call__(self, *, keys: Sequence[Any] = (), args: Sequence[Any] = ()) -> Ready:
        conn = self._held.take()
        if conn is None:
            return Ready(self._script(keys=keys, args=args))
        errors = self._errors
        try:
            command = ("EVALSHA", self._script.sha, len(keys), *keys, *args)
            pack = self._pack
            conn.send_packed_command([pack(command)] if pack is not None else conn.pack_command(*command))
            reply = conn.read_response()
        except errors.NoScriptError:  # a whole reply was read: the connection is in step
            self._held.give()
            return Ready(self._script(keys=keys, args=args))  # loads the script, as redis-py does
        except errors.ResponseError:
            self._held.give()
            raise
        except BaseException:
            self._held.give(failed=True)
            raise
        self._held.give()
        return Ready(reply)


class _Connection:
    def __init__(self, conn: Any, held: bool = False) -> None:
        self.conn = conn
        self.held = held

    def pack_command(self, *args: Any) -> Any:
        return self.conn.pack_command(*args)

    def send_packed_command(self, command: Any) -> Ready:
        return Ready(self.conn.send_packed_command(command))

    def read_response(self) -> Ready:
        return Ready(self.conn.read_response())

    def disconnect(self) -> Ready:
        return Ready(self.conn.disconnect())


class _Pool:
    def __init__(self, pool: Any, held: _Held) -> None:
        self.pool = pool
        self.connection_kwargs = pool.connection_kwargs
        self._held = held

    def get_connection(self) -> Ready:
        conn = self._held.take()
        if conn is not None:
            return Ready(_Connection(conn, held=True))
        return Ready(_Connection(self.pool.get_connection()))

    def release(self, conn: _Connection) -> Ready:
        if conn.held:  # (a caller that failed half-way disconnected it already)
            self._held.give()
            return Ready(None)
        return Ready(self.pool.release(conn.conn))


class _Pipeline:
    def __init__(self, pipe: Any) -> None:
        self._pipe = pipe

    async def __aenter__(self) -> _Pipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._pipe.reset()

    def execute(self) -> Ready:
        return Ready(self._pipe.execute())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipe, name)  # queueing a command: not awaited


class _RedisClient:
    """The parts of ``redis.asyncio.Redis`` the Redis backend uses, on a sync client."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._held = _Held(client.connection_pool)
        self.connection_pool = _Pool(client.connection_pool, self._held)

    def register_script(self, source: str) -> _Script:
        return _Script(self._client.register_script(source), self._held)

    def pipeline(self, **kwargs: Any) -> _Pipeline:
        return _Pipeline(self._client.pipeline(**kwargs))

    def aclose(self) -> Ready:
        self._held.close()
        return Ready(self._client.close())

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)

        def call(*args: Any, **kwargs: Any) -> Ready:
            return Ready(method(*args, **kwargs))

        return call


def _redis(url: str, options: dict[str, Any]) -> Any:
    import redis

    from tether.stores.redis.keyspace import Keyspace
    from tether.stores.redis.store import RedisBackend

    backend = RedisBackend.from_url(url, **options)  # its options and key prefix, as opened
    parts = urlsplit(url)
    query = [
        (k, v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
        if k not in ("prefix", "allow_eviction")
    ]
    client_options = {k: v for k, v in options.items() if k not in ("allow_eviction", "indexed", "prefix")}
    client_options.setdefault("socket_connect_timeout", 5.0)
    sync_client = redis.Redis.from_url(
        urlunsplit(parts._replace(query=urlencode(query))), decode_responses=False, **client_options
    )
    backend.keyspace = Keyspace(_RedisClient(sync_client), backend.prefix)  # type: ignore[arg-type]
    backend._owns_client = True
    return backend


# == PostgreSQL: psycopg's sync connection, behind the async connection's interface ====
class _Cursor:
    def __init__(self, cur: Any) -> None:
        self._cur = cur

    @property
    def rowcount(self) -> int:
        return int(self._cur.rowcount)

    def fetchall(self) -> Ready:
        return Ready(self._cur.fetchall())

    def fetchone(self) -> Ready:
        return Ready(self._cur.fetchone())


class _PgConnection:
    """The parts of ``psycopg.AsyncConnection`` the PostgreSQL backend uses."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    @property
    def closed(self) -> bool:
        return bool(self._conn.closed)

    @property
    def broken(self) -> bool:
        return bool(getattr(self._conn, "broken", False))

    def execute(self, *args: Any, **kwargs: Any) -> Ready:
        return Ready(_Cursor(self._conn.execute(*args, **kwargs)))

    def transaction(self) -> Any:
        return _Transaction(self._conn)

    def close(self) -> Ready:
        return Ready(self._conn.close())


class _Transaction:
    def __init__(self, conn: Any) -> None:
        self._cm = conn.transaction()

    async def __aenter__(self) -> Any:
        return self._cm.__enter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return self._cm.__exit__(*exc)


def _postgres(url: str, options: dict[str, Any]) -> Any:
    import psycopg

    from tether.stores.postgres import PostgresBackend

    class InlinePostgresBackend(PostgresBackend):
        """Statements sent on a sync connection, in the calling thread."""

        async def _connection(self) -> Any:
            conn = self._conn
            if conn is None or conn.closed:
                conn = self._conn = _PgConnection(  # type: ignore[assignment]
                    psycopg.connect(
                        self._conninfo, autocommit=True, connect_timeout=max(1, int(self._timeout))
                    )
                )
            return conn

    backend = InlinePostgresBackend.from_url(url, **options)
    backend._lock = BlockingLock()  # type: ignore[assignment]
    return backend
