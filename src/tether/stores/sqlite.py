"""SQLite store: the embedded default (stdlib ``sqlite3``, WAL, durable commits).

All database work runs on one dedicated thread per store, so the event loop never blocks on
disk and the connection is only ever touched by one thread. Several processes may share one file:
writers take the write lock (``BEGIN IMMEDIATE``), waiting up to ``busy_timeout`` for it; a delta
takes fewer statements than other writes (``_sqlite_write``).

WAL checkpoints (copying committed pages from the WAL into the database file, then an fsync of it)
can run on a second connection and thread instead of inside a save (``checkpoint_bytes``): faster
for big saves, slower for some small ones (figures in ``benchmarks/README.md``): off by default.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs

from tether.errors import ConfigError, StoreError, StoreNotWritable, StoreUnavailable, TetherError
from tether.state.model import ChainStats
from tether.stores._chain import Write
from tether.stores._sql import Dialect, SqlBackend, SqlStore, Tx
from tether.stores._sql_chain import (
    CHAIN_SQL,
    ChainHint,
    chain_of,
    hint_of,
    hinted_chain,
    hinted_query,
    skips_sealed,
)
from tether.stores._sqlite_write import NotAtExpected, write_delta
from tether.stores.backend import remember as _hint
from tether.stores.base import split_store_options
from tether.stores.blocking import BlockingLock

__all__ = ["SqliteBackend", "SqliteStore"]

T = TypeVar("T")

_log = logging.getLogger(__name__)

_DIALECT = Dialect(text_key="TEXT", text="TEXT", real="REAL", bigint="INTEGER", blob="BLOB", lock="")


_SIZE_SQL = "SELECT base_bytes + growth_bytes + rewrite_bytes FROM tether_runs WHERE run_id = ?"

_SIZE = "r.base_bytes + r.growth_bytes + r.rewrite_bytes"
_CHAIN_IF_SMALL_SQL = CHAIN_SQL.replace(
    "SELECT c.version, c.payload, r.version",
    f"SELECT c.version, CASE WHEN {_SIZE} <= ? THEN c.payload END, r.version, {_SIZE}",
)
"""``CHAIN_SQL`` for a run of unknown size: payloads only if the chain is small enough to
read on the event loop (a payload not selected is never read from disk), else the size."""


_RowidHint = tuple[ChainHint, list[int], tuple[int, ...]]
"""A chain's hint, the versions of its rows in order, and their rowids, in the same order."""


@functools.lru_cache(maxsize=256)
def _with_rowid(sql: str) -> str:
    """A hinted chain's statement (``hinted_query``) that also selects each row's rowid."""
    return sql.replace(" FROM tether_runs r ", ", c.rowid FROM tether_runs r ", 1)


@functools.lru_cache(maxsize=256)
def _rowid_sql(n: int) -> str:
    """The rows of a hinted chain by rowid: one B-tree seek a row instead of two (the primary
    key's index, then the table), and only the rows that prove the hint still holds: the
    run's own (``+c.run_id``, which also keeps SQLite from scanning the run's rows by its
    index instead), the run at the hint's latest and base versions, every row but the latest
    with a payload. They come in rowid order."""
    keys = ", ".join("?" * n)
    return (
        "SELECT c.version, c.payload FROM tether_runs r CROSS JOIN tether_checkpoints c "
        "WHERE r.run_id = ? AND r.version = ? AND r.base_version = ? "
        "AND (r.expires_at IS NULL OR r.expires_at > ?) "
        f"AND c.rowid IN ({keys}) AND +c.run_id = r.run_id "
        "AND (length(c.payload) > 0 OR c.version = r.version)"
    )


