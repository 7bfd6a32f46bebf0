"""SQLite's common write in fewer statements: a delta after the version its writer expects.

The general write (``SqlBackend._write_in``) reads the run's row, judges the write against
it in Python (``check_write``), inserts the version's row and rewrites every column of the
run's. A delta on a live run at the expected version, by a writer that holds no lease and
requires no status, needs none of that reading: one ``UPDATE … RETURNING`` moves the run on
only if it is at that version and live, adding to the chain's statistics in SQL, and the
row is inserted in the same transaction. When the UPDATE matches nothing (a conflict, a run
expired or gone, the retry of a write that may have landed), the transaction is rolled back
having changed nothing and the general write runs, and says why.

It also leaves alone the columns a delta does not change (the lease, the base, the expiry
while there is none): an indexed column set is an index entry rewritten, one more page in
the WAL at every commit.
"""

from __future__ import annotations

import time
from typing import Any

from tether.state.model import ChainStats, chain_stats
from tether.stores._chain import Write
from tether.stores._sql_schema import Tx

__all__ = ["NotAtExpected", "write_delta"]

_MOVE = (
    "UPDATE tether_runs SET status = ?, version = version + 1, node_id = ?, "
    "growth_bytes = growth_bytes + ?, rewrite_bytes = rewrite_bytes + ?, chain_len = chain_len + 1, "
    "updated_at = ?, write_id = ?{expiry} WHERE run_id = ? AND version = ? AND {live} "
    "RETURNING version, base_version, base_bytes, growth_bytes, rewrite_bytes, chain_len"
)
_MOVE_LASTING = _MOVE.format(expiry="", live="expires_at IS NULL")
"""A run that never expires and still does not (its expiry's index entry stays as it is)."""
_MOVE_EXPIRING = _MOVE.format(expiry=", expires_at = ?", live="(expires_at IS NULL OR expires_at > ?)")
_INSERT = (
    "INSERT INTO tether_checkpoints (run_id, version, kind, node_id, status, created_at, nbytes, payload) "
    "VALUES (?, ?, 'delta', ?, ?, ?, ?, ?)"
)


class NotAtExpected(Exception):
    """The run is not live at the expected version (or the write is a retry): the transaction
    rolls back, nothing changed, and the general write takes over. Internal."""


async def write_delta(tx: Tx, w: Write) -> tuple[int, ChainStats]:
    """Store ``w`` (a plain delta: at an expected version, by no lease holder, requiring no
    status) as the run's next version, in ``tx``; NotAtExpected when the run is not live at
    ``w.expected_version``."""
    status = str(w.status)
    head: tuple[Any, ...] = (
        status,
        w.node_id,
        w.growth_bytes,
        w.rewrite_bytes,
        w.created_at,
        w.write_id or None,
    )
    if w.expires_at is None:
        row = await tx.one(_MOVE_LASTING, (*head, w.run_id, w.expected_version))
    else:
        row = await tx.one(_MOVE_EXPIRING, (*head, w.expires_at, w.run_id, w.expected_version, time.time()))
    if row is None:
        raise NotAtExpected(w.run_id)
    version = int(row[0])
    await tx.run(_INSERT, (w.run_id, version, w.node_id, status, w.created_at, len(w.payload), w.payload))
    return version, chain_stats(int(row[1]), int(row[2]), int(row[3]), int(row[4]), int(row[5]))
