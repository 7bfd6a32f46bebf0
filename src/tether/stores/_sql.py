"""The SQL stores' shared logic: one algorithm, three dialects (SQLite, PostgreSQL, MySQL).

Each backend supplies a :class:`Dialect` (types, placeholder, row locking) and
``_tx()``, an async context manager yielding a :class:`Tx` inside one database
transaction. Everything else (atomic versioned writes, chain reads, history, expiry,
prune) is written here once.

Two tables::

    tether_runs         one row per run: status, latest version, chain stats, expiry
    tether_checkpoints  one row per version: kind (full|delta|segment|sealed), node, payload

A write locks the run's row (``FOR UPDATE``, or SQLite's ``BEGIN IMMEDIATE``), checks
the expected version, inserts the new version and updates the run row in the same
transaction: a crash at any instant leaves either the old or the new version.
Reads never aggregate payloads into one string (MariaDB's GROUP_CONCAT cuts at 1 MiB).
"""

from __future__ import annotations

import abc
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, NamedTuple, TypeVar

from tether.errors import CheckpointCorrupt, LeaseLost, RunExpired, RunNotFound, VersionConflict
from tether.state.model import NO_CHAIN, ChainStats, CheckpointInfo, RunInfo, RunStatus, chain_stats
from tether.stores._chain import StaleSeal, Write, check_write, next_fence
from tether.stores._sql_chain import (
    CHAIN_SQL,
    ChainHint,
    chain_of,
    hint_of,
    hinted_chain,
    hinted_query,
    skips_sealed,
)
from tether.stores._sql_schema import Dialect, Tx
from tether.stores.backend import BackendSettings, Capabilities, StoredRow
from tether.stores.backend import remember as _hint
from tether.stores.backend import utc as _utc
from tether.stores.base import CheckpointStore

__all__ = ["Dialect", "SqlBackend", "SqlStore", "Tx"]

T = TypeVar("T")


_RUN_COLS = (
    "run_id, status, version, node_id, base_version, base_bytes, growth_bytes, "
    "rewrite_bytes, chain_len, created_at, updated_at, expires_at, fence, lease_until"
)
_C = 14
"""Where a checkpoint's columns start in a row that selects ``_RUN_COLS`` first."""


_RUN_COLS_R = ", ".join(f"r.{c.strip()}" for c in _RUN_COLS.split(","))
_VERSIONS_SQL = "SELECT version FROM tether_checkpoints WHERE run_id = ?"
_STATUS_OF = {s.value: s for s in RunStatus}


def _run_info(row: Sequence[Any]) -> RunInfo:
    return RunInfo(
        run_id=row[0],
        status=RunStatus(row[1]),
        version=int(row[2]),
        node_id=row[3],
        created_at=_utc(row[9]),
        updated_at=_utc(row[10]),
        expires_at=None if row[11] is None else _utc(row[11]),
        chain=ChainStats(
            base_version=int(row[4]),
            base_bytes=int(row[5]),
            growth_bytes=int(row[6]),
            rewrite_bytes=int(row[7]),
            length=int(row[8]),
        ),
        fence=int(row[12]),
        lease_until=None if row[13] is None else float(row[13]),
    )


class _Head(NamedTuple):
    """What a write reads of the run row it follows (a ``RunInfo`` without the times,
    which a write never reads)."""

    version: int
    status: RunStatus
    chain: ChainStats
    fence: int


def _head(row: Sequence[Any]) -> _Head:
    return _Head(
        int(row[2]),
        _STATUS_OF[row[1]],
        chain_stats(int(row[4]), int(row[5]), int(row[6]), int(row[7]), int(row[8])),
        int(row[12]),
    )


def _expired(expires_at: float | None, now: float) -> bool:
    return expires_at is not None and expires_at <= now


