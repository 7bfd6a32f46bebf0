"""PostgreSQL store (psycopg 3, async).

Payloads travel in binary (no hex doubling of 10 MB states). The payload column is stored
uncompressed out of line (``STORAGE EXTERNAL``, schema version 4), so that a big state is
read back in slices the server fetches from TOAST one at a time, neither decompressing
nor copying it whole (``stores/_pg_slices.py``); a text-heavy state then takes more disk than
it did lz4-compressed (the codec's ``compress_min_bytes`` compresses on the client where
disk matters more). Rows written before version 4 stay compressed and read whole.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

from tether.errors import (
    ConfigError,
    StateTooLarge,
    StoreError,
    StoreNotWritable,
    StoreUnavailable,
    TetherError,
    VersionConflict,
)
from tether.state.model import ChainStats, chain_stats
from tether.stores._chain import Write, next_fence
from tether.stores._pg_slices import SLICE, Slices, sliced, slices_cursor
from tether.stores._pg_sync import connect_sync
from tether.stores._sql import Dialect, SqlBackend, SqlStore, Tx
from tether.stores.backend import remember as _hint
from tether.stores.base import split_store_options
from tether.stores.blocking import BlockingLock

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresBackend", "PostgresStore"]

_DIALECT = Dialect(
    text_key="TEXT",
    text="TEXT",
    real="DOUBLE PRECISION",
    bigint="BIGINT",
    blob="BYTEA",
    lock="FOR UPDATE",
    migrate_lock="SELECT pg_advisory_xact_lock(727368657201)",
    extra=(
        "DO $$ BEGIN "
        "IF current_setting('server_version_num')::int >= 140000 THEN "
        "EXECUTE 'ALTER TABLE tether_checkpoints ALTER COLUMN payload SET COMPRESSION lz4'; "
        "END IF; EXCEPTION WHEN others THEN NULL; END $$",
    ),
    # uncompressed, out of line: a big payload is read in slices (_pg_slices.py); rows
    # stored before stay compressed and are read whole
    payload_storage=("ALTER TABLE tether_checkpoints ALTER COLUMN payload SET STORAGE EXTERNAL",),
)


_CUR = """
WITH cur AS (
    SELECT version, base_version, base_bytes, growth_bytes, rewrite_bytes, chain_len, fence, lease_until
    FROM tether_runs
    WHERE run_id = %(run)s AND version = %(expected)s
      AND (expires_at IS NULL OR expires_at > %(now)s)
      AND (%(require)s::text IS NULL OR status = %(require)s::text)
      AND (%(fence)s::bigint = 0 OR %(take)s OR fence = %(fence)s::bigint)
    FOR UPDATE
)"""
"""The run row at the expected version, live, in the required status and (for a lease
holder's write) still under the writer's lease token, locked: what both one-statement
writes start from (no row: the general transaction says why)."""

_LEASE_SET = """
    fence = CASE WHEN %(take)s THEN GREATEST(cur.fence + 1, %(floor)s::bigint) ELSE cur.fence END,
    lease_until = CASE WHEN %(set_until)s THEN %(until)s::double precision ELSE cur.lease_until END,"""
"""A take stores the next token; a holder's write may set or clear the lease's deadline."""

_FAST_WRITE = (
    _CUR
    + """, ins AS (
    INSERT INTO tether_checkpoints (run_id, version, kind, node_id, status, created_at, nbytes, payload)
    SELECT %(run)s, cur.version + 1, %(kind)s, %(node)s, %(status)s, %(created)s, %(nbytes)s, %(payload)s
    FROM cur
    RETURNING version
)
UPDATE tether_runs AS r SET
    status = %(status)s, version = ins.version, node_id = %(node)s,
    updated_at = %(created)s, expires_at = %(expires)s,"""
    + _LEASE_SET
    + """
    base_version = CASE WHEN %(full)s THEN ins.version ELSE cur.base_version END,
    base_bytes = CASE WHEN %(full)s THEN %(nbytes)s::bigint ELSE cur.base_bytes END,
    growth_bytes = CASE WHEN %(full)s THEN 0 ELSE cur.growth_bytes + %(growth)s::bigint END,
    rewrite_bytes = CASE WHEN %(full)s THEN 0 ELSE cur.rewrite_bytes + %(rewrite)s::bigint END,
    chain_len = CASE WHEN %(full)s THEN 0 ELSE cur.chain_len + 1 END,
    write_id = %(wid)s
FROM cur, ins
WHERE r.run_id = %(run)s
RETURNING r.version, r.base_version, r.base_bytes, r.growth_bytes, r.rewrite_bytes, r.chain_len, r.fence
"""
)


def _delta_write(held: bool) -> str:
    """The one-statement delta write; ``held``: a lease holder's, which also checks the
    holder's token and may move the lease's deadline in the same UPDATE."""
    lease = ",\n        lease_until = CASE WHEN %(set_until)s THEN %(until)s::double precision "
    lease += "ELSE lease_until END"
    return f"""
WITH up AS (
    UPDATE tether_runs SET
        status = %(status)s, version = version + 1, node_id = %(node)s,
        updated_at = %(created)s, expires_at = %(expires)s,
        growth_bytes = growth_bytes + %(growth)s::bigint, rewrite_bytes = rewrite_bytes + %(rewrite)s::bigint,
        chain_len = chain_len + 1, write_id = %(wid)s{lease if held else ""}
    WHERE run_id = %(run)s AND version = %(expected)s AND (expires_at IS NULL OR expires_at > %(now)s)
      {"AND fence = %(fence)s::bigint" if held else ""}
    RETURNING version, base_version, base_bytes, growth_bytes, rewrite_bytes, chain_len, fence
), ins AS (
    INSERT INTO tether_checkpoints (run_id, version, kind, node_id, status, created_at, nbytes, payload)
    SELECT %(run)s, up.version, 'delta', %(node)s, %(status)s, %(created)s, %(nbytes)s, %(payload)s FROM up
    RETURNING version
)
SELECT up.version, up.base_version, up.base_bytes, up.growth_bytes, up.rewrite_bytes, up.chain_len, up.fence
FROM up, ins
"""


_DELTA_WRITE, _HELD_DELTA_WRITE = _delta_write(False), _delta_write(True)
"""``_FAST_WRITE`` for a delta at an expected version, requiring no status (every LangGraph put,
every runner's step): the UPDATE locks the row and checks the version (and a holder's token)
itself, no locking read before it: less for the server to run, and fencing costs it one
comparison. No row: the general transaction says why."""

_FAST_CREATE = """
WITH run AS (
    INSERT INTO tether_runs (run_id, status, version, node_id, base_version, base_bytes, growth_bytes,
                             rewrite_bytes, chain_len, created_at, updated_at, expires_at, write_id,
                             fence, lease_until)
    VALUES (%(run)s, %(status)s, 1, %(node)s, 1, %(nbytes)s, 0, 0, 0, %(created)s, %(created)s, %(expires)s,
            %(wid)s, %(fence)s, %(until)s)
    ON CONFLICT (run_id) DO NOTHING
    RETURNING version
), ins AS (
    INSERT INTO tether_checkpoints (run_id, version, kind, node_id, status, created_at, nbytes, payload)
    SELECT %(run)s, run.version, 'full', %(node)s, %(status)s, %(created)s, %(nbytes)s, %(payload)s FROM run
    RETURNING version
)
SELECT version FROM ins
"""
"""The common write, a run at a known version, as one statement: one round trip instead of
five (BEGIN, SELECT … FOR UPDATE, INSERT, UPDATE, COMMIT). When it changes nothing (a new
or expired run, a conflict, a status mismatch) the general transaction runs and says why."""

_FAST_SEAL = (
    _CUR
    + """, ok AS (
    SELECT cur.version FROM cur
    WHERE EXISTS (
        SELECT 1 FROM tether_checkpoints
        WHERE run_id = %(run)s AND version = %(from)s AND kind IN ('delta', 'segment')
    ) AND NOT EXISTS (
        SELECT 1 FROM tether_checkpoints
        WHERE run_id = %(run)s AND version >= %(from)s AND version <= cur.version AND kind = 'full'
    )
), seg AS (
    UPDATE tether_checkpoints SET kind = 'segment', payload = %(payload)s, nbytes = %(nbytes)s
    WHERE run_id = %(run)s AND version = %(from)s AND EXISTS (SELECT 1 FROM ok)
), sealed AS (
    UPDATE tether_checkpoints SET kind = 'sealed', payload = ''::bytea, nbytes = 0
    WHERE run_id = %(run)s AND version > %(from)s AND version <= (SELECT version FROM ok)
      AND kind <> 'sealed'
), ins AS (
    INSERT INTO tether_checkpoints (run_id, version, kind, node_id, status, created_at, nbytes, payload)
    SELECT %(run)s, ok.version + 1, 'sealed', %(node)s, %(status)s, %(created)s, 0, ''::bytea
    FROM ok
    RETURNING version
)
UPDATE tether_runs AS r SET
    status = %(status)s, version = ins.version, node_id = %(node)s,
    updated_at = %(created)s, expires_at = %(expires)s,"""
    + _LEASE_SET
    + """
    growth_bytes = cur.growth_bytes + %(growth)s::bigint,
    rewrite_bytes = cur.rewrite_bytes + %(rewrite)s::bigint,
    chain_len = cur.chain_len + 1,
    write_id = %(wid)s
FROM cur, ins
WHERE r.run_id = %(run)s
RETURNING r.version, r.base_version, r.base_bytes, r.growth_bytes, r.rewrite_bytes, r.chain_len, r.fence
"""
)
"""A segment write (see ``Write.seal_from``) as one statement: the segment replaces its
first row, the rows it packs and the new version are stored sealed. When it changes
nothing (the run moved, or its rows are not what the segment packs) the general
transaction runs and says why (``StaleSeal``, ``VersionConflict``...)."""


MAX_PAYLOAD_BYTES = (1 << 30) - 1024
"""PostgreSQL stores at most 1 GiB in one ``bytea`` value (and in one protocol message)."""

_TRANSIENT = {"40P01": "deadlock", "40001": "serialization failure", "55P03": "lock not available"}
_NOT_WRITABLE = {
    "53100": ("disk full", "the disk or tablespace is full: free space or move the tables"),
    "25006": ("read-only", "the server is read-only (a standby?): point the store at the primary"),
}


def _translate(exc: Exception) -> StoreError:
    """A psycopg error as the store error for its cause (by SQLSTATE, then by class)."""
    psycopg = _psycopg()
    state = getattr(exc, "sqlstate", None) or ""
    if state in _TRANSIENT:
        return StoreUnavailable(f"postgresql: {_TRANSIENT[state]}, the transaction was rolled back: {exc}")
    if state in _NOT_WRITABLE:
        reason, fix = _NOT_WRITABLE[state]
        return StoreNotWritable(f"postgresql: {exc} ({fix}; then resume the run)", reason=reason)
    if state == "54000":
        return StateTooLarge(f"postgresql: {exc} (a server limit: keep big data out of the state)")
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return StoreUnavailable(f"postgresql: {exc}")
    return StoreError(f"postgresql: {exc}")


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise ConfigError("PostgresStore needs psycopg: pip install 'tether[postgres]'") from None
    return psycopg


class _PgTx:
    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn

    async def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        cur = await self._conn.execute(sql.replace("?", "%s"), params or None)
        return cur.rowcount

    async def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cur = await self._conn.execute(sql.replace("?", "%s"), params or None, binary=True)
        return await cur.fetchall()

    async def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        cur = await self._conn.execute(sql.replace("?", "%s"), params or None, binary=True)
        return await cur.fetchone()


class PostgresBackend(SqlBackend):
    """Checkpoints in PostgreSQL tables ``tether_runs`` and ``tether_checkpoints``.

    One connection per store, used by one transaction at a time; give each worker
    process its own store. Pass ``conn=`` to reuse an open ``psycopg.AsyncConnection``
    (it must be in autocommit mode; the store then does not close it).

    ``connect``: how to open the connection (a coroutine function of ``conninfo`` and
    ``connect_timeout`` that returns a connection in autocommit mode), instead of
    ``psycopg.AsyncConnection.connect``; ``lock``: what keeps the connection to one user at a time, instead of
    an ``asyncio.Lock``. A blocking twin (:meth:`blocking_from_url`) passes both: a sync
    psycopg connection whose calls never suspend, and a thread lock.
    """

    dialect = _DIALECT

    def __init__(
        self,
        conninfo: str = "",
        *,
        conn: psycopg.AsyncConnection[Any] | None = None,
        connect_timeout: float = 10.0,
        connect: Callable[[str, float], Awaitable[Any]] | None = None,
        lock: AbstractAsyncContextManager[Any] | None = None,
    ) -> None:
        super().__init__()
        _psycopg()
        self._small: dict[str, bool] = {}
        """Runs whose chain held no payload to slice when last read or written here: read
        whole, with a statement psycopg prepares (see ``stores/_pg_slices.py``)."""
        self._conninfo = conninfo
        self._conn = conn
        self._owns = conn is None
        self._timeout = connect_timeout
        self._connect = connect or _connect_async
        self._lock = lock or asyncio.Lock()
        self._delta_cursor: tuple[Any, Any] | None = None
        """``(connection, cursor)``: the cursor every plain delta runs on, made once per
        connection (a cursor made per call costs a sixth of a put's round trip in CPU)."""

    @property
    def conninfo(self) -> str:
        """How to open another connection to this database (a change feed listens on its own)."""
        return self._conninfo

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresBackend:
        if url.startswith("postgres://"):
            url = "postgresql://" + url[len("postgres://") :]
        return cls(url, **options)

    @classmethod
    def blocking_from_url(cls, url: str, **options: Any) -> PostgresBackend | None:
        """The blocking twin of ``from_url(url, **options)``: psycopg's sync connection in the
        calling thread, behind the async connection's interface; None on a connection the
        caller gave (``conn=``), which is async."""
        if options.get("conn") is not None:
            return None
        return cls.from_url(url, connect=connect_sync, lock=BlockingLock(), **options)

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = await self._connect(self._conninfo, self._timeout)
        return self._conn

    @asynccontextmanager
    async def _guard(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """The connection, one user at a time, with driver errors translated."""
        psycopg = _psycopg()
        async with self._lock:
            try:
                yield await self._connection()
            except TetherError:
                raise
            except psycopg.errors.UniqueViolation:
                raise
            except psycopg.Error as exc:
                conn = self._conn
                if conn is not None and (conn.closed or getattr(conn, "broken", False)):
                    self._conn = None  # a lost connection: the next call reconnects
                raise _translate(exc) from exc
            except OSError as exc:
                self._conn = None
                raise StoreUnavailable(f"postgresql: {exc}") from exc

    @asynccontextmanager
    async def _tx(self, *, write: bool) -> AsyncIterator[Tx]:
        async with self._guard() as conn, conn.transaction():
            if not write:
                await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            yield _PgTx(conn)

    async def _query(
        self, sql: str, params: Sequence[Any] = (), *, run_id: str | None = None
    ) -> list[tuple[Any, ...]]:
        plan = None if run_id is None else sliced(sql)
        async with self._guard() as conn:  # autocommit: one statement, one round trip
            if plan is None or run_id in self._small:
                # (a statement read whole is prepared after a few uses; a stream never is)
                cur = await conn.execute(sql.replace("?", "%s"), params or None, binary=True)
                rows = await cur.fetchall()
            else:
                statement, k, v = plan
                into = Slices(k, v)
                stream: Any = slices_cursor(conn).stream(statement.replace("?", "%s"), params or None)
                try:  # row by row (one result each): the slices' buffers are reused
                    async for row in stream:
                        into.add(row)
                finally:
                    await stream.aclose()
                rows = into.result()
        if plan is not None and run_id is not None:
            k = plan[1]
            small = all(r[k] is None or len(r[k]) <= SLICE for r in rows)
            _hint(self._small, run_id, True if small else None)
        return rows

    async def _commit_write(self, w: Write) -> tuple[int, ChainStats]:
        if len(w.payload) > SLICE:
            _hint(self._small, w.run_id, None)
        if len(w.payload) > MAX_PAYLOAD_BYTES:
            raise StateTooLarge(
                f"run {w.run_id!r}: a checkpoint of {len(w.payload)} bytes is over PostgreSQL's "
                f"limit of {MAX_PAYLOAD_BYTES} bytes for one value; keep big data out of the "
                "state (store it as a file or an artefact and keep its id)",
                run_id=w.run_id,
                size=len(w.payload),
                limit=MAX_PAYLOAD_BYTES,
            )
        held = w.fence and not w.take  # (a holder's write to a new run: the general path refuses it)
        if w.expected_version == 0 and w.kind == "full" and w.require_status is None and not held:
            taken = next_fence(0, w.created_at) if w.take else 0
            params = {
                "run": w.run_id,
                "status": str(w.status),
                "node": w.node_id,
                "nbytes": len(w.payload),
                "created": w.created_at,
                "expires": w.expires_at,
                "payload": w.payload,
                "wid": w.write_id or None,
                "fence": taken,
                "until": (w.lease_until or None) if w.take else None,
            }
            async with self._guard() as conn:
                cur = await conn.execute(_FAST_CREATE, params)
                created = await cur.fetchone()
            if created is not None:
                if w.take:
                    w.fence = taken
                return 1, chain_stats(1, len(w.payload), 0, 0, 0)
        if w.expected_version and w.kind == "delta" and not (w.take or w.require_status):
            return await self._write_delta(w)
        if w.expected_version:
            params = {
                "run": w.run_id,
                "expected": w.expected_version,
                "now": time.time(),
                "require": None if w.require_status is None else str(w.require_status),
                "kind": w.kind,
                "full": w.kind == "full",
                "node": w.node_id,
                "status": str(w.status),
                "created": w.created_at,
                "nbytes": len(w.payload),
                "payload": w.payload,
                "expires": w.expires_at,
                "growth": w.growth_bytes,
                "rewrite": w.rewrite_bytes,
                "wid": w.write_id or None,
                "from": w.seal_from,
                "fence": w.fence,
                "take": w.take,
                "floor": int(w.created_at * 1000),
                "set_until": bool(w.take or w.fence) and w.lease_until is not None,
                "until": w.lease_until or None,
            }
            try:
                async with self._guard() as conn:
                    sql = _FAST_SEAL if w.kind == "segment" else _FAST_WRITE
                    cur = await conn.execute(sql, params)
                    row = await cur.fetchone()
            except Exception as exc:
                if self._is_duplicate(exc):
                    raise VersionConflict(w.run_id, expected=w.expected_version, actual=None) from exc
                raise
            if row is not None:
                if w.take:
                    w.fence = int(row[6])
                return int(row[0]), chain_stats(
                    int(row[1]), int(row[2]), int(row[3]), int(row[4]), int(row[5])
                )
        return await super()._commit_write(w)

    async def _write_delta(self, w: Write) -> tuple[int, ChainStats]:
        """A plain delta (``_DELTA_WRITE``, a holder's ``_HELD_DELTA_WRITE``), with the
        parameters its statement names only."""
        params: dict[str, Any] = {
            "run": w.run_id,
            "expected": w.expected_version,
            "now": time.time(),
            "node": w.node_id,
            "status": str(w.status),
            "created": w.created_at,
            "nbytes": len(w.payload),
            "payload": w.payload,
            "expires": w.expires_at,
            "growth": w.growth_bytes,
            "rewrite": w.rewrite_bytes,
            "wid": w.write_id or None,
        }
        sql = _DELTA_WRITE
        if w.fence:
            sql = _HELD_DELTA_WRITE
            params.update(fence=w.fence, set_until=w.lease_until is not None, until=w.lease_until or None)
        try:
            async with self._guard() as conn:
                held = self._delta_cursor
                if held is None or held[0] is not conn:
                    held = self._delta_cursor = (conn, conn.cursor())
                cur = held[1]
                await cur.execute(sql, params)
                row = await cur.fetchone()
        except Exception as exc:
            if self._is_duplicate(exc):
                raise VersionConflict(w.run_id, expected=w.expected_version, actual=None) from exc
            raise
        if row is None:  # (the general transaction says why)
            return await super()._commit_write(w)
        return int(row[0]), chain_stats(int(row[1]), int(row[2]), int(row[3]), int(row[4]), int(row[5]))

    def _is_duplicate(self, exc: BaseException) -> bool:
        return isinstance(exc, _psycopg().errors.UniqueViolation)

    async def setup(self) -> None:
        await self._apply_migrations()

    async def aclose(self) -> None:
        if self._owns and self._conn is not None and not self._conn.closed:
            await self._conn.close()
        self._conn = self._delta_cursor = None


async def _connect_async(conninfo: str, connect_timeout: float) -> psycopg.AsyncConnection[Any]:
    conn: psycopg.AsyncConnection[Any] = await _psycopg().AsyncConnection.connect(
        conninfo, autocommit=True, connect_timeout=max(1, int(connect_timeout))
    )
    return conn


class PostgresStore(SqlStore):
    """A :class:`CheckpointStore` on a :class:`PostgresBackend`; the backend's options as it takes
    them, the store's (``codec``, ``expiry``, ``compaction``, ``retry``) as
    :class:`CheckpointStore` does."""

    scheme = "postgresql"
    backend_class = PostgresBackend

    def __init__(self, conninfo: str = "", **options: Any) -> None:
        mine = split_store_options(options)
        super().__init__(PostgresBackend(conninfo, **options), **mine)
