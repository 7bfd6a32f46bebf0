"""MySQL / MariaDB store (asyncmy).

Payloads are LONGBLOBs read row by row: nothing is aggregated into one string, so the
1 MiB ``GROUP_CONCAT`` cut that breaks other MySQL savers cannot happen. Run ids use a
binary collation, so ``Run-1`` and ``run-1`` are different runs, as on every backend.
The server's ``max_allowed_packet`` bounds one payload (16 MiB by default).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

from tether.errors import (
    ConfigError,
    StateTooLarge,
    StoreError,
    StoreNotWritable,
    StoreUnavailable,
    TetherError,
)
from tether.state.model import ChainStats
from tether.stores._chain import Write
from tether.stores._sql import Dialect, SqlBackend, SqlStore, Tx
from tether.stores.base import split_store_options

__all__ = ["MySQLBackend", "MySQLStore"]

_DIALECT = Dialect(
    text_key="VARCHAR(191)",
    text="TEXT",
    real="DOUBLE",
    bigint="BIGINT",
    blob="LONGBLOB",
    lock="FOR UPDATE",
    table_suffix=" ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
    inline_indexes=True,
    schema_exists=(
        "SELECT 1 FROM information_schema.tables"
        " WHERE table_schema = DATABASE() AND table_name = 'tether_schema'"
    ),
)

_LOST = {2002, 2003, 2006, 2013, 2055, 1040, 1927, 4031}
"""Connection refused, gone away, lost, killed (1927), idle-disconnected: reconnect, retry."""
_ROLLED_BACK = {1205: "lock wait timeout", 1213: "deadlock", 1637: "too many transactions"}
"""The server rolled the statement or transaction back: retry it on the same connection."""
_NOT_WRITABLE = {
    1021: "disk full",
    1114: "table full",
    3: "disk full",
    1030: "storage engine error (disk full?)",
    1036: "read-only",
    1290: "read-only",
    1792: "read-only",
}
_TOO_LARGE = {1153, 1301, 1118}
_DUPLICATE = 1062
_ESCAPED = (b"\0", b"\n", b"\r", b"\\", b"'", b'"', b"\x1a")
"""Bytes the driver escapes (two bytes each) when it inlines a payload in a statement."""


def _asyncmy() -> Any:
    try:
        import asyncmy
    except ImportError:
        raise ConfigError("MySQLStore needs asyncmy: pip install 'tether[mysql]'") from None
    return asyncmy


class _MyTx:
    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        async with self._conn.cursor() as cur:
            return int(await cur.execute(sql.replace("?", "%s"), tuple(params) or None))

    async def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        async with self._conn.cursor() as cur:
            await cur.execute(sql.replace("?", "%s"), tuple(params) or None)
            return list(await cur.fetchall())

    async def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        async with self._conn.cursor() as cur:
            await cur.execute(sql.replace("?", "%s"), tuple(params) or None)
            row = await cur.fetchone()
            return None if row is None else tuple(row)


class MySQLBackend(SqlBackend):
    """Checkpoints in MySQL 8 / MariaDB ≥ 10.5 (InnoDB)."""

    dialect = _DIALECT

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 3306,
        user: str = "root",
        password: str = "",
        database: str = "test",
        connect_timeout: float = 10.0,
    ) -> None:
        super().__init__()
        _asyncmy()
        self._params = {
            "host": host,
            "port": port,
            "user": user,
            "password": password,
            "db": database,
            "autocommit": True,
            "connect_timeout": connect_timeout,
            "charset": "utf8mb4",
        }
        self._conn: Any = None
        self._lock = asyncio.Lock()
        self._max_packet: int | None = None

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MySQLBackend:
        parts = urlsplit(url)
        database = parts.path.lstrip("/")
        if not database:
            raise ConfigError(f"MySQL URL needs a database: mysql://user@host:3306/DB (got {url!r})")
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 3306,
            user=unquote(parts.username or "root"),
            password=unquote(parts.password or ""),
            database=database,
            **options,
        )

    async def _connection(self) -> Any:
        if self._conn is None:
            self._conn = await _asyncmy().connect(**self._params)
        return self._conn

    @asynccontextmanager
    async def _guard(self) -> AsyncIterator[Any]:
        """The connection, one user at a time, with driver errors translated."""
        errors = _asyncmy().errors
        async with self._lock:
            try:
                yield await self._connection()
            except TetherError:
                raise
            except errors.IntegrityError:
                raise
            except errors.Error as exc:
                translated = self._translate(exc)
                if isinstance(translated, StoreUnavailable | StateTooLarge):
                    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
                    if code not in _ROLLED_BACK:
                        await self._reset()  # the server may have closed it: start afresh
                raise translated from exc
            except OSError as exc:
                await self._reset()
                raise StoreUnavailable(f"mysql: {exc}") from exc

    @asynccontextmanager
    async def _tx(self, *, write: bool) -> AsyncIterator[Tx]:
        async with self._guard() as conn:
            await conn.begin()
            try:
                yield _MyTx(conn)
            except BaseException:
                await asyncio.shield(conn.rollback())
                raise
            await conn.commit()

    async def _query(
        self, sql: str, params: Sequence[Any] = (), *, run_id: str | None = None
    ) -> list[tuple[Any, ...]]:
        async with self._guard() as conn:  # autocommit: one consistent read, one round trip
            return await _MyTx(conn).all(sql, params)

    def _translate(self, exc: Exception) -> StoreError:
        """A driver error as the store error for its cause (by MySQL error number)."""
        errors = _asyncmy().errors
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        if code in _ROLLED_BACK:
            return StoreUnavailable(f"mysql: {_ROLLED_BACK[code]}, rolled back: {exc}")
        if code in _NOT_WRITABLE:
            reason = _NOT_WRITABLE[code]
            fix = (
                "free space on the server's disk or grow the tablespace"
                if reason != "read-only"
                else "point the store at a writable server (read_only is set)"
            )
            return StoreNotWritable(f"mysql: {exc} ({fix}; then resume the run)", reason=reason)
        if code in _TOO_LARGE:
            limit = self._max_packet or 0
            return StateTooLarge(
                f"mysql: {exc}: a checkpoint is over a server limit; raise max_allowed_packet"
                f"{f' (now {limit} bytes)' if limit else ''} (and innodb_log_file_size for row size), "
                "or keep big data out of the state",
                limit=limit,
            )
        if code in _LOST or isinstance(exc, errors.OperationalError | errors.InterfaceError):
            return StoreUnavailable(f"mysql: {exc}")
        return StoreError(f"mysql: {exc}")

    async def _packet_limit(self) -> int:
        """The server's ``max_allowed_packet``, read once per store."""
        if self._max_packet is None:
            rows = await self._query("SELECT @@max_allowed_packet")
            self._max_packet = int(rows[0][0]) if rows and rows[0][0] is not None else 0
        return self._max_packet

    async def _commit_write(self, w: Write) -> tuple[int, ChainStats]:
        limit = await self._packet_limit()
        size = len(w.payload)
        if limit and size * 2 + 4096 > limit:  # only then can escaping push it over: count
            sent = size + sum(w.payload.count(c) for c in _ESCAPED) + 4096
            if sent > limit:
                raise StateTooLarge(
                    f"run {w.run_id!r}: a checkpoint of {size} bytes ({sent} as sent) is over the "
                    f"server's max_allowed_packet of {limit} bytes; raise it on the server "
                    f"(SET GLOBAL max_allowed_packet = {max(sent * 2, 64 << 20)}, and in my.cnf) or "
                    "keep big data out of the state",
                    run_id=w.run_id,
                    size=size,
                    limit=limit,
                )
        return await super()._commit_write(w)

    async def _reset(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _is_duplicate(self, exc: BaseException) -> bool:
        errors = _asyncmy().errors
        return isinstance(exc, errors.IntegrityError) and bool(exc.args) and exc.args[0] == _DUPLICATE

    async def setup(self) -> None:
        conn_lock = "SELECT GET_LOCK('tether_migrate', 60)"
        async with self._tx(write=True) as tx:
            await tx.all(conn_lock)
        try:
            await self._apply_migrations()
        finally:
            async with self._tx(write=True) as tx:
                await tx.all("SELECT RELEASE_LOCK('tether_migrate')")

    async def aclose(self) -> None:
        await self._reset()


class MySQLStore(SqlStore):
    """A :class:`CheckpointStore` on a :class:`MySQLBackend`; the backend's options as it takes
    them, the store's (``codec``, ``expiry``, ``compaction``, ``retry``) as
    :class:`CheckpointStore` does."""

    scheme = "mysql"
    backend_class = MySQLBackend

    def __init__(self, **options: Any) -> None:
        mine = split_store_options(options)
        super().__init__(MySQLBackend(**options), **mine)
