"""The policies a store is configured with: how long runs live, when to compact."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from tether.errors import ConfigError
from tether.state.model import TERMINAL_STATUSES, ChainStats, RunStatus

__all__ = ["CompactionPolicy", "ExpiryPolicy"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpiryPolicy:
    """How long stored runs live.

    A run's checkpoints expire ``checkpoint_ttl`` after its last save; once the run
    reaches COMPLETED, FAILED or CANCELLED its whole execution state expires
    ``completed_ttl`` after that. ``None`` keeps it forever. Redis applies these as key
    TTLs; SQL stores keep an ``expires_at`` column, hide expired runs at once and
    delete them in :meth:`CheckpointStore.purge_expired`.
    """

    checkpoint_ttl: dt.timedelta | None = dt.timedelta(days=7)
    completed_ttl: dt.timedelta | None = dt.timedelta(hours=24)

    def __post_init__(self) -> None:  # ExpiryPolicy(checkpoint_ttl=5) fails here, naming the field
        from tether.validation import check_fields

        check_fields(self)

    def expires_at(self, status: RunStatus, now: float) -> float | None:
        ttl = self.completed_ttl if status in TERMINAL_STATUSES else self.checkpoint_ttl
        return None if ttl is None else now + ttl.total_seconds()


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionPolicy:
    """When a save writes the whole state instead of a delta.

    A load reads the base plus every delta after it. Appends never waste bytes, but
    overwrites (``set``, ``merge``, ``upsert``) leave dead data in the chain: a full row
    is written once that dead data could exceed ``max_waste_ratio`` of the live state
    (and ``min_waste_bytes``). Long chains cost per row at load time: past ``max_chain``
    deltas a full row is written when the rows are so small that their count, not their
    bytes, would dominate a load (``row_cost_bytes`` per row). In a store that seals,
    segments keep a chain of any length down to a few dozen rows, so an append-only run
    stores each byte once (its history is the state's own bytes, about 1x) instead of a
    new full copy each time the state doubles (up to 3x); where nothing seals, a full row
    is also written once the chain has doubled the base, so that bases grow geometrically
    and storage stays linear.
    """

    max_chain: int = 1000
    max_waste_ratio: float = 0.5
    min_waste_bytes: int = 256 * 1024
    row_cost_bytes: int = 4096
    """What reading one more row costs at load time, in bytes of payload decoded."""
    seal_versions: int = 8
    """A store that seals packs the last deltas into one segment row once there are this
    many (or ``seal_tail_bytes`` of them). 0 turns sealing off."""
    seal_tail_bytes: int = 64 * 1024
    seal_fanout: int = 4
    """… and then merges the ``seal_fanout`` last segments of one level into one of the next
    level, while that stays under ``seal_bytes``: a chain of N small deltas loads from
    about ``seal_versions + (seal_fanout - 1) * log(N / seal_versions, seal_fanout)`` rows,
    each version rewritten once per level on its way up."""
    seal_bytes: int = 1024 * 1024
    seal_whole_bytes: int = 0
    """While the rows after the chain's full one add up to at most this (and ``seal_bytes``),
    a seal packs them all into one segment instead of by levels, and the last few deltas
    are kept in one open segment that each commit rewrites: a load of a small state then
    reads three rows, but every commit pays for the rewrite, and each seal rewrites every
    row after the full one. Off by default (0: by levels from the start), since commits
    far outnumber loads in a run; a store that is mostly read (a dashboard over finished
    runs) may set it, e.g. ``256 * 1024``."""

    def __post_init__(self) -> None:
        if self.seal_versions == 1 or self.seal_versions < 0:
            raise ConfigError("seal_versions must be 0 (off) or >= 2")
        if self.seal_fanout < 2:
            raise ConfigError("seal_fanout must be >= 2")

    def due(self, chain: ChainStats, *, growth: int, rewrite: int, sealed: bool = False) -> bool:
        """``sealed``: the store packs deltas into segments (see ``seal_versions``), so a
        load reads far fewer rows than the chain has versions."""
        waste = chain.rewrite_bytes + rewrite
        live = chain.base_bytes + chain.growth_bytes + growth
        if waste > max(self.min_waste_bytes, self.max_waste_ratio * live):
            return True
        rows = chain.length + 1
        if rows < self.max_chain:
            return False
        if sealed and self.seal_versions:
            per, levels = self.seal_versions, 1
            while per * self.seal_fanout < rows:
                per, levels = per * self.seal_fanout, levels + 1
            rows = self.seal_versions + (self.seal_fanout - 1) * levels
        if sealed and self.seal_versions:  # segments keep the rows few: their count is all
            return rows * self.row_cost_bytes >= live
        grown = chain.growth_bytes + growth + waste
        return grown >= chain.base_bytes or rows * self.row_cost_bytes >= live
