"""Tiered store: Redis in front for fast reads, a SQL store behind it as the authority.

A common production layout: Redis primary, MySQL persistence. Here SQL
(MySQL/MariaDB, PostgreSQL or SQLite) decides versions and conflicts and holds every
version; Redis holds a copy of each run's latest chain (its last full row and the
deltas after it), so loading the latest state is one Redis round trip.

A save is write-through:

1. ``begin``: a lease on the run's Redis copy (and a bump of its fence counter), so
   no reader trusts or refills the copy while the SQL commit is in flight;
2. the SQL transaction (version check, row, run record);
3. ``mirror``: the same row appended to the Redis copy if that copy is exactly at the
   previous version, else the copy is dropped; either way the lease is released.

A process killed between 2 and 3 leaves its lease behind: readers then go to SQL
until the lease expires, and the first read after that refills Redis. A Redis that
restarted (or was flushed) is detected too: copies written before the server's last
start are not trusted, and missing ones are refilled on the next read. Redis errors
never fail a save or a load once SQL has answered; they are logged and the run is
read from SQL by this process until Redis is usable again.

History, old versions, ``list_runs``, ``prune``, ``delete`` and ``purge_expired`` go
to SQL; ``delete`` and ``prune`` drop the Redis copy.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tether.errors import ConfigError, RunNotFound, RunNotPaused, StoreError, VersionConflict
from tether.state.model import ChainStats, CheckpointInfo, RunInfo, RunStatus
from tether.stores._chain import Write
from tether.stores.backend import Backend, BackendSettings, Capabilities, StoredRow
from tether.stores.base import CheckpointStore, split_store_options
from tether.stores.redis import RedisBackend, RedisCache, RedisStore

__all__ = ["TieredBackend", "TieredStore"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_NOT_COMMITTED = (VersionConflict, RunNotPaused, RunNotFound, ConfigError)
"""SQL errors that prove nothing was written, so the writer's lease can go at once."""


