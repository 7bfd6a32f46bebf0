"""A PostgreSQL blocking twin's connection: psycopg's sync connection behind the parts of
the async interface the backend uses (``PostgresBackend(connect=...)``), so that one backend's
code serves ``async`` callers and sync ones (LangGraph's sync graphs) alike, each call
returning an awaitable that is done at once (:class:`Ready`).
"""

from __future__ import annotations

from typing import Any

from tether.stores.blocking import Ready

__all__ = ["connect_sync"]


async def connect_sync(conninfo: str, connect_timeout: float) -> _SyncConnection:
    """Connects in the calling thread (never suspends): a blocking twin's ``connect``."""
    import psycopg

    conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=max(1, int(connect_timeout)))
    return _SyncConnection(conn)


class _SyncCursor:
    def __init__(self, cur: Any) -> None:
        self._cur = cur

    @property
    def rowcount(self) -> int:
        return int(self._cur.rowcount)

    def fetchall(self) -> Ready:
        return Ready(self._cur.fetchall())

    def fetchone(self) -> Ready:
        return Ready(self._cur.fetchone())


class _SyncConnection:
    """The parts of ``psycopg.AsyncConnection`` this backend uses, on a sync connection."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    @property
    def closed(self) -> bool:
        return bool(self._conn.closed)

    @property
    def broken(self) -> bool:
        return bool(getattr(self._conn, "broken", False))

    def execute(self, *args: Any, **kwargs: Any) -> Ready:
        return Ready(_SyncCursor(self._conn.execute(*args, **kwargs)))

    def transaction(self) -> _SyncTransaction:
        return _SyncTransaction(self._conn)

    def cursor(self, *, binary: bool = False) -> _SyncStreamer:
        return _SyncStreamer(self._conn.cursor(binary=binary))

    def close(self) -> Ready:
        return Ready(self._conn.close())


class _SyncStreamer:
    """A sync cursor as the async cursor: its ``stream`` an async iterator, its ``execute``
    and ``fetchone`` awaitables (none of them suspends)."""

    def __init__(self, cur: Any) -> None:
        self._cur = cur

    @property
    def adapters(self) -> Any:
        return self._cur.adapters

    def stream(self, *args: Any, **kwargs: Any) -> _SyncRows:
        return _SyncRows(self._cur.stream(*args, **kwargs))

    def execute(self, *args: Any, **kwargs: Any) -> Ready:
        self._cur.execute(*args, **kwargs)
        return Ready(self)

    def fetchone(self) -> Ready:
        return Ready(self._cur.fetchone())


class _SyncRows:
    def __init__(self, rows: Any) -> None:
        self._rows = rows

    def __aiter__(self) -> _SyncRows:
        return self

    def __anext__(self) -> Ready:
        try:
            return Ready(next(self._rows))
        except StopIteration:
            raise StopAsyncIteration from None

    def aclose(self) -> Ready:
        return Ready(self._rows.close())


class _SyncTransaction:
    def __init__(self, conn: Any) -> None:
        self._cm = conn.transaction()

    async def __aenter__(self) -> Any:
        return self._cm.__enter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return self._cm.__exit__(*exc)
