"""The Lua scripts (the ``*.lua`` files beside this module), one Python function each.

Every change to a run is one script, so it is atomic. Each function here builds its
script's KEYS and ARGV from named arguments, in the order the script's header comment
lists them, so no caller passes positional arguments to a script.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from importlib.resources import files
from typing import Any, NamedTuple

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from tether.state.model import ChainStats, RunStatus
from tether.stores._chain import Write
from tether.stores.backend import StoredRow
from tether.stores.redis.records import member, ms, node_text

GEN_TTL_MS = 3_600_000
"""How long a ``gen`` fence outlives its last bump: far longer than any cache refill."""


class RunKeys(NamedTuple):
    """A run's keys (see the package docstring for the layout)."""

    run: str
    rows: str
    hist: str
    full: str
    runs: str
    """The run index (``P runs``)."""
    gen: str


@cache
def source(name: str) -> str:
    """The text of ``<name>.lua``, with the prelude its script needs."""
    here = files("tether.stores.redis")
    body = here.joinpath(f"{name}.lua").read_text(encoding="utf-8")
    if name in ("chain", "rebase", "unindex", "rewrite", "renew"):  # read-only or self-contained: no helpers
        return body
    prelude = here.joinpath("prelude.lua").read_text(encoding="utf-8")
    return prelude.replace("GEN_TTL_MS", str(GEN_TTL_MS)) + body


def _flag(value: bool) -> str:
    return "1" if value else "0"


def _deadline(until: float | None) -> str:
    """A write's lease deadline for ``write.lua``: "" leaves it, "0" clears it."""
    return "" if until is None else ("0" if not until else repr(until))


def _opt(value: Any) -> Any:
    return "" if value is None else value