class TieredBackend:
    """Redis cache in front of a SQL backend; see the module docstring for the protocol.

    Args:
        redis: the Redis side, used as a cache (:class:`RedisCache`) that may evict: its
            ``allow_eviction`` is set.
        sql: the durable side.
        lease: seconds a writer's lease lasts; longer than any SQL commit should take.

    The backend owns both sides: ``aclose()`` closes them.
    """

    def __init__(self, *, redis: RedisBackend, sql: Backend, lease: float = 60.0) -> None:
        self.redis = redis
        self.cache = RedisCache(redis, indexed=False)  # list_runs comes from SQL
        self.sql = sql
        # a segment is written to SQL first, then mirrored
        self.capabilities = Capabilities(seals=sql.capabilities.seals)
        self.lease = lease
        redis.allow_eviction = True  # a cache: an evicted copy is refilled from SQL
        self._suspect: set[str] = set()
        """Runs whose Redis copy this process could not update: read them from SQL."""

    async def setup(self) -> None:
        await self.sql.setup()
        await self.redis.setup()

    async def aclose(self) -> None:
        try:
            await self.redis.aclose()
        finally:
            await self.sql.aclose()

    # -- best-effort Redis calls ---------------------------------------------------------
    async def _cache(self, run_id: str, what: str, call: Awaitable[T]) -> T | None:
        """Run one Redis step; on failure log it, mark the run suspect and return None."""
        try:
            return await call
        except StoreError as exc:
            self._suspect.add(run_id)
            logger.warning(
                "tiered: redis %s failed for run %s, reading it from SQL: %s",
                what,
                run_id,
                exc,
                extra={"run_id": run_id},
            )
            return None

    async def _trusted(self, run_id: str) -> bool:
        """Whether this process may read ``run_id`` from Redis (retries a failed drop)."""
        if run_id not in self._suspect:
            return True
        try:
            await self.cache.invalidate(run_id)
        except StoreError:
            return False
        self._suspect.discard(run_id)
        return True

    async def _lease(self, run_id: str) -> str:
        token = uuid.uuid4().hex
        await self._cache(run_id, "lease", self.cache.begin(run_id, token, time.time() + self.lease))
        return token

    async def _release_after(self, run_id: str, token: str, exc: BaseException) -> None:
        """After a failed SQL step: release the lease if SQL surely wrote nothing.

        On a conflict the Redis copy may be the stale one the writer read, so it is
        dropped unless it is at the version SQL reported. Other failures leave the
        lease to expire: SQL may or may not have committed.
        """
        if isinstance(exc, _NOT_COMMITTED):
            keep = exc.actual if isinstance(exc, VersionConflict) else None
            await self._cache(run_id, "release", self.cache.invalidate(run_id, token, keep=keep))

    # -- writes ---------------------------------------------------------------------------
    async def append(self, w: Write) -> tuple[int, ChainStats]:
        token = await self._lease(w.run_id)
        try:
            version, chain = await self.sql.append(w)
        except Exception as exc:
            await self._release_after(w.run_id, token, exc)
            raise
        applied = await self._cache(w.run_id, "mirror", self.cache.mirror(w, version, chain, token))
        if not applied:  # (the mirror hints the chain it applied)
            self.cache.hint(w.run_id, None)
            if applied is False:
                logger.debug("tiered: redis copy of %s was not at v%d; dropped", w.run_id, version - 1)
        return version, chain

    async def set_status(self, run_id: str, status: RunStatus, expires_at: float | None) -> None:
        token = await self._lease(run_id)
        try:
            await self.sql.set_status(run_id, status, expires_at)
            info = await self.sql.get_run(run_id)
        except Exception as exc:
            await self._release_after(run_id, token, exc)
            raise
        if info is None:
            await self._cache(run_id, "drop", self.cache.invalidate(run_id, token))
        else:
            await self._cache(run_id, "status", self.cache.mirror_status(info, token))

    async def renew_lease(self, run_id: str, fence: int, until: float) -> None:
        """SQL decides (its token is the authority), then the copy follows. No writer's lease
        on the copy: a renewal changes no row, and a copy that misses it reads as an older
        deadline, which a renewal a third of a lease later corrects."""
        await self.sql.renew_lease(run_id, fence, until)
        await self._cache(run_id, "renew", self.cache.renew(run_id, fence, until))

    async def delete(self, run_id: str) -> bool:
        token = await self._lease(run_id)
        deleted = await self.sql.delete(run_id)
        await self._cache(run_id, "drop", self.cache.invalidate(run_id, token))
        return deleted

    async def rebase(self, run_id: str, version: int, payload: bytes, after: bytes = b"") -> int:
        token = await self._lease(run_id)
        try:
            dropped = await self.sql.rebase(run_id, version, payload, after)
        except Exception as exc:
            await self._release_after(run_id, token, exc)
            raise
        await self._cache(run_id, "drop", self.cache.invalidate(run_id, token))
        return dropped

    async def rewrite_rows(self, run_id: str, payloads: Mapping[int, bytes], expected_version: int) -> bool:
        """SQL's rows rewritten under a lease, then the Redis copy dropped (the next read
        refills it); until then the copy holds the rows as they were, which mean the same."""
        token = await self._lease(run_id)
        try:
            done = await self.sql.rewrite_rows(run_id, payloads, expected_version)
        except Exception as exc:
            await self._release_after(run_id, token, exc)
            raise
        await self._cache(run_id, "drop", self.cache.invalidate(run_id, token))
        return done

    async def read_rows(self, run_id: str) -> tuple[RunInfo | None, list[StoredRow]]:
        return await self.sql.read_rows(run_id)

    async def purge_expired(self) -> int:
        """SQL deletes its expired runs; Redis has expired its copies by TTL already."""
        return await self.sql.purge_expired()

    # -- reads ----------------------------------------------------------------------------
    async def read_chain(self, run_id: str, version: int | None) -> list[tuple[int, bytes]]:
        """``load()``: the lean Redis read when the copy is trusted, else :meth:`_read`
        (which goes to SQL and refills Redis)."""
        if version is None and await self._trusted(run_id):
            chain = await self._cache(run_id, "read", self.cache.latest_chain(run_id))
            if chain:
                return chain
        _info, rows = await self.read(run_id, version)
        return [(r.version, r.payload) for r in rows]

    async def read(self, run_id: str, version: int | None) -> tuple[RunInfo | None, list[StoredRow]]:
        if version is not None or not await self._trusted(run_id):
            return await self.sql.read(run_id, version)
        hit = await self._cache(run_id, "read", self.cache.fetch(run_id))
        if hit is not None:
            info, rows, token = hit
            if info is not None and rows:
                return info, rows
            if info is not None:  # a record without its chain: not usable
                await self._cache(run_id, "drop", self.cache.invalidate(run_id))
                hit = None
        info, rows = await self.sql.read(run_id, None)
        if hit is not None and info is not None and rows:
            warmed = await self._cache(run_id, "refill", self.cache.warm(info, rows, hit[2]))
            logger.debug("tiered: %s v%d read from SQL, refilled=%s", run_id, info.version, warmed)
        return info, rows

    async def is_expired(self, run_id: str) -> bool:
        return await self.sql.is_expired(run_id)

    async def get_run(self, run_id: str) -> RunInfo | None:
        if await self._trusted(run_id):
            hit = await self._cache(run_id, "read", self.cache.fetch(run_id, record=True))
            if hit is not None and hit[0] is not None:
                return hit[0]
        return await self.sql.get_run(run_id)

    async def history(self, run_id: str, *, before: int | None, limit: int | None) -> list[CheckpointInfo]:
        return await self.sql.history(run_id, before=before, limit=limit)

    async def list_runs(
        self,
        *,
        status: RunStatus | None,
        limit: int,
        offset: int,
        updated_after: float | None = None,
        updated_before: float | None = None,
    ) -> list[RunInfo]:
        return await self.sql.list_runs(
            status=status,
            limit=limit,
            offset=offset,
            updated_after=updated_after,
            updated_before=updated_before,
        )


