"""redis-py's sync client behind the parts of ``redis.asyncio.Redis`` the Redis backend
uses, whose awaits never suspend: what a blocking twin of :class:`RedisBackend` runs on
(``RedisBackend.blocking_from_url``; see ``tether.stores.blocking``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from tether.stores.blocking import Ready

__all__ = ["SyncRedisClient"]


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


class SyncRedisClient:
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
