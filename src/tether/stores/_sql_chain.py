"""Reading a run's latest chain in SQL: one statement from the base on, or, once a store
knows which rows hold payloads (a *hint*), just those rows by key.

Shared by every SQL backend (``_sql.py``) and SQLite's inline reads (``sqlite.py``).
"""

from __future__ import annotations

import functools
import time
from typing import Any

__all__ = [
    "CHAIN_SQL",
    "ChainHint",
    "chain_of",
    "hint_of",
    "hinted_chain",
    "hinted_query",
    "skips_sealed",
]

CHAIN_SQL = (
    "SELECT c.version, c.payload, r.version FROM tether_runs r "
    "JOIN tether_checkpoints c ON c.run_id = r.run_id AND c.version >= r.base_version "
    "AND c.version <= r.version AND (c.kind <> 'sealed' OR c.version = r.version) "
    "WHERE r.run_id = ? AND (r.expires_at IS NULL OR r.expires_at > ?) ORDER BY c.version"
)
"""The latest state's rows and nothing else: what ``load()`` reads. Sealed rows are left out
(their segment holds them) but the latest, which says where the chain ends."""


def chain_of(rows: list[tuple[Any, ...]]) -> list[tuple[int, bytes]]:
    """``(version, payload)`` from rows of ``CHAIN_SQL``."""
    if not rows or rows[-1][0] != rows[-1][2]:
        return []  # absent, expired, or the latest row is gone
    return [(int(r[0]), r[1]) for r in rows]


ChainHint = tuple[int, int, tuple[int, ...]]
"""What a store last wrote or read of a run's latest chain: its base (full) version, its
latest version, and the versions of its rows that hold a payload (the *carriers*)."""


@functools.lru_cache(maxsize=256)
def _hinted_sql(n: int) -> str:
    """The rows of a hinted chain, by primary key: ``CHAIN_SQL`` reads every row from the
    base on to skip the sealed ones, which costs on MariaDB. No ORDER BY: SQLite would sort
    the rows, payloads and all, in a temporary B-tree; the few rows are sorted by
    :func:`hinted_chain`."""
    keys = ", ".join("?" * n)
    return (
        "SELECT c.version, c.payload, r.version, r.base_version FROM tether_runs r "
        f"JOIN tether_checkpoints c ON c.run_id = r.run_id AND c.version IN ({keys}) "
        "WHERE r.run_id = ? AND (r.expires_at IS NULL OR r.expires_at > ?)"
    )


def skips_sealed(hint: ChainHint | None) -> bool:
    """Whether reading a hinted chain by key skips sealed rows. If not, ``CHAIN_SQL`` reads the
    same rows, and it is the cheaper statement for the smallest chains."""
    return hint is not None and hint[1] - hint[0] > len(hint[2])


def hinted_query(run_id: str, hint: ChainHint) -> tuple[str, list[Any]]:
    _base, latest, carriers = hint
    keys = list(carriers) if carriers[-1] == latest else [*carriers, latest]
    return _hinted_sql(len(keys)), [*keys, run_id, time.time()]


def hinted_chain(rows: list[tuple[Any, ...]], hint: ChainHint) -> list[tuple[int, bytes]] | None:
    """The chain from the rows of :func:`hinted_query`, if they prove the hint is still the
    latest chain: the run is at the same latest and base versions (a write moves the first,
    a prune of these rows the second, a seal both), and every carrier holds a payload."""
    base, latest, carriers = hint
    n = len(carriers)
    if len(rows) != (n if carriers[-1] == latest else n + 1) or rows[0][2] != latest or rows[0][3] != base:
        return None
    chain = sorted([(int(r[0]), r[1]) for r in rows])  # versions are unique: no payload compared
    if chain[-1][0] != latest:
        return None
    for (version, payload), want in zip(chain, carriers, strict=False):
        if version != want or not payload:
            return None
    return chain


def hint_of(chain: list[tuple[int, bytes]]) -> ChainHint | None:
    """The hint for a chain just read (None for no chain)."""
    if not chain:
        return None
    return chain[0][0], chain[-1][0], tuple(v for v, p in chain if p)
