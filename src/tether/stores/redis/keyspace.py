"""One key prefix on one Redis client: the key layout, error translation, and the reads
that both :class:`RedisStore` and :class:`RedisCache` (a tiered store's copy) make."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rexc

from tether.errors import (
    CheckpointCorrupt,
    StateTooLarge,
    StoreError,
    StoreNotWritable,
    StoreUnavailable,
    TetherError,
)
from tether.state.model import RunInfo
from tether.stores.backend import StoredRow
from tether.stores.backend import remember as _hint
from tether.stores.redis.pipeline import RawPipeline, hmget_rows
from tether.stores.redis.records import pairs, run_info, stored_row, versions
from tether.stores.redis.scripts import RunKeys, Scripts

INLINE_BYTES = 1 << 20
"""Chains up to this size load in one round trip; bigger ones skip Lua's extra copy."""

CHAIN_INLINE_BYTES = 512 * 1024
"""``load()`` of a run this process has not seen: chains up to this size come back from
the script in one round trip; bigger ones by a second, a plain HMGET, which skips Lua's
copies (where the two cross over is measured in benchmarks/README.md)."""

Chain = list[tuple[int, bytes]]
"""A chain as ``load()`` reads it: ``(version, payload)`` rows, a sealed latest one last
with an empty payload."""

Hint = tuple[int, int, tuple[int, ...]]
"""(base, latest, carriers) of a run's latest chain, as last written or read."""

_NOT_WRITABLE = {
    "OOM": ("out of memory", "raise maxmemory, or free memory on the server"),
    "READONLY": ("read-only", "point the store at the primary, not a replica"),
    "MISCONF": ("cannot persist", "the server cannot write its snapshot to disk: free disk space"),
}


def translate(exc: Exception) -> StoreError:
    """A Redis error reply as the store error for its cause (by its first word)."""
    word = str(exc).split(" ", 1)[0]
    if word in _NOT_WRITABLE:
        reason, fix = _NOT_WRITABLE[word]
        return StoreNotWritable(f"redis: {exc} ({fix}; then resume the run)", reason=reason)
    if "max bulk length" in str(exc) or "invalid bulk length" in str(exc):
        return StateTooLarge(
            f"redis: {exc}: a checkpoint is over the server's proto-max-bulk-len; raise it, "
            "or keep big data out of the state"
        )
    return StoreError(f"redis: {exc}")


