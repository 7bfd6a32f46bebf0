"""A tiered store's Redis side: a copy of each run's latest chain, kept in step with SQL.

A tiered writer calls :meth:`RedisCache.begin` (a lease: readers stop trusting the copy),
commits to SQL, then :meth:`~RedisCache.mirror`, :meth:`~RedisCache.mirror_status` or
:meth:`~RedisCache.invalidate`, which release the lease. A crash in between leaves the
lease: the copy stays untrusted until it expires and a reader refills it from SQL
(:meth:`~RedisCache.warm`). Copies older than the server's last start are never trusted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from tether.state.model import ChainStats, RunInfo
from tether.stores._chain import Write
from tether.stores.backend import StoredRow
from tether.stores.redis.keyspace import Chain, Hint
from tether.stores.redis.records import hash_fields, versions
from tether.stores.redis.store import RedisBackend, RedisStore

__all__ = ["RedisCache"]


class RedisCache:
    """The cache operations of ``store``'s keys, for a store that keeps the runs elsewhere.

    Args:
        store: the Redis store whose client, key prefix and scripts the cache uses. Its
            ``setup()`` and ``aclose()`` stay the owner's to call.
        indexed: whether the copies go into the store's run index (``list_runs``); a
            tiered store lists runs from SQL, so False.
    """

    def __init__(self, store: RedisStore | RedisBackend, *, indexed: bool = False) -> None:
        self.store = store
        self.indexed = indexed
        self._ks = store.keyspace

    async def begin(self, run_id: str, token: str, deadline: float) -> None:
        """Take a writer's lease on the copy of ``run_id`` until ``deadline`` (epoch seconds)."""
        ks = self._ks
        with ks.errors():
            await ks.scripts.begin(ks.keys(run_id), token=token, deadline=deadline)

    async def mirror(self, w: Write, version: int, chain: ChainStats, token: str) -> bool:
        """Append the row SQL committed as ``version`` and release ``token``; a copy not at
        ``version - 1`` is dropped instead (False)."""
        ks = self._ks
        with ks.errors():
            reply = await ks.scripts.write(
                ks.keys(w.run_id), row=w, expected=version - 1, indexed=self.indexed, mirror=(token, chain)
            )
        if bytes(reply[0]) != b"ok":
            ks.hint(w.run_id, None)
            return False
        ks.hint(w.run_id, (chain.base_version, version, versions(reply[7])))
        return True

    async def mirror_status(self, info: RunInfo, token: str) -> bool:
        """Copy the run record after a status change and release ``token``; a copy not at
        ``info.version`` is dropped instead (False)."""
        ks = self._ks
        with ks.errors():
            return await ks.scripts.status(
                ks.keys(info.run_id),
                run_id=info.run_id,
                status=info.status,
                updated_at=info.updated_at.timestamp(),
                expires_at=None if info.expires_at is None else info.expires_at.timestamp(),
                indexed=self.indexed,
                mirror=(info.version, token),
            )

    async def invalidate(self, run_id: str, token: str | None = None, *, keep: int | None = None) -> None:
        """Release ``token`` (if any) and drop the copy, unless it is at version ``keep``;
        readers that missed before now cannot refill it with what they read."""
        ks = self._ks
        with ks.errors():
            await ks.scripts.delete(ks.keys(run_id), run_id=run_id, invalidate=True, token=token, keep=keep)

    async def renew(self, run_id: str, fence: int, until: float) -> None:
        """Copy a lease renewal SQL accepted into the copy (if there is one at that token)."""
        ks = self._ks
        with ks.errors():
            await ks.scripts.renew(ks.keys(run_id), fence=fence, until=until, mirror=True)

    def hint(self, run_id: str, chain: Hint | None) -> None:
        """Remember (None: forget) ``run_id``'s latest chain as (base, latest, carriers)."""
        self._ks.hint(run_id, chain)

    async def latest_chain(self, run_id: str) -> Chain | None:
        """The latest chain if the copy is trusted, else None (read SQL)."""
        return await self._ks.latest_chain(run_id, tiered=True)

    async def fetch(
        self, run_id: str, *, record: bool = False
    ) -> tuple[RunInfo | None, list[StoredRow], bytes]:
        """The trusted copy's run record and latest rows (``record``: the record only); on a
        miss ``(None, [], fence)``, the fence to pass to :meth:`warm`."""
        return await self._ks.fetch(run_id, None, tiered=True, record=record)

    async def warm(self, info: RunInfo, rows: Sequence[StoredRow], fence: bytes) -> bool:
        """Refill the copy from SQL rows, unless a writer touched the run since ``fence``
        (which :meth:`fetch` returned with the miss): every writer bumps it before its SQL
        commit, so data read before a commit never lands."""
        fields = hash_fields(info)
        fields += ["carriers", ",".join(str(row.version) for row in rows if row.payload)]
        expires = None if info.expires_at is None else info.expires_at.timestamp()
        ks = self._ks
        with ks.errors():
            return await ks.scripts.warm(
                ks.keys(info.run_id),
                token=fence,
                now=time.time(),
                expires_at=expires,
                fields=fields,
                rows=rows,
            )
