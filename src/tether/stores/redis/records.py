"""How a run's record and rows look in Redis: the run hash's fields and the ``hist`` members.

A ``hist`` member is ``"version|kind|nbytes|status|created_at|node"``, node being ``-``
for none or ``+`` and the node id, so that a node id may hold ``|``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tether.errors import CheckpointCorrupt
from tether.state.model import ChainStats, CheckpointInfo, RunInfo, RunStatus
from tether.state.model import chain_stats as _chain_stats
from tether.stores.backend import StoredRow
from tether.stores.backend import utc as _utc

RUN_FIELDS = (
    "status",
    "version",
    "base_version",
    "base_bytes",
    "growth_bytes",
    "rewrite_bytes",
    "chain_len",
    "created_at",
    "updated_at",
)


def ms(ts: float | None) -> str:
    """A timestamp in seconds as the milliseconds ``PEXPIREAT`` takes ("" for never)."""
    return "" if ts is None else str(math.ceil(ts * 1000))


def node_text(node_id: str | None) -> str:
    return "-" if node_id is None else "+" + node_id


def member(row: StoredRow) -> str:
    node = node_text(row.node_id)
    return f"{row.version}|{row.kind}|{len(row.payload)}|{row.status}|{row.created_at!r}|{node}"


def parse_member(run_id: str, member: bytes) -> tuple[int, str, int, RunStatus, float, str | None]:
    """``(version, kind, size, status, created_at, node_id)`` of a ``hist`` member."""
    try:
        v, kind, size, status, created, node = member.decode().split("|", 5)
        return int(v), kind, int(size), RunStatus(status), float(created), node[1:] if node != "-" else None
    except ValueError as exc:
        raise CheckpointCorrupt(f"bad history entry {member[:80]!r}", run_id=run_id) from exc


def stored_row(run_id: str, member: bytes, payload: bytes) -> StoredRow:
    v, kind, _size, status, created, node = parse_member(run_id, member)
    return StoredRow(run_id, v, kind, node, status, created, payload)


def checkpoint_info(run_id: str, member: bytes) -> CheckpointInfo:
    v, kind, size, status, created, node = parse_member(run_id, member)
    return CheckpointInfo(
        run_id=run_id, version=v, node_id=node, status=status, timestamp=_utc(created), kind=kind, size=size
    )


def versions(carriers: bytes) -> tuple[int, ...]:
    """The run record's ``carriers`` field (b"1,9,41") as versions."""
    return tuple(map(int, carriers.split(b",")))


def pairs(flat: Sequence[bytes]) -> dict[bytes, bytes]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def chain_stats(values: Sequence[Any]) -> ChainStats:
    """Chain statistics from the five run-record fields base_version .. chain_len."""
    bv, bb, gb, rb, length = (int(x) for x in values)
    return _chain_stats(bv, bb, gb, rb, length)


def run_info(run_id: str, h: dict[bytes, bytes]) -> RunInfo:
    try:
        node, exp, until = h.get(b"node_id"), h.get(b"expires_at"), h.get(b"lease_until")
        return RunInfo(
            run_id=run_id,
            status=RunStatus(h[b"status"].decode()),
            version=int(h[b"version"]),
            node_id=None if node is None else node.decode(),
            created_at=_utc(float(h[b"created_at"])),
            updated_at=_utc(float(h[b"updated_at"])),
            expires_at=None if exp is None else _utc(float(exp)),
            chain=chain_stats([h[f.encode()] for f in RUN_FIELDS[2:7]]),
            fence=int(h.get(b"fence") or 0),
            lease_until=None if until is None else float(until),
        )
    except (KeyError, ValueError) as exc:
        raise CheckpointCorrupt(f"damaged run record ({exc})", run_id=run_id) from exc


def hash_fields(info: RunInfo) -> list[Any]:
    """The run hash's fields and values (flat) for ``info``."""
    c = info.chain
    fields: list[Any] = [
        "status",
        str(info.status),
        "version",
        info.version,
        "base_version",
        c.base_version,
        "base_bytes",
        c.base_bytes,
        "growth_bytes",
        c.growth_bytes,
        "rewrite_bytes",
        c.rewrite_bytes,
        "chain_len",
        c.length,
        "created_at",
        repr(info.created_at.timestamp()),
        "updated_at",
        repr(info.updated_at.timestamp()),
    ]
    if info.node_id is not None:
        fields += ["node_id", info.node_id]
    if info.expires_at is not None:
        fields += ["expires_at", repr(info.expires_at.timestamp())]
    fields += ["fence", str(info.fence)]
    if info.lease_until is not None:
        fields += ["lease_until", repr(info.lease_until)]
    return fields
