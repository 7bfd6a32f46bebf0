"""The Redis store: checkpoints in plain Redis, with key TTLs as the expiry policy.

See the package docstring for the key layout. Every change is one script (scripts.py),
so a write checks the expected version and status, appends the row, updates the run
record and sets the TTLs in one step, and two processes racing on one version cannot
both win. A save is one round trip; loading the latest state is one too (two for big
chains, whose payloads skip the copy Lua makes of every string it returns).

Expiry is Redis's own: every key of a run gets ``PEXPIREAT`` at the run's
``expires_at`` (``PERSIST`` when None). Expired runs leave stale ids in ``P runs``;
``list_runs`` skips and removes them, ``purge_expired`` sweeps them all. Until then such
an id tells an expired run from one never stored, so a load or a write says
:class:`RunExpired` rather than "not found" (as the SQL stores do until they purge).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis.asyncio as aioredis

from tether.errors import (
    CheckpointCorrupt,
    ConfigError,
    LeaseLost,
    RunExpired,
    RunNotFound,
    RunNotPaused,
    VersionConflict,
)
from tether.state.model import ChainStats, CheckpointInfo, RunInfo, RunStatus
from tether.stores._chain import StaleSeal, Write
from tether.stores.backend import BackendSettings, Capabilities, StoredRow
from tether.stores.base import CheckpointStore, split_store_options
from tether.stores.redis.keyspace import Chain, Keyspace
from tether.stores.redis.records import chain_stats, checkpoint_info, run_info, stored_row, versions

__all__ = ["RedisBackend", "RedisStore"]

logger = logging.getLogger("tether.stores.redis")

READ_SIZE = 1 << 20
"""The blocking twin's socket reads, unless told otherwise (``socket_read_size``): redis-py
reads 64 KiB at a time and hands each read to its reply parser, so a 1 MB chain took some
40 reads and parser calls (400 at 10 MB); a read takes what the socket holds, up to this.
One buffer of this size per connection of the twin (it keeps one for its calls)."""


class RedisBackend:
    """Checkpoints in Redis, with key TTLs as the expiry policy.

    Args:
        client: a ``redis.asyncio.Redis`` created with ``decode_responses=False``.
            The store does not close a client it was given (``from_url`` does).
        prefix: prepended to every key, so several apps or tests can share a db.
        allow_eviction: see the attribute.
        indexed: False leaves runs out of the run index (``list_runs`` then finds
            none), for a store whose runs are listed elsewhere.
        owns_client: True closes ``client`` with the backend (``from_url`` sets it).
    """

    capabilities = Capabilities(seals=True)

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        prefix: str = "tether:",
        allow_eviction: bool = False,
        indexed: bool = True,
        owns_client: bool = False,
    ) -> None:
        self.allow_eviction = allow_eviction
        """False: :meth:`setup` refuses a server whose ``maxmemory-policy`` may evict this
        store's keys (every policy but ``noeviction``: tether sets TTLs on its keys, so
        ``volatile-*`` policies can evict them too). True: it logs a warning instead."""
        self.indexed = indexed
        self.keyspace = Keyspace(client, prefix)
        """The keys, scripts and reads this store shares with a :class:`RedisCache`."""
        self._owns_client = owns_client

    @property
    def client(self) -> aioredis.Redis:
        return self.keyspace.client

    @property
    def prefix(self) -> str:
        return self.keyspace.prefix

    @classmethod
    def from_url(cls, url: str, *, prefix: str | None = None, **options: Any) -> RedisBackend:
        """A backend on a new client for ``redis://host:port/db`` (or ``rediss://``).

        ``?prefix=`` in the URL sets the key prefix. ``allow_eviction`` and ``indexed`` go
        to the backend, any other option to ``redis.asyncio.from_url``.
        """
        return cls._on_new_client(url, prefix, options, aioredis.Redis.from_url)

    @classmethod
    def blocking_from_url(cls, url: str, *, prefix: str | None = None, **options: Any) -> RedisBackend:
        """The blocking twin of ``from_url(url, ...)``: the same keys and options on redis-py's
        sync client, used in the calling thread (see ``tether.stores.blocking``)."""
        import redis

        from tether.stores.redis.sync_client import SyncRedisClient

        def client(url: str, **kwargs: Any) -> Any:
            kwargs.setdefault("socket_read_size", READ_SIZE)
            return SyncRedisClient(redis.Redis.from_url(url, **kwargs))

        return cls._on_new_client(url, prefix, options, client)

    @classmethod
    def _on_new_client(
        cls, url: str, prefix: str | None, options: dict[str, Any], new_client: Any
    ) -> RedisBackend:
        store_opts = {k: options.pop(k) for k in ("allow_eviction", "indexed") if k in options}
        if options.pop("decode_responses", False):
            raise ConfigError("RedisStore stores bytes: do not set decode_responses")
        url, query = _pop_query(url, "prefix")
        url, evict = _pop_query(url, "allow_eviction")
        if evict is not None:
            store_opts["allow_eviction"] = evict.lower() in {"1", "true", "yes", "on"}
        options.setdefault("socket_connect_timeout", 5.0)
        try:
            client = new_client(url, decode_responses=False, **options)
        except ValueError as exc:
            raise ConfigError(f"bad Redis URL {url!r}: {exc}") from exc
        return cls(client, prefix=prefix or query or "tether:", owns_client=True, **store_opts)

    async def setup(self) -> None:
        """Check the server is reachable and new enough, and preload the scripts."""
        with self.keyspace.errors():
            info = await self.client.info("server")
            version = str(info.get("redis_version", "0"))
            if int(version.split(".")[0]) < 5:
                raise ConfigError(f"RedisStore needs Redis >= 5, the server runs {version}")
            await self._check_eviction()
            for script in self.keyspace.scripts.all():
                await self.client.script_load(script.script)

    async def _check_eviction(self) -> None:
        """Refuse (or, with ``allow_eviction``, warn about) a server that may evict keys: an
        evicted row makes its run unreadable, an evicted run record makes it look new."""
        memory = await self.client.info("memory")
        policy = str(memory.get("maxmemory_policy", "noeviction"))
        if policy == "noeviction":
            return
        message = (
            f"Redis at {self._where()} has maxmemory-policy {policy}: it may evict tether's "
            "keys (tether sets TTLs on them, so volatile-* policies can evict them too), and an "
            "evicted checkpoint is lost. Set `maxmemory-policy noeviction` on the server "
            "(CONFIG SET maxmemory-policy noeviction, and in redis.conf), use a tiered store "
            "(Redis in front of SQL), or pass allow_eviction=True (URL ?allow_eviction=1) to "
            "accept the risk"
        )
        if not self.allow_eviction:
            raise ConfigError(message)
        logger.warning("%s (allowed: allow_eviction=True)", message)

    def _where(self) -> str:
        kwargs = getattr(self.client.connection_pool, "connection_kwargs", {})
        return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"

    async def aclose(self) -> None:
        if self._owns_client:
            with self.keyspace.errors():
                await self.client.aclose()

    # -- writes ---------------------------------------------------------------------
    async def append(self, w: Write) -> tuple[int, ChainStats]:
        ks = self.keyspace
        with ks.errors():
            reply = await ks.scripts.write(
                ks.keys(w.run_id), row=w, expected=w.expected_version, indexed=self.indexed
            )
        tag = bytes(reply[0])
        if tag == b"conflict":
            if int(reply[1]) == 0 and w.expected_version:
                raise await self._gone(w.run_id)  # its keys are gone: expired (Redis TTL) or deleted
            raise VersionConflict(w.run_id, expected=w.expected_version, actual=int(reply[1]))
        if tag == b"status":
            raise RunNotPaused(w.run_id, bytes(reply[1]).decode())
        if tag == b"missing":
            raise await self._gone(w.run_id)
        if tag == b"stale":
            raise StaleSeal(w.run_id)
        if tag == b"fenced":
            raise LeaseLost(w.run_id, held=w.fence, current=int(reply[1]))
        if w.take:
            w.fence = int(reply[8])
        version, chain = int(reply[1]), chain_stats(reply[2:7])
        ks.hint(w.run_id, (chain.base_version, version, versions(reply[7])) if reply[7] else None)
        return version, chain

    async def set_status(self, run_id: str, status: RunStatus, expires_at: float | None) -> None:
        ks = self.keyspace
        with ks.errors():
            done = await ks.scripts.status(
                ks.keys(run_id),
                run_id=run_id,
                status=status,
                updated_at=time.time(),
                expires_at=expires_at,
                indexed=self.indexed,
            )
        if not done:
            raise await self._gone(run_id)

    async def renew_lease(self, run_id: str, fence: int, until: float) -> None:
        ks = self.keyspace
        with ks.errors():
            reply = await ks.scripts.renew(ks.keys(run_id), fence=fence, until=until)
        if int(reply[0]) != 1:
            raise LeaseLost(run_id, held=fence, current=int(reply[1]) if int(reply[0]) == 0 else 0)

    async def _gone(self, run_id: str) -> RunNotFound:
        """The error for a write to a run that is not there: expired, or never stored."""
        return RunExpired(run_id) if await self.is_expired(run_id) else RunNotFound(run_id)

    async def delete(self, run_id: str) -> bool:
        ks = self.keyspace
        ks.hint(run_id, None)
        with ks.errors():
            return await ks.scripts.delete(ks.keys(run_id), run_id=run_id)

    async def rebase(self, run_id: str, version: int, payload: bytes, after: bytes = b"") -> int:
        ks = self.keyspace
        ks.hint(run_id, None)
        with ks.errors():
            dropped = await ks.scripts.rebase(ks.keys(run_id), version=version, payload=payload, after=after)
        if dropped == -1:
            raise RunNotFound(run_id)
        if dropped == -2:
            raise RunNotFound(run_id, version)
        return dropped

    async def rewrite_rows(self, run_id: str, payloads: Mapping[int, bytes], expected_version: int) -> bool:
        ks = self.keyspace
        with ks.errors():
            done = await ks.scripts.rewrite(ks.keys(run_id), payloads=payloads, expected=expected_version)
        if done == -1:
            raise RunNotFound(run_id)
        if done <= -2:
            raise RunNotFound(run_id, -2 - done)
        return done == 1

    async def read_rows(self, run_id: str) -> tuple[RunInfo | None, list[StoredRow]]:
        keys = self.keyspace.keys(run_id)
        with self.keyspace.errors():
            async with self.client.pipeline(transaction=True) as pipe:  # MULTI: one snapshot
                pipe.hgetall(keys.run)
                pipe.zrangebyscore(keys.hist, "-inf", "+inf")
                pipe.hgetall(keys.rows)
                record, members, payloads = await pipe.execute()
        if not record or b"version" not in record:
            return None, []
        rows = []
        for m in members:
            version = m.split(b"|", 1)[0]
            payload = payloads.get(version)
            if payload is None:
                raise CheckpointCorrupt(
                    f"the row of version {int(version)} is missing from Redis while its run is stored",
                    run_id=run_id,
                    version=int(version),
                )
            rows.append(stored_row(run_id, m, payload))
        return run_info(run_id, record), rows

    # -- reads ----------------------------------------------------------------------
    async def read_chain(self, run_id: str, version: int | None) -> Chain:
        if version is None:
            chain = await self.keyspace.latest_chain(run_id, tiered=False)
            if chain is not None:
                return chain
        _info, rows = await self.read(run_id, version)
        return [(r.version, r.payload) for r in rows]

    async def is_expired(self, run_id: str) -> bool:
        """Asked after a read found no run: True when its id is still in the run index (Redis
        expired its keys; a delete removes the id). Rows left without their run record
        (evicted under memory pressure, or deleted by hand) are CheckpointCorrupt: the run
        would otherwise look new. An unindexed store cannot tell: False."""
        keys = self.keyspace.keys(run_id)
        with self.keyspace.errors():
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.exists(keys.run)
                pipe.exists(keys.rows, keys.hist)
                pipe.zscore(keys.runs, run_id)
                record, rows, indexed = await pipe.execute()
        if record:
            return False
        if rows:
            raise CheckpointCorrupt(
                "the run record is missing from Redis while its rows are stored (evicted under "
                "memory pressure, or deleted by hand?); set maxmemory-policy noeviction, and "
                "restore the run from a copy",
                run_id=run_id,
            )
        return self.indexed and indexed is not None

    async def read(self, run_id: str, version: int | None) -> tuple[RunInfo | None, list[StoredRow]]:
        info, rows, _ = await self.keyspace.fetch(run_id, version)
        return info, rows

    async def history(self, run_id: str, *, before: int | None, limit: int | None) -> list[CheckpointInfo]:
        if limit == 0:
            return []
        keys = self.keyspace.keys(run_id)
        top = "+inf" if before is None else f"({before}"
        with self.keyspace.errors():
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.exists(keys.run)
                pipe.zrevrangebyscore(keys.hist, top, "-inf", start=0, num=limit or -1)
                exists, members = await pipe.execute()
        if not exists:
            return []
        return [checkpoint_info(run_id, m) for m in members]

    async def get_run(self, run_id: str) -> RunInfo | None:
        info, _, _ = await self.keyspace.fetch(run_id, None, record=True)
        return info

    async def list_runs(
        self,
        *,
        status: RunStatus | None,
        limit: int,
        offset: int,
        updated_after: float | None = None,
        updated_before: float | None = None,
    ) -> list[RunInfo]:
        if limit <= 0:
            return []
        # the run index is scored by updated_at: a window is a range of scores
        high = "+inf" if updated_before is None else f"({updated_before!r}"
        low = "-inf" if updated_after is None else f"({updated_after!r}"
        want = None if status is None else RunStatus(status)
        found: list[RunInfo] = []
        stale: list[str] = []
        start, batch = 0, max(offset + limit, 50)
        ks = self.keyspace
        with ks.errors():
            while len(found) < offset + limit:
                ids: list[bytes] = await self.client.zrevrangebyscore(  # type: ignore[assignment]
                    ks.index_key, high, low, start=start, num=batch
                )
                if not ids:
                    break
                async with self.client.pipeline(transaction=False) as pipe:
                    for rid in ids:
                        pipe.hgetall(ks.keys(rid.decode()).run)
                    hashes = await pipe.execute()
                for rid, h in zip(ids, hashes, strict=True):
                    if b"version" not in h:
                        stale.append(rid.decode())
                    elif want is None or h.get(b"status") == want.encode():
                        found.append(run_info(rid.decode(), h))
                start, batch = start + batch, batch * 2
            if stale:
                await self._unindex(stale)
        return found[offset : offset + limit]

    async def _unindex(self, run_ids: list[str]) -> int:
        ks = self.keyspace
        return await ks.scripts.unindex(ks.index_key, [ks.keys(rid).run for rid in run_ids], run_ids)

    async def purge_expired(self) -> int:
        """Redis expires the runs itself; this sweeps their ids out of the run index."""
        removed = 0
        batch: list[str] = []
        with self.keyspace.errors():
            async for member, _score in self.client.zscan_iter(self.keyspace.index_key, count=500):
                batch.append(member.decode())
                if len(batch) >= 500:
                    removed += await self._unindex(batch)
                    batch = []
            if batch:
                removed += await self._unindex(batch)
        if removed:
            logger.info("redis: removed %d expired runs from the index", removed)
        return removed


class RedisStore(BackendSettings, CheckpointStore):
    """A :class:`CheckpointStore` on a :class:`RedisBackend` (URL ``redis://host:6379/0``):
    ``RedisStore(client, prefix=..., allow_eviction=..., indexed=...)`` and the store's own
    options (``codec``, ``expiry``, ``compaction``, ``retry``)."""

    scheme = "redis"
    backend_class = RedisBackend

    def __init__(self, client: aioredis.Redis, **options: Any) -> None:
        mine = split_store_options(options)
        super().__init__(RedisBackend(client, **options), **mine)

    @property
    def redis(self) -> RedisBackend:
        """The backend, as what it is."""
        backend = self.backend
        assert isinstance(backend, RedisBackend)
        return backend

    @property
    def keyspace(self) -> Keyspace:
        return self.redis.keyspace

    @property
    def client(self) -> aioredis.Redis:
        return self.redis.client

    @property
    def prefix(self) -> str:
        return self.redis.prefix

    @property
    def indexed(self) -> bool:
        return self.redis.indexed

    @property
    def allow_eviction(self) -> bool:
        return self.redis.allow_eviction

    @allow_eviction.setter
    def allow_eviction(self, value: bool) -> None:
        self.redis.allow_eviction = value


def _pop_query(url: str, name: str) -> tuple[str, str | None]:
    """Remove ``name`` from the URL's query (redis-py would reject it); return its value."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    value = next((v for k, v in query if k == name), None)
    rest = urlencode([(k, v) for k, v in query if k != name])
    return urlunsplit(parts._replace(query=rest)), value