def _rowid_hint(
    rows: list[tuple[Any, ...]], hint: ChainHint, chain: list[tuple[int, bytes]]
) -> _RowidHint | None:
    """The rowids of a hinted chain just read (``rows`` end with them), if they rise with its
    versions, as a read by rowid returns them; else None (the chain is read by key)."""
    rowid_of = {int(r[0]): int(r[4]) for r in rows}
    rowids = tuple(rowid_of[v] for v, _ in chain)
    if list(rowids) != sorted(rowids):
        return None
    return hint, [v for v, _ in chain], rowids


def _chain_by_rowid(
    conn: sqlite3.Connection, run_id: str, hint: ChainHint, by_rowid: _RowidHint
) -> list[tuple[int, bytes]] | None:
    """The chain of ``hint`` read by the rowids its rows had, if the rows found prove it the
    latest chain still (as ``hinted_chain`` does): as many as it has, each the run's own at
    the version it had (distinct rows of one run: distinct versions), the run at the same
    latest and base versions, every carrier with a payload; else None (read it by key)."""
    _hint_again, versions, rowids = by_rowid
    rows: list[tuple[int, bytes]] = conn.execute(
        _rowid_sql(len(rowids)), (run_id, hint[1], hint[0], time.time(), *rowids)
    ).fetchall()
    if len(rows) != len(versions) or [r[0] for r in rows] != versions:
        return None
    return rows


def _read_only_fs(path: str | os.PathLike[str]) -> bool:
    """Whether the database's directory sits on a file system mounted read-only."""
    try:
        return bool(os.statvfs(os.path.dirname(os.path.abspath(path)) or ".").f_flag & os.ST_RDONLY)
    except OSError:
        return False


class _SqliteTx:
    """Statements run on the DB thread one await at a time (migrations use this)."""

    def __init__(self, store: SqliteBackend) -> None:
        self._store = store

    async def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return await self._store._call(lambda c: c.execute(sql, params).rowcount)

    async def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return await self._store._call(lambda c: c.execute(sql, params).fetchall())

    async def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        return await self._store._call(lambda c: c.execute(sql, params).fetchone())