class TieredStore(BackendSettings, CheckpointStore):
    """A :class:`CheckpointStore` on a :class:`TieredBackend`: Redis in front of SQL.

    Args:
        redis: the Redis side (its own codec/expiry settings are unused: this store
            encodes payloads and computes expiry times for both sides).
        sql: the durable side, usually a ``SqlStore`` from ``create_store(sql_url)``.
        lease: seconds a writer's lease lasts; longer than any SQL commit should take.
        codec, expiry, compaction, retry: see :class:`CheckpointStore`.

    The store owns both sides: ``aclose()`` closes them.
    """

    scheme = "tiered+redis"

    def __init__(
        self, *, redis: RedisStore, sql: CheckpointStore, lease: float = 60.0, **options: Any
    ) -> None:
        if not isinstance(sql, CheckpointStore) or isinstance(sql, RedisStore | TieredStore):
            raise ConfigError("TieredStore needs a durable store (SQL) behind Redis")
        mine = split_store_options(options)
        super().__init__(TieredBackend(redis=redis.redis, sql=sql.backend, lease=lease), **mine)
        self.redis = redis
        self.sql = sql

    @property
    def tiered(self) -> TieredBackend:
        backend = self.backend
        assert isinstance(backend, TieredBackend)
        return backend

    @property
    def cache(self) -> RedisCache:
        return self.tiered.cache

    @property
    def lease(self) -> float:
        return self.tiered.lease

    @classmethod
    def from_url(cls, url: str, **options: Any) -> TieredStore:
        """``tiered+redis://host:6379/0?sql=<url-encoded SQL store URL>``.

        ``?prefix=`` sets the Redis key prefix. ``codec``, ``expiry``, ``compaction``
        and ``lease`` go to this store, other options to the Redis client.
        """
        from tether.stores.registry import create_store

        scheme, sep, rest = url.partition("://")
        if not sep or not scheme.lower().startswith("tiered+"):
            raise ConfigError(f"tiered store URL must start with tiered+redis:// (got {url!r})")
        parts = urlsplit(scheme[len("tiered+") :] + "://" + rest)
        query = parse_qsl(parts.query, keep_blank_values=True)
        sql_url = next((v for k, v in query if k == "sql"), None)
        if not sql_url:
            raise ConfigError(
                "tiered store URL needs the SQL store: tiered+redis://host:6379/0?sql="
                "mysql%3A%2F%2Fuser%40host%3A3306%2Fdb (URL-encoded)"
            )
        redis_url = urlunsplit(parts._replace(query=urlencode([kv for kv in query if kv[0] != "sql"])))
        mine = {
            k: options.pop(k) for k in ("codec", "expiry", "compaction", "lease", "retry") if k in options
        }
        options.setdefault("socket_timeout", 10.0)  # a hung Redis must not hang saves
        sql = create_store(sql_url)
        return cls(redis=RedisStore.from_url(redis_url, **options), sql=sql, **mine)