class Scripts:
    """The scripts registered on one client (EVALSHA, loading a script the server lost)."""

    NAMES = (
        "write", "read", "status", "delete", "begin", "rebase", "warm", "unindex", "chain", "rewrite",
        "renew",
    )  # fmt: skip

    def __init__(self, client: aioredis.Redis) -> None:
        self._s = {name: client.register_script(source(name)) for name in self.NAMES}

    def all(self) -> list[AsyncScript]:
        return list(self._s.values())

    @property
    def chain_script(self) -> AsyncScript:
        """``chain.lua``, which the store sends by hash through its raw pipeline."""
        return self._s["chain"]

    async def write(
        self,
        keys: RunKeys,
        *,
        row: Write,
        expected: int | None,
        indexed: bool,
        mirror: tuple[str, ChainStats] | None = None,
    ) -> list[Any]:
        """``write.lua``: append ``row``. ``mirror``: (lease token, the chain SQL reported)
        for a tiered copy, which is dropped unless it is at ``expected``."""
        argv: dict[str, Any] = {
            "mode": "write" if mirror is None else "mirror",
            "run_id": row.run_id,
            "expected": _opt(expected),
            "require_status": "" if row.require_status is None else str(row.require_status),
            "kind": row.kind,
            "payload": row.payload,
            "member_tail": f"{row.status}|{row.created_at!r}|{node_text(row.node_id)}",
            "status": str(row.status),
            "node_set": _flag(row.node_id is not None),
            "node": row.node_id or "",
            "created_at": repr(row.created_at),
            "expires_ms": ms(row.expires_at),
            "expires_at": "" if row.expires_at is None else repr(row.expires_at),
            "growth": row.growth_bytes,
            "rewrite": row.rewrite_bytes,
            "indexed": _flag(indexed),
            "seal_from": row.seal_from or "",
            "fence": str(row.fence),
            "take": _flag(row.take),
            "lease_until": ""
            if row.lease_until is None
            else ("0" if not row.lease_until else repr(row.lease_until)),
        }
        if mirror is not None:
            token, chain = mirror
            argv |= {
                "token": token,
                "base_version": chain.base_version,
                "base_bytes": chain.base_bytes,
                "growth_bytes": chain.growth_bytes,
                "rewrite_bytes": chain.rewrite_bytes,
                "chain_len": chain.length,
            }
        argv["write_id"] = row.write_id
        reply: list[Any] = await self._s["write"](keys=list(keys), args=list(argv.values()))
        return reply

    async def renew(self, keys: RunKeys, *, fence: int, until: float, mirror: bool = False) -> list[Any]:
        """``renew.lua``: move the lease deadline to ``until`` while ``fence`` is the run's token."""
        args = [str(fence), repr(until), "mirror" if mirror else "renew"]
        reply: list[Any] = await self._s["renew"](keys=[keys.run], args=args)
        return reply

    async def read(
        self, keys: RunKeys, *, version: int | None, tiered: bool, record: bool, inline_limit: int | None
    ) -> list[Any]:
        """``read.lua``: the run record and the rows for ``version`` (None: the latest)."""
        argv = [_opt(version), _flag(tiered), _flag(record), _opt(inline_limit)]
        reply: list[Any] = await self._s["read"](
            keys=[keys.run, keys.rows, keys.hist, keys.full, keys.gen], args=argv
        )
        return reply

    def chain(self, keys: RunKeys, *, tiered: bool, inline_limit: int) -> tuple[Any, ...]:
        """``chain.lua`` as an EVALSHA command for the raw pipeline."""
        return ("EVALSHA", self._s["chain"].sha, 2, keys.run, keys.rows, _flag(tiered), inline_limit)

    async def status(
        self,
        keys: RunKeys,
        *,
        run_id: str,
        status: RunStatus,
        updated_at: float,
        expires_at: float | None,
        indexed: bool,
        mirror: tuple[int, str] | None = None,
    ) -> bool:
        """``status.lua``: set the run's status and expiry; False if there is no run.
        ``mirror``: (version, lease token) for a tiered copy, dropped unless at that version."""
        argv: list[Any] = [
            str(status),
            repr(updated_at),
            ms(expires_at),
            "" if expires_at is None else repr(expires_at),
            run_id,
            _flag(indexed),
            "set" if mirror is None else "mirror",
        ]
        if mirror is not None:
            argv += list(mirror)
        return bool(await self._s["status"](keys=list(keys), args=argv))

    async def delete(
        self,
        keys: RunKeys,
        *,
        run_id: str,
        invalidate: bool = False,
        token: str | None = None,
        keep: int | None = None,
    ) -> bool:
        """``delete.lua``: remove the run (True if it existed); with ``invalidate``, drop a
        tiered copy instead, releasing ``token``, unless it is at version ``keep``."""
        argv = [run_id, "invalidate" if invalidate else "delete"]
        if invalidate:
            argv += [token or "", _opt(keep)]
        return bool(await self._s["delete"](keys=list(keys), args=argv))

    async def begin(self, keys: RunKeys, *, token: str, deadline: float) -> None:
        """``begin.lua``: a tiered writer's lease on the run's copy, until ``deadline``."""
        await self._s["begin"](keys=[keys.run, keys.gen], args=[token, ms(deadline)])

    async def rebase(self, keys: RunKeys, *, version: int, payload: bytes, after: bytes) -> int:
        """``rebase.lua``: make ``version`` a full row and drop the rows before it."""
        return int(await self._s["rebase"](keys=list(keys[:4]), args=[version, payload, after]))

    async def rewrite(self, keys: RunKeys, *, payloads: Mapping[int, bytes], expected: int) -> int:
        """``rewrite.lua``: new payloads for stored rows if the run is at ``expected``."""
        argv: list[Any] = [expected]
        for version, payload in sorted(payloads.items()):
            argv += [version, payload]
        return int(await self._s["rewrite"](keys=list(keys[:3]), args=argv))

    async def warm(
        self,
        keys: RunKeys,
        *,
        token: bytes,
        now: float,
        expires_at: float | None,
        fields: Sequence[Any],
        rows: Sequence[StoredRow],
    ) -> bool:
        """``warm.lua``: refill a tiered copy with the run hash ``fields`` and ``rows``."""
        argv: list[Any] = [token, ms(now), ms(expires_at), len(fields) // 2, *fields]
        for row in rows:
            argv += [row.version, member(row), row.payload, _flag(row.kind == "full")]
        keys_ = [keys.run, keys.rows, keys.hist, keys.full, keys.gen]
        return bool(await self._s["warm"](keys=keys_, args=argv))

    async def unindex(self, index_key: str, run_keys: Sequence[str], run_ids: Sequence[str]) -> int:
        """``unindex.lua``: drop from the index the ids of runs whose record is gone."""
        return int(await self._s["unindex"](keys=[index_key, *run_keys], args=list(run_ids)))