class _InlineTx:
    """Statements run synchronously, already on the DB thread.

    Its coroutines never suspend, so a whole transaction body written as ``async``
    (shared with the server backends) runs to completion in one ``send(None)``: one
    thread hop per transaction instead of one per statement.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    async def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._conn.execute(sql, params).rowcount

    async def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._conn.execute(sql, params).fetchall()

    async def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = self._conn.execute(sql, params).fetchone()
        return row


def _drive(coro: Coroutine[Any, Any, T]) -> T:
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a SQLite transaction body awaited something other than the database")


class SqliteBackend(SqlBackend):
    """Checkpoints in one SQLite file.

    Args:
        path: the database file (created with its directory), or ``":memory:"``.
        synchronous: ``FULL`` (default) makes a save durable when it returns, even
            on power loss; ``NORMAL`` is faster and durable against process crashes
            only (WAL's documented trade).
        busy_timeout: seconds to wait for another process's write lock.
        checkpoint_bytes: when > 0, a background WAL checkpoint runs each time this
            store's commits have written about this many bytes (4 MiB suits states of
            1 MB and more), and the commit itself only checkpoints, as a backstop, once
            the WAL holds four times this much. 0 (default): SQLite checkpoints inside
            the commit that takes the WAL past ~4 MB.
        secure_delete: ``FAST`` (default) lets a delete, a prune or a seal free pages
            without writing them back as zeros; Debian's SQLite (these machines') is built
            with ``ON``, which made deleting a 1 MB run write as many WAL pages (263) as saving
            it did (8 with ``FAST``), doubling the checkpoint work of any run that prunes.
            ``ON`` if deleted state must not linger in free pages of the file.
        caller_thread: True makes a blocking twin (see ``tether.stores.blocking``): every
            statement runs in the thread that calls, on this backend's own connection, and
            its coroutines never suspend (run them with ``run_inline``). Calls from several
            threads take turns on a reentrant lock that every read and transaction holds
            (the default backend lets small reads skip its lock, safe on one loop only).
    """

    dialect = _DIALECT

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "FULL",
        busy_timeout: float = 30.0,
        checkpoint_bytes: int = 0,
        secure_delete: str = "FAST",
        caller_thread: bool = False,
    ) -> None:
        super().__init__()
        if synchronous.upper() not in {"FULL", "NORMAL", "EXTRA"}:
            raise ConfigError("synchronous must be FULL, NORMAL or EXTRA")
        secure_delete = str(secure_delete).upper()
        if secure_delete not in {"ON", "OFF", "FAST"}:
            raise ConfigError(f"secure_delete must be ON, OFF or FAST, got {secure_delete!r}")
        if (
            isinstance(checkpoint_bytes, bool)
            or not isinstance(checkpoint_bytes, int)
            or checkpoint_bytes < 0
        ):
            raise ConfigError(f"checkpoint_bytes must be an int >= 0, got {checkpoint_bytes!r}")
        self.path = str(path)
        self._synchronous = synchronous.upper()
        self._secure_delete = secure_delete
        self._busy_ms = int(busy_timeout * 1000)
        self.caller_thread = caller_thread
        self._pool: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._conn_lock: threading.RLock | None = None
        """A blocking twin's: held by every call, so threads take turns on the connection."""
        self._lock: asyncio.Lock | _HeldLock
        if caller_thread:
            self._conn_lock = threading.RLock()
            self._lock = _HeldLock(self._conn_lock)
        else:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-sqlite")
            self._lock = asyncio.Lock()
        self.inline_read_bytes = 2 * 1024 * 1024
        """Chains up to this size are read without a thread hop: the hop costs about what
        reading this much does, and the decode that follows holds the loop longer anyway."""
        self._chain_bytes: dict[str, int] = {}
        self._rowids: dict[str, _RowidHint] = {}
        """Per run, the rowids of the rows of its hinted chain (see ``_chain_by_rowid``)."""
        """Chain sizes this store last wrote or read, so a small read needs no size probe."""
        self.checkpoint_bytes = 0 if self.path == ":memory:" else checkpoint_bytes
        self._unchecked = 0
        """Bytes this store wrote since its last background checkpoint began."""
        self._checkpointer: ThreadPoolExecutor | None = None
        self._checkpointing: Future[None] | None = None
        self._ck_conn: sqlite3.Connection | None = None
        self._page = 4096

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SqliteBackend:
        """A store for ``sqlite:///relative.db`` or ``sqlite:////abs.db``; the query may set
        ``synchronous``, ``busy_timeout`` (seconds), ``checkpoint_bytes`` and
        ``secure_delete``, so that a CLI or a worker given only a URL can tune them."""
        rest = url.partition("://")[2]
        path, _, query = rest.partition("?")
        path = path[1:] if path.startswith("/") else path
        if not path:
            raise ConfigError("sqlite URL needs a path: sqlite:///tether.db")
        casts: dict[str, Callable[[str], Any]] = {
            "synchronous": str,
            "busy_timeout": float,
            "checkpoint_bytes": int,
            "secure_delete": str,
        }
        for key, values in parse_qs(query, keep_blank_values=True).items():
            cast = casts.get(key)
            if cast is None:
                raise ConfigError(f"unknown sqlite URL option {key!r}; known: {', '.join(casts)}")
            try:
                options.setdefault(key, cast(values[-1]))
            except ValueError as exc:
                raise ConfigError(f"sqlite URL option {key}={values[-1]!r}: {exc}") from exc
        return cls(path, **options)

    def _connect(self) -> sqlite3.Connection:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        # reads of big states: memory-map the file and keep hot pages
        conn.execute("PRAGMA mmap_size = 268435456")
        conn.execute("PRAGMA cache_size = -32768")
        conn.execute(f"PRAGMA secure_delete = {self._secure_delete}")
        if self.checkpoint_bytes:
            self._page = int(conn.execute("PRAGMA page_size").fetchone()[0])
            conn.execute(f"PRAGMA wal_autocheckpoint = {max(1, 4 * self.checkpoint_bytes // self._page)}")
        return conn

    def _written(self, nbytes: int) -> None:
        """Count a commit's WAL bytes (its payload plus the ~4 pages of rows and indexes
        any commit rewrites); past ``checkpoint_bytes`` (> 0), start a background checkpoint
        unless one is running (a later commit will)."""
        self._unchecked += nbytes + 4 * self._page
        if self._unchecked < self.checkpoint_bytes:
            return
        running = self._checkpointing
        if running is not None and not running.done():
            return
        if self._checkpointer is None:
            self._checkpointer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-sqlite-wal")
        self._unchecked = 0
        self._checkpointing = self._checkpointer.submit(self._checkpoint)

    def _checkpoint(self) -> None:
        """A PASSIVE checkpoint: copies what no reader still needs, waits for no one, and a
        commit running meanwhile goes on appending to the WAL. Failure costs nothing but
        a longer WAL (the commit's backstop checkpoint still bounds it)."""
        try:
            if self._ck_conn is None:
                self._ck_conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                self._ck_conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
                self._ck_conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            self._ck_conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            _log.debug("sqlite %s: background checkpoint failed: %s", self.path, exc)

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._pool is None:  # a blocking twin: right here, in the caller's thread
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

        def job() -> T:
            if self._conn is None:
                self._conn = self._connect()
            return fn(self._conn)

        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, job)
        except TetherError:
            raise
        except sqlite3.IntegrityError:
            raise
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    @asynccontextmanager
    async def _tx(self, *, write: bool) -> AsyncIterator[Tx]:
        async with self._lock:  # one transaction at a time on this connection
            await self._call(lambda c: c.execute("BEGIN IMMEDIATE" if write else "BEGIN"))
            try:
                yield _SqliteTx(self)
            except BaseException:
                rollback = self._call(lambda c: c.execute("ROLLBACK"))
                # (a blocking twin has no loop to shield on: its rollback runs to its end anyway)
                await (rollback if self._pool is None else asyncio.shield(rollback))
                raise
            await self._call(lambda c: c.execute("COMMIT"))

    async def _in_tx(self, fn: Callable[[Tx], Awaitable[T]], *, write: bool) -> T:
        def job(conn: sqlite3.Connection) -> T:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                result: T = _drive(fn(_InlineTx(conn)))  # type: ignore[arg-type]
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result

        async with self._lock:
            return await self._call(job)

    async def _query(
        self, sql: str, params: Sequence[Any] = (), *, run_id: str | None = None
    ) -> list[tuple[Any, ...]]:
        """Small reads run inline on the event loop: in WAL mode a reader never waits
        for a writer, and a thread hop would cost more than the read. (On the writer's
        own connection: a second, read-only one is slower on a read that follows a
        write, since it must first notice the new WAL frames.) A run's
        chain above ``inline_read_bytes`` is read on the DB thread so the loop never
        stalls on disk."""
        if self._conn_lock is not None:  # a blocking twin: every read takes its turn
            with self._conn_lock:
                return self._inline(lambda c: c.execute(sql, params).fetchall())
        if not self._lock.locked() and self._size_of(run_id) <= self.inline_read_bytes:
            # no transaction holds the connection, and a read that never awaits
            # cannot be interleaved with one: no need to take the lock
            return self._inline(lambda c: c.execute(sql, params).fetchall())
        async with self._lock:
            if self._size_of(run_id) > self.inline_read_bytes:
                return await self._call(lambda c: c.execute(sql, params).fetchall())
            return self._inline(lambda c: c.execute(sql, params).fetchall())

    def _size_of(self, run_id: str | None) -> int:
        """Bytes a read of ``run_id``'s chain returns (0 for other reads), from what this
        store last wrote or read of the run, else from a probe. Another process may have
        grown it since: that costs one inline read of the bigger chain, then the figure
        is right again."""
        if run_id is None:
            return 0
        size = self._chain_bytes.get(run_id)
        if size is None:
            row = self._inline(lambda c: c.execute(_SIZE_SQL, (run_id,)).fetchone())
            size = 0 if row is None else int(row[0])
        return size

    def _remember(self, run_id: str, chain: list[tuple[int, bytes]]) -> None:
        _hint(self._chain_bytes, run_id, sum(len(p) for _, p in chain) if chain else None)

    async def _commit_write(self, w: Write) -> tuple[int, ChainStats]:
        with suppress(NotAtExpected):  # (it changed nothing: the general write says why)
            if w.kind == "delta" and w.expected_version and not (w.fence or w.take or w.require_status):
                return await self._in_tx(functools.partial(write_delta, w=w), write=True)
        return await super()._commit_write(w)

    async def append(self, w: Write) -> tuple[int, ChainStats]:
        try:
            version, chain = await super().append(w)
        except BaseException:
            _hint(self._chain_bytes, w.run_id, None)
            raise
        _hint(self._chain_bytes, w.run_id, chain.base_bytes + chain.growth_bytes + chain.rewrite_bytes)
        if self.checkpoint_bytes:
            self._written(len(w.payload))
        return version, chain

    def latest_chain_inline(self, run_id: str) -> list[tuple[int, bytes]] | None:
        """The latest chain, read right here on the event loop, or None when ``read_chain``
        must read it: the chain is big (or unknown and big), a transaction holds the
        connection, or an error the general path will report. What ``read_chain`` would
        do, minus its layers: at 1 KB a load is all fixed costs."""
        if self._conn_lock is not None:  # held: no other thread's transaction is open meanwhile
            with self._conn_lock:
                return self._latest_chain_inline(run_id)
        return self._latest_chain_inline(run_id)

    def _latest_chain_inline(self, run_id: str) -> list[tuple[int, bytes]] | None:
        conn = self._conn
        if conn is None or self._lock.locked():
            return None
        size = self._chain_bytes.get(run_id)
        limit = self.inline_read_bytes
        try:
            if size is None:  # a run this store has not seen: one query either way
                rows = conn.execute(_CHAIN_IF_SMALL_SQL, (limit, run_id, time.time())).fetchall()
                if rows and rows[0][3] > limit:
                    _hint(self._chain_bytes, run_id, int(rows[0][3]))  # big: on the DB thread
                    return None
                chain = chain_of(rows)
            elif size <= limit:
                hint = self._chains.get(run_id)
                if hint is not None and skips_sealed(hint):
                    by_rowid = self._rowids.get(run_id)
                    if by_rowid is not None and by_rowid[0] == hint:
                        found = _chain_by_rowid(conn, run_id, hint, by_rowid)
                        if found is not None:
                            return found
                    sql, params = hinted_query(run_id, hint)
                    rows = conn.execute(_with_rowid(sql), params).fetchall()
                    hinted = hinted_chain(rows, hint)
                    if hinted is not None:
                        _hint(self._rowids, run_id, _rowid_hint(rows, hint, hinted))
                        return hinted
                chain = chain_of(conn.execute(CHAIN_SQL, (run_id, time.time())).fetchall())
            else:
                return None
        except (sqlite3.Error, ValueError):  # (a run id SQLite cannot encode: the caller says why)
            return None
        if not chain:
            read = None
            _hint(self._chains, run_id, None)
        elif len(chain) == 1:  # the common load: as little as can be done
            read = len(chain[0][1])
            version = chain[0][0]
            hint = (version, version, (version,))
            if self._chains.get(run_id) != hint:
                _hint(self._chains, run_id, hint)
        else:
            read = sum(len(p) for _, p in chain)
            _hint(self._chains, run_id, hint_of(chain))
        if read != size:
            _hint(self._chain_bytes, run_id, read)
        return chain

    async def read_chain(self, run_id: str, version: int | None) -> list[tuple[int, bytes]]:
        if version is None:
            chain = self.latest_chain_inline(run_id)
            if chain is not None:
                return chain
        chain = await super().read_chain(run_id, version)
        if version is None:
            self._remember(run_id, chain)
        return chain

    async def delete(self, run_id: str) -> bool:
        _hint(self._chain_bytes, run_id, None)
        return await super().delete(run_id)

    def _inline(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._conn is None:
            self._conn = self._connect()
        try:
            return fn(self._conn)
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    def _translate(self, exc: sqlite3.Error) -> StoreError:
        """A driver error as the store error for its cause (by SQLite's result code)."""
        name = getattr(exc, "sqlite_errorname", "") or ""
        text = f"sqlite {self.path}: {exc}"
        if _read_only_fs(self.path) and (name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN")) or not name):
            name = "SQLITE_READONLY"  # a read-only file system: nothing a retry would fix
        elif name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or name == "SQLITE_CANTOPEN":
            return StoreUnavailable(text)
        if name.startswith("SQLITE_FULL"):
            return StoreNotWritable(
                f"{text}: the disk is full; free space, then resume the run", reason="disk full"
            )
        if name.startswith("SQLITE_READONLY"):
            return StoreNotWritable(
                f"{text}: the database file or its directory is read-only; make both writable "
                "by this process (the journal needs the directory), then resume the run",
                reason="read-only",
            )
        if name == "SQLITE_IOERR_WRITE" or name == "SQLITE_IOERR_FSYNC" or "disk I/O" in str(exc):
            return StoreNotWritable(
                f"{text}: a disk write failed (full or failing disk?)", reason="I/O error"
            )
        if not name and ("locked" in str(exc) or "busy" in str(exc) or "unable to open" in str(exc)):
            return StoreUnavailable(text)
        return StoreError(text)

    def _is_duplicate(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError)

    async def setup(self) -> None:
        await self._apply_migrations()

    async def aclose(self) -> None:
        if self._pool is None:  # a blocking twin: no loop to hand the work to
            self._close_here()
            return
        checkpointer = self._checkpointer
        if checkpointer is not None:
            self._checkpointer = None
            await asyncio.get_running_loop().run_in_executor(None, checkpointer.shutdown, True)
            if self._ck_conn is not None:
                self._ck_conn.close()
                self._ck_conn = None
        conn = self._conn
        if conn is not None:
            await asyncio.get_running_loop().run_in_executor(self._pool, conn.close)
            self._conn = None
        self._pool.shutdown(wait=True)

    def _close_here(self) -> None:
        checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            checkpointer.shutdown(wait=True)
        for conn in (self._ck_conn, self._conn):
            if conn is not None:
                conn.close()
        self._ck_conn = self._conn = None

    @classmethod
    def blocking_from_url(cls, url: str, **options: Any) -> SqliteBackend:
        """The blocking twin of ``from_url(url, **options)``: ``caller_thread=True``."""
        return cls.from_url(url, caller_thread=True, **options)


class _HeldLock(BlockingLock):
    """A blocking twin's transaction lock: its connection lock (reentrant), which every call
    holds, so ``locked()`` never tells a read to wait for a transaction of another thread."""

    __slots__ = ()

    def locked(self) -> bool:
        return False


class SqliteStore(SqlStore):
    """A :class:`CheckpointStore` on a :class:`SqliteBackend` (URL ``sqlite:///path.db``);
    ``path`` and the backend's options as :class:`SqliteBackend` takes them, the store's
    (``codec``, ``expiry``, ``compaction``, ``retry``) as :class:`CheckpointStore` does."""

    scheme = "sqlite"
    backend_class = SqliteBackend

    def __init__(self, path: str | Path, **options: Any) -> None:
        mine = split_store_options(options)
        super().__init__(SqliteBackend(path, **options), **mine)