class SqlBackend(abc.ABC):
    """Shared implementation of every SQL backend."""

    dialect: Dialect
    capabilities = Capabilities(seals=True)

    def __init__(self) -> None:
        self._chains: dict[str, ChainHint] = {}
        """Runs' latest chains as this store last wrote or read them, so that a load reads
        just their rows by key (see :func:`hinted_chain`)."""

    @abc.abstractmethod
    def _tx(self, *, write: bool) -> AbstractAsyncContextManager[Tx]:
        """A transaction; drivers' exceptions leave it as StoreError subclasses."""

    async def _in_tx(self, fn: Callable[[Tx], Awaitable[T]], *, write: bool) -> T:
        """Run ``fn`` inside one transaction (SQLite overrides this to run it in one hop)."""
        async with self._tx(write=write) as tx:
            return await fn(tx)

    async def _query(
        self, sql: str, params: Sequence[Any] = (), *, run_id: str | None = None
    ) -> list[tuple[Any, ...]]:
        """One read-only statement; a single statement is a consistent snapshot on every
        engine, so backends override this to skip BEGIN/COMMIT round trips. ``run_id``
        marks a read of that run's chain (possibly megabytes)."""
        async with self._tx(write=False) as tx:
            return await tx.all(sql, params)

    @abc.abstractmethod
    def _is_duplicate(self, exc: BaseException) -> bool:
        """True when ``exc`` is a primary-key violation (two writers created one run)."""

    async def _apply_migrations(self) -> None:
        async with self._tx(write=True) as tx:
            if self.dialect.migrate_lock:
                await tx.all(self.dialect.migrate_lock)
            if not (self.dialect.schema_exists and await tx.one(self.dialect.schema_exists)):
                await tx.run("CREATE TABLE IF NOT EXISTS tether_schema (version INTEGER NOT NULL)")
            row = await tx.one("SELECT MAX(version) FROM tether_schema")
            current = int(row[0]) if row and row[0] is not None else 0
            for number, statements in enumerate(self.dialect.migrations(), start=1):
                if number <= current:
                    continue
                for sql in statements:
                    await tx.run(sql)
                await tx.run("INSERT INTO tether_schema (version) VALUES (?)", (number,))

    # -- writes -------------------------------------------------------------------
    async def append(self, w: Write) -> tuple[int, ChainStats]:
        try:
            version, chain = await self._commit_write(w)
        except BaseException:
            _hint(self._chains, w.run_id, None)
            raise
        prev = self._chains.get(w.run_id)
        if w.kind == "full":
            hint: ChainHint | None = (version, version, (version,))
        elif prev is None or prev[1] != version - 1:
            hint = None
        elif w.kind == "segment":
            hint = (prev[0], version, (*(c for c in prev[2] if c < w.seal_from), w.seal_from))
        else:
            hint = (prev[0], version, (*prev[2], version))
        _hint(self._chains, w.run_id, hint)
        return version, chain

    async def _commit_write(self, w: Write) -> tuple[int, ChainStats]:
        """The write itself (a backend may override it with a faster statement)."""
        attempts = 3 if w.expected_version is None else 1
        for attempt in range(attempts):
            try:
                return await self._in_tx(lambda tx: self._write_in(tx, w), write=True)
            except Exception as exc:
                if not self._is_duplicate(exc):
                    raise
                if attempt + 1 >= attempts:
                    raise VersionConflict(w.run_id, expected=w.expected_version, actual=None) from exc
        raise AssertionError("unreachable")

    async def _write_in(self, tx: Tx, w: Write) -> tuple[int, ChainStats]:
        row = await tx.one(
            f"SELECT {_RUN_COLS}, write_id FROM tether_runs WHERE run_id = ? {self.dialect.lock}",
            (w.run_id,),
        )
        if row is not None and _expired(row[11], time.time()):
            if w.expected_version:  # the writer's run is gone, not taken by another writer
                raise RunExpired(w.run_id, row[11])
            await self._drop(tx, w.run_id)
            row = None
        info = None if row is None else _head(row)
        current = info.version if info else 0
        fence = info.fence if info else 0
        if check_write(w, info, write_id=None if row is None else row[_C], fence=fence):
            assert info is not None
            if w.take:
                w.fence = fence
            return current, info.chain  # this very write landed; its reply was lost
        if w.take:
            fence = w.fence = next_fence(fence, w.created_at)
        until = row[13] if row is not None else None
        if (w.take or w.fence) and w.lease_until is not None:
            until = w.lease_until or None
        version = current + 1
        chain = w.chain_after(info.chain if info else NO_CHAIN, version)
        kind, payload = w.kind, w.payload
        if kind == "segment":
            await self._seal_rows(tx, w, version)
            kind, payload = "sealed", b""
        await tx.run(
            "INSERT INTO tether_checkpoints (run_id, version, kind, node_id, status, created_at, "
            "nbytes, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (w.run_id, version, kind, w.node_id, str(w.status), w.created_at, len(payload), payload),
        )
        stats = (
            chain.base_version,
            chain.base_bytes,
            chain.growth_bytes,
            chain.rewrite_bytes,
            chain.length,
        )
        if info is None:
            await tx.run(
                f"INSERT INTO tether_runs ({_RUN_COLS}, write_id) VALUES ({', '.join('?' * 15)})",
                (
                    w.run_id,
                    str(w.status),
                    version,
                    w.node_id,
                    *stats,
                    w.created_at,
                    w.created_at,
                    w.expires_at,
                    fence,
                    until,
                    w.write_id or None,
                ),
            )
        else:
            await tx.run(
                "UPDATE tether_runs SET status = ?, version = ?, node_id = ?, base_version = ?, "
                "base_bytes = ?, growth_bytes = ?, rewrite_bytes = ?, chain_len = ?, updated_at = ?, "
                "expires_at = ?, fence = ?, lease_until = ?, write_id = ? WHERE run_id = ?",
                (
                    str(w.status),
                    version,
                    w.node_id,
                    *stats,
                    w.created_at,
                    w.expires_at,
                    fence,
                    until,
                    w.write_id or None,
                    w.run_id,
                ),
            )
        return version, chain

    async def _seal_rows(self, tx: Tx, w: Write, version: int) -> None:
        """Store ``w``'s segment in row ``w.seal_from`` and seal the rows after it, in the
        write's transaction; StaleSeal (the transaction rolls back) unless that row holds a
        delta or a segment and no row from it on is full (a prune since)."""
        # deleted and inserted again, not updated: a row that shrinks in place leaves its
        # page as empty as it was (SQLite rebalances pages on a delete, not on an update),
        # and an update writes the new payload before it frees the old one, so the file
        # would grow by the segment it replaces at each merge. Deleted first, the rows free
        # pages the segment is then written into.
        rows = await tx.all(
            "SELECT version, kind, node_id, status, created_at FROM tether_checkpoints "
            "WHERE run_id = ? AND version >= ? AND version < ? AND kind <> 'sealed'",
            (w.run_id, w.seal_from, version),
        )
        kinds = {int(r[0]): r[1] for r in rows}
        if kinds.get(w.seal_from) not in ("delta", "segment") or "full" in kinds.values():
            raise StaleSeal(w.run_id)  # (nothing changed yet)
        await tx.run(
            "DELETE FROM tether_checkpoints WHERE run_id = ? AND version >= ? AND version < ? "
            "AND kind <> 'sealed'",
            (w.run_id, w.seal_from, version),
        )
        for number, _kind, node, status, created in rows:
            packed = int(number) == w.seal_from
            await tx.run(
                "INSERT INTO tether_checkpoints (run_id, version, kind, node_id, status, created_at, "
                "nbytes, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    w.run_id,
                    number,
                    "segment" if packed else "sealed",
                    node,
                    status,
                    created,
                    len(w.payload) if packed else 0,
                    w.payload if packed else b"",
                ),
            )

    async def _drop(self, tx: Tx, run_id: str) -> int:
        n = await tx.run("DELETE FROM tether_checkpoints WHERE run_id = ?", (run_id,))
        m = await tx.run("DELETE FROM tether_runs WHERE run_id = ?", (run_id,))
        return n + m

    # -- reads (one statement each: one round trip) ----------------------------------
    async def _live_run(self, tx: Tx, run_id: str) -> RunInfo | None:
        row = await tx.one(f"SELECT {_RUN_COLS} FROM tether_runs WHERE run_id = ?", (run_id,))
        if row is None or _expired(row[11], time.time()):
            return None
        return _run_info(row)

    async def read(self, run_id: str, version: int | None) -> tuple[RunInfo | None, list[StoredRow]]:
        cols = _RUN_COLS_R
        if version is None:
            on = (
                "c.version >= r.base_version AND c.version <= r.version "
                "AND (c.kind <> 'sealed' OR c.version = r.version)"
            )
            params: list[Any] = [run_id]
        else:
            on = (
                "c.version <= ? AND (c.kind <> 'sealed' OR c.version = ?) "
                "AND c.version >= (SELECT MAX(f.version) FROM tether_checkpoints f "
                "WHERE f.run_id = r.run_id AND f.version <= ? AND f.kind = 'full')"
            )
            params = [version, version, version, run_id]
        rows = await self._query(
            f"SELECT {cols}, c.version, c.kind, c.node_id, c.status, c.created_at, c.payload "
            f"FROM tether_runs r LEFT JOIN tether_checkpoints c ON c.run_id = r.run_id AND {on} "
            "WHERE r.run_id = ? ORDER BY c.version",
            params,
            run_id=run_id,
        )
        if not rows or _expired(rows[0][11], time.time()):
            return None, []
        info = _run_info(rows[0])
        target = info.version if version is None else version
        if rows[0][_C] is None or int(rows[-1][_C]) != target:
            return info, []
        status_of = _STATUS_OF
        return info, [
            StoredRow(
                run_id=run_id,
                version=int(r[_C]),
                kind=r[_C + 1],
                node_id=r[_C + 2],
                status=status_of[r[_C + 3]],
                created_at=float(r[_C + 4]),
                payload=r[_C + 5],
            )
            for r in rows
        ]

    async def read_chain(self, run_id: str, version: int | None) -> list[tuple[int, bytes]]:
        if version is not None:
            _info, rows = await self.read(run_id, version)
            return [(r.version, r.payload) for r in rows]
        hint = self._chains.get(run_id)
        if hint is not None and skips_sealed(hint):
            chain = hinted_chain(await self._query(*hinted_query(run_id, hint), run_id=run_id), hint)
            if chain is not None:
                return chain
        chain = chain_of(await self._query(CHAIN_SQL, (run_id, time.time()), run_id=run_id))
        _hint(self._chains, run_id, hint_of(chain))
        return chain

    async def history(self, run_id: str, *, before: int | None, limit: int | None) -> list[CheckpointInfo]:
        sql = (
            "SELECT c.version, c.kind, c.node_id, c.status, c.created_at, c.nbytes FROM tether_checkpoints c "
            "JOIN tether_runs r ON r.run_id = c.run_id "
            "WHERE c.run_id = ? AND (r.expires_at IS NULL OR r.expires_at > ?)"
        )
        params: list[Any] = [run_id, time.time()]
        if before is not None:
            sql += " AND c.version < ?"
            params.append(before)
        sql += " ORDER BY c.version DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        rows = await self._query(sql, params)
        return [
            CheckpointInfo(
                run_id=run_id,
                version=int(r[0]),
                kind=r[1],
                node_id=r[2],
                status=RunStatus(r[3]),
                timestamp=_utc(float(r[4])),
                size=int(r[5]),
            )
            for r in rows
        ]

    async def is_expired(self, run_id: str) -> bool:
        """Asked after a load found nothing: True for an expired run, CheckpointCorrupt for a
        live run whose latest row is gone (a load must not call that "not found")."""
        rows = await self._query(
            "SELECT r.expires_at, r.version, (SELECT COUNT(*) FROM tether_checkpoints c "
            "WHERE c.run_id = r.run_id AND c.version = r.version) FROM tether_runs r WHERE r.run_id = ?",
            (run_id,),
        )
        if not rows:
            return False
        expires_at, version, present = rows[0]
        if _expired(expires_at, time.time()):
            return True
        if not int(present):
            raise CheckpointCorrupt(
                f"the row of version {version} is missing while its run is stored (deleted by "
                "hand, or a damaged database?); roll back to an earlier version or restore a copy",
                run_id=run_id,
                version=int(version),
            )
        return False  # created since the load looked: nothing was there then

    async def get_run(self, run_id: str) -> RunInfo | None:
        rows = await self._query(f"SELECT {_RUN_COLS} FROM tether_runs WHERE run_id = ?", (run_id,))
        if not rows or _expired(rows[0][11], time.time()):
            return None
        return _run_info(rows[0])

    async def list_runs(
        self,
        *,
        status: RunStatus | None,
        limit: int,
        offset: int,
        updated_after: float | None = None,
        updated_before: float | None = None,
    ) -> list[RunInfo]:
        sql = f"SELECT {_RUN_COLS} FROM tether_runs WHERE (expires_at IS NULL OR expires_at > ?)"
        params: list[Any] = [time.time()]
        if status is not None:
            sql += " AND status = ?"
            params.append(str(RunStatus(status)))
        if updated_after is not None:
            sql += " AND updated_at > ?"
            params.append(updated_after)
        if updated_before is not None:
            sql += " AND updated_at < ?"
            params.append(updated_before)
        sql += " ORDER BY updated_at DESC, run_id DESC LIMIT ? OFFSET ?"
        params += [limit, offset]
        return [_run_info(r) for r in await self._query(sql, params)]

    # -- other changes --------------------------------------------------------------
    async def set_status(self, run_id: str, status: RunStatus, expires_at: float | None) -> None:
        async def change(tx: Tx) -> None:
            if await self._live_run(tx, run_id) is None:
                row = await tx.one("SELECT expires_at FROM tether_runs WHERE run_id = ?", (run_id,))
                raise RunNotFound(run_id) if row is None else RunExpired(run_id, row[0])
            await tx.run(
                "UPDATE tether_runs SET status = ?, updated_at = ?, expires_at = ? WHERE run_id = ?",
                (str(status), time.time(), expires_at, run_id),
            )

        await self._in_tx(change, write=True)

    async def renew_lease(self, run_id: str, fence: int, until: float) -> None:
        changed = await self._in_tx(
            lambda tx: tx.run(
                "UPDATE tether_runs SET lease_until = ? "
                "WHERE run_id = ? AND fence = ? AND lease_until IS NOT NULL",
                (until, run_id, fence),
            ),
            write=True,
        )
        if changed:
            return
        rows = await self._query("SELECT fence, lease_until FROM tether_runs WHERE run_id = ?", (run_id,))
        if not rows or int(rows[0][0]) != fence or rows[0][1] is None:  # (None: released)
            raise LeaseLost(run_id, held=fence, current=int(rows[0][0]) if rows else 0)
        # (MySQL counts a row whose value did not change as unchanged: the lease is this one's)

    async def delete(self, run_id: str) -> bool:
        _hint(self._chains, run_id, None)
        return await self._in_tx(lambda tx: self._drop(tx, run_id), write=True) > 0

    async def rebase(self, run_id: str, version: int, payload: bytes, after: bytes = b"") -> int:
        _hint(self._chains, run_id, None)

        async def rebase(tx: Tx) -> int:
            row = await tx.one(
                f"SELECT {_RUN_COLS} FROM tether_runs WHERE run_id = ? {self.dialect.lock}",
                (run_id,),
            )
            if row is None or _expired(row[11], time.time()):
                raise RunNotFound(run_id)
            info = _run_info(row)
            changed = await tx.run(
                "UPDATE tether_checkpoints SET kind = 'full', payload = ?, nbytes = ? "
                "WHERE run_id = ? AND version = ?",
                (payload, len(payload), run_id, version),
            )
            if not changed:
                raise RunNotFound(run_id, version)
            if after:
                await tx.run(
                    "UPDATE tether_checkpoints SET kind = 'segment', payload = ?, nbytes = ? "
                    "WHERE run_id = ? AND version = ?",
                    (after, len(after), run_id, version + 1),
                )
            dropped = await tx.run(
                "DELETE FROM tether_checkpoints WHERE run_id = ? AND version < ?", (run_id, version)
            )
            if info.chain.base_version < version:
                await tx.run(
                    "UPDATE tether_runs SET base_version = ?, base_bytes = ?, chain_len = ? WHERE run_id = ?",
                    (version, len(payload), info.version - version, run_id),
                )
            return dropped

        return await self._in_tx(rebase, write=True)

    async def read_rows(self, run_id: str) -> tuple[RunInfo | None, list[StoredRow]]:
        sql = (
            f"SELECT {_RUN_COLS_R}, c.version, c.kind, c.node_id, c.status, c.created_at, c.payload "
            "FROM tether_runs r LEFT JOIN tether_checkpoints c ON c.run_id = r.run_id "
            "WHERE r.run_id = ? ORDER BY c.version"
        )
        rows = await self._in_tx(lambda tx: tx.all(sql, (run_id,)), write=False)
        if not rows or _expired(rows[0][11], time.time()):
            return None, []
        return _run_info(rows[0]), [
            StoredRow(
                run_id, int(r[_C]), r[_C + 1], r[_C + 2], _STATUS_OF[r[_C + 3]], float(r[_C + 4]), r[_C + 5]
            )
            for r in rows
            if r[_C] is not None
        ]

    async def rewrite_rows(self, run_id: str, payloads: Mapping[int, bytes], expected_version: int) -> bool:
        async def rewrite(tx: Tx) -> bool:
            row = await tx.one(
                f"SELECT {_RUN_COLS} FROM tether_runs WHERE run_id = ? {self.dialect.lock}", (run_id,)
            )
            if row is None or _expired(row[11], time.time()):
                raise RunNotFound(run_id)
            if _run_info(row).version != expected_version:
                return False
            stored = {int(r[0]) for r in await tx.all(_VERSIONS_SQL, (run_id,))}
            for version, payload in sorted(payloads.items()):
                if version not in stored:
                    raise RunNotFound(run_id, version)  # (raised inside: nothing is committed)
                await tx.run(
                    "UPDATE tether_checkpoints SET payload = ?, nbytes = ? WHERE run_id = ? AND version = ?",
                    (payload, len(payload), run_id, version),
                )
            return True

        return await self._in_tx(rewrite, write=True)

    async def purge_expired(self) -> int:
        now = time.time()

        async def purge(tx: Tx) -> int:
            rows = await tx.all("SELECT run_id FROM tether_runs WHERE expires_at <= ?", (now,))
            for (run_id,) in rows:
                await self._drop(tx, run_id)
            return len(rows)

        return await self._in_tx(purge, write=True)


class SqlStore(BackendSettings, CheckpointStore):
    """A :class:`CheckpointStore` on a SQL backend (the SQLite, PostgreSQL and MySQL stores)."""