class Keyspace:
    """Runs stored under ``prefix`` on ``client``.

    ``hints`` remembers the latest chain of runs this process last wrote or read: a
    ``load()`` then needs no script, only one HMGET (see :func:`_present`).
    """

    def __init__(self, client: aioredis.Redis, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self.index_key = f"{prefix}runs"
        self.scripts = Scripts(client)
        self.pipeline = RawPipeline(client)
        self.hints: dict[str, Hint] = {}
        self._keys: dict[str, RunKeys] = {}
        """The keys of runs used lately (a save needs all six)."""

    def keys(self, run_id: str) -> RunKeys:
        keys = self._keys.get(run_id)
        if keys is None:
            keys = self._run_keys(run_id)
            _hint(self._keys, run_id, keys)
        return keys

    def _run_keys(self, run_id: str) -> RunKeys:
        p = self.prefix
        return RunKeys(
            f"{p}run:{run_id}", f"{p}rows:{run_id}", f"{p}hist:{run_id}", f"{p}full:{run_id}",
            self.index_key, f"{p}gen:{run_id}",
        )  # fmt: skip

    def hint(self, run_id: str, chain: Hint | None) -> None:
        """Remember (None: forget) the latest chain of ``run_id``."""
        _hint(self.hints, run_id, chain)

    @contextmanager
    def errors(self) -> Iterator[None]:
        """Translate driver exceptions once, here; our own errors pass through."""
        try:
            yield
        except TetherError:
            raise
        except (rexc.ConnectionError, rexc.TimeoutError, TimeoutError, ConnectionError, OSError) as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc
        except rexc.RedisError as exc:
            raise translate(exc) from exc

    # -- the full read ----------------------------------------------------------------
    async def fetch(
        self, run_id: str, version: int | None, *, tiered: bool = False, record: bool = False
    ) -> tuple[RunInfo | None, list[StoredRow], bytes]:
        """The run, the rows for ``version``, and the fence value on a miss.

        One round trip, or two for chains over ``INLINE_BYTES`` (their payloads then come
        by plain HMGET). ``record`` reads the run record only; ``tiered`` treats
        untrusted copies as misses. Reads are idempotent, so a dropped connection is
        retried once.
        """
        keys = self.keys(run_id)
        read = self.scripts.read
        for attempt in range(3):
            limit = INLINE_BYTES if attempt < 2 else None
            try:
                with self.errors():
                    reply = await read(
                        keys, version=version, tiered=tiered, record=record, inline_limit=limit
                    )
            except StoreUnavailable:  # a pooled connection died (server restart): once more
                with self.errors():
                    reply = await read(
                        keys, version=version, tiered=tiered, record=record, inline_limit=limit
                    )
            if not int(reply[0]):
                return None, [], bytes(reply[1])
            fields = pairs(reply[1])
            info = run_info(run_id, fields)
            if len(reply) > 5 and not tiered:  # a row of the chain is gone, its run is not
                gone = int(reply[5])
                raise CheckpointCorrupt(
                    f"the row of version {gone} is missing from Redis while its run is stored "
                    "(evicted under memory pressure, or deleted by hand?); set maxmemory-policy "
                    "noeviction, and restore the run from a copy or roll back past it",
                    run_id=run_id,
                    version=gone,
                )
            payloads = reply[3]
            if reply[2] and not int(reply[4]):
                payloads = await self._payloads(keys, reply[2], fields[b"created_at"])
                if payloads is None:
                    continue  # the run changed between the two round trips
            rows = [stored_row(run_id, m, p) for m, p in zip(reply[2], payloads, strict=True)]
            target = info.version if version is None else version
            if rows and rows[-1].version != target:
                rows = []
            return info, rows, b""
        raise AssertionError("unreachable: the last attempt reads inline")

    async def _payloads(self, keys: RunKeys, members: list[bytes], created_at: bytes) -> list[bytes] | None:
        """Payloads of a big chain; None if a row went or the run was re-created meanwhile."""
        wanted = [m.split(b"|", 1)[0] for m in members]
        with self.errors():
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.hmget(keys.rows, wanted)
                pipe.hget(keys.run, "created_at")
                payloads, now_created = await pipe.execute()
        if now_created != created_at or any(p is None for p in payloads):
            return None
        return list(payloads)

    # -- the lean read of the latest chain ----------------------------------------------
    async def latest_chain(self, run_id: str, *, tiered: bool) -> Chain | None:
        """The latest chain's ``(version, payload)`` rows (a sealed latest version last, with
        an empty payload), [] for no run, None when the full read path must decide (a
        tiered copy not trusted, a row missing, a run changed between two round trips).

        With a hint from this process's last write or read of the run: one HMGET (see
        :func:`_present` for why its answer proves it is the latest chain), sent in a
        tiered store together with the script that checks the copy is trusted.
        Otherwise the ``chain`` script, then the HMGET if the chain is big.
        """
        keys = self.keys(run_id)
        hint = self.hints.get(run_id)
        if hint is not None:
            chain = await (self._rows_trusted(keys, *hint) if tiered else self._rows(keys, *hint))
            if chain is not None:
                return chain
        (reply,) = await self._send_chain(
            self.scripts.chain(keys, tiered=tiered, inline_limit=CHAIN_INLINE_BYTES)
        )
        tag = int(reply[0])
        if tag != 1:
            return [] if tag == 0 and not tiered else None
        latest, base, carriers = int(reply[1]), int(reply[2]), versions(reply[3])
        if len(reply) > 4:
            payloads = reply[4:]
            if len(payloads) != len(carriers) or not all(payloads):
                return None
            chain = list(zip(carriers, payloads, strict=True))
            if carriers[-1] != latest:
                chain.append((latest, b""))
        else:
            chain = await self._rows(keys, base, latest, carriers)
        if chain is not None:
            self.hint(run_id, (base, latest, carriers))
        return chain

    async def _rows_trusted(
        self, keys: RunKeys, base: int, latest: int, carriers: tuple[int, ...]
    ) -> Chain | None:
        """:meth:`_rows` and the tiered trust check in one round trip."""
        check = self.scripts.chain(keys, tiered=True, inline_limit=0)
        trusted, got = await self._send_chain(check, hmget_rows(keys.rows, _fetched(latest, carriers)))
        if trusted[:3] != [1, latest, base]:
            return None
        return _present(base, latest, carriers, got)

    async def _send_chain(self, *commands: tuple[Any, ...] | bytes) -> list[Any]:
        """:meth:`RawPipeline.send` of commands that may run the ``chain`` script by hash."""
        with self.errors():
            try:
                return await self.pipeline.send(*commands)
            except rexc.NoScriptError:  # a restarted server: load the script, ask once more
                await self.client.script_load(self.scripts.chain_script.script)
                return await self.pipeline.send(*commands)

    async def _rows(self, keys: RunKeys, base: int, latest: int, carriers: tuple[int, ...]) -> Chain | None:
        """The chain's rows if they are the latest chain (see :func:`_present`), else None."""
        with self.errors():
            (got,) = await self.pipeline.send(hmget_rows(keys.rows, _fetched(latest, carriers)))
        return _present(base, latest, carriers, got)


def _fetched(latest: int, carriers: tuple[int, ...]) -> list[int]:
    """What :func:`_present` reads: the carriers, the latest version when it is sealed (so
    it must be there), and the next one (which must not)."""
    return [*carriers, latest, latest + 1] if carriers[-1] != latest else [*carriers, latest + 1]


def _present(base: int, latest: int, carriers: tuple[int, ...], got: Sequence[Any]) -> Chain | None:
    """The chain from an HMGET of ``_base`` and :func:`_fetched`, if it proves to be the
    latest: ``_base`` (the current chain's full row, kept in the rows hash by every script
    that moves it) is ``base``, every carrier holds a payload, the latest version is there
    and the next one is not. (Every write sets the row of its version, a sealed one too;
    a seal or a prune changes no carrier without a new version or a new base.)"""
    n = len(carriers)
    if got[0] is None or int(got[0]) != base or got[-1] is not None:
        return None
    payloads = got[1 : n + 1]
    if not all(payloads):
        return None
    chain = list(zip(carriers, payloads, strict=True))
    if carriers[-1] != latest:
        if got[n + 1] is None:
            return None
        chain.append((latest, b""))
    return chain
