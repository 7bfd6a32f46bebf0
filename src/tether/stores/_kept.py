"""The rows a store's chain engine keeps to vouch for, and the state they replay to.

Every row a replay reads is checked (its CRC-32, or its AES-GCM tag when keyed), and the CRC
costs about what decoding the row does. So the engine keeps the rows of the chains it last
replayed whole (references to the bytes the backend returned, up to a byte budget, the least
recently read run dropped first): a row read again whose bytes are equal to the kept ones,
compared byte for byte, is as checked as they were, and a comparison costs a fraction of a
CRC. Any other row, a row another process rewrote or a byte the disk changed among them, is
checked as usual. Rows are compared by value, never trusted by version, so nothing any
writer does can make a load return what the database does not hold. Keyed stores keep none:
decrypting checks the row anyway.

A chain read again whole also keeps what it replays to (a :class:`Replayed`: a private copy
of the state, the executed ids and the last head), so that a next read of the same rows,
compared equal, copies that instead of decoding and applying every row: the rows are still
read and compared, only the work they imply is not done again. The copy makes new dicts and
lists and shares the scalars, all immutable (``values.copy_value``, a walk in C that costs
about half a decode), as ``memory_cached`` does for its runs. A chain that grew past those
rows (later deltas) starts from it and applies only its new rows. A replay counts in the
budget as 1.5x its rows' bytes (see :attr:`Replayed.size`).

Pure: no I/O (the chain engine's contract).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, NamedTuple

from tether.state.values import copy_value

__all__ = ["KeptRows", "Replayed"]


class Replayed(NamedTuple):
    """A chain's replay, kept: what a next read of the same rows copies instead."""

    version: int
    """The version it is the state of: its chain's last, the end of its last carrier."""
    carriers: tuple[int, ...]
    """The versions of that chain's rows that hold a payload, in order."""
    fields: tuple[dict[str, Any], list[str], Any, Any, Any, Any]
    """``(state, executed, node, status, ts, meta)``, owned here: never handed out."""
    size: int
    """What it counts for in the budget: 1.5x the bytes of its rows (a chat state's objects
    take somewhat more memory than its MessagePack bytes, as ``tracemalloc`` shows)."""

    def unpack(self) -> list[Any]:
        """The six fields, as a new copy (the caller may change it)."""
        state, executed, node, status, ts, meta = self.fields
        return [copy_value(state), list(executed), node, status, ts, copy_value(meta) if meta else meta]


def keep_replayed(chain: Sequence[tuple[int, bytes]], fields: list[Any]) -> Replayed | None:
    """A copy of ``fields`` (as :meth:`Replayed.unpack` returns them) as the replay of
    ``chain``, which ends at its version; None when they do not copy (a key or a value no
    state of this tether holds, decoded from a row all the same: the chain replays each time)."""
    state, executed, node, status, ts, meta = fields
    try:
        kept = (copy_value(state), list(executed), node, status, ts, copy_value(meta) if meta else meta)
    except (TypeError, ValueError):
        return None
    size = sum(len(p) for _, p in chain) * 3 // 2  # see Replayed.size
    return Replayed(chain[-1][0], tuple(v for v, p in chain if p), kept, size)


class _Run:
    __slots__ = ("replayed", "rows", "size")

    def __init__(self, rows: dict[int, bytes], size: int) -> None:
        self.rows = rows
        """Version -> the payload kept (rows that hold one)."""
        self.size = size
        """Bytes kept for the run: its rows' and its replay's."""
        self.replayed: Replayed | None = None


class KeptRows:
    """The rows (and replays) of the runs a chain engine last read, up to ``limit`` bytes."""

    __slots__ = ("_bytes", "_lock", "_runs", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._runs: dict[str, _Run] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes kept in all (rows and replays)."""
        return self._bytes

    def sizes(self) -> dict[str, int]:
        """Bytes kept per run, the least recently read first."""
        return {run_id: run.size for run_id, run in self._runs.items()}

    def vouched(self, run_id: str, chain: Sequence[tuple[int, bytes]]) -> list[bool]:
        """For each row, whether its bytes equal those kept for its version; True for a
        sealed row (it holds nothing) once the run has rows kept."""
        run = self._runs.get(run_id)
        if run is None:
            return [False] * len(chain)
        get = run.rows.get
        return [get(version) == payload or not payload for version, payload in chain]

    def again(
        self, run_id: str, chain: Sequence[tuple[int, bytes]]
    ) -> tuple[list[bool], tuple[Replayed, int] | None]:
        """:meth:`vouched` and :meth:`replayed` at once (a load's first step)."""
        run = self._runs.get(run_id)
        if run is None:
            return [False] * len(chain), None
        get = run.rows.get
        vouched = [get(version) == payload or not payload for version, payload in chain]
        done = run.replayed
        if done is None or len(chain) < 2:
            return vouched, None
        return vouched, self.replayed(run_id, chain, vouched)

    def replayed(
        self, run_id: str, chain: Sequence[tuple[int, bytes]], vouched: list[bool]
    ) -> tuple[Replayed, int] | None:
        """The replay kept for the start of ``chain`` and the index of the chain's first row
        after it, when the chain's rows up to its version are exactly those it was made of,
        every one vouched for, and the chain goes on from the version after it (or ends at
        it). None otherwise: the chain is replayed from its first row."""
        run = self._runs.get(run_id)
        done = None if run is None else run.replayed
        if done is None or chain[-1][0] < done.version:
            return None
        carriers = done.carriers
        n, size = len(carriers), len(chain)
        at = seen = 0
        while at < size and seen < n:
            version, payload = chain[at]
            if payload:
                if version != carriers[seen]:
                    return None
                seen += 1
            if not vouched[at]:
                return None
            at += 1
        if seen != n:
            return None
        rest = next((v for v, p in chain[at:] if p), None)
        if rest is None and chain[-1][0] != done.version:
            return None  # (no carrier after it: the chain must end at it)
        if rest is not None and rest != done.version + 1:
            return None
        return done, at

    def keep(
        self,
        run_id: str,
        chain: Sequence[tuple[int, bytes]],
        vouched: list[bool],
        replayed: Replayed | None = None,
    ) -> None:
        """Keep the rows of a chain just replayed, every one of them checked, and its replay
        when given (else the run's earlier one while its rows are still among these)."""
        limit = self.limit
        if not limit:
            return
        with self._lock:
            old = self._runs.pop(run_id, None)
            if old is not None:
                self._bytes -= old.size
                if all(vouched) and replayed is None:  # the same rows again: now the most recent
                    self._runs[run_id] = old
                    self._bytes += old.size
                    return
            # (a bytearray: a payload a backend put together from slices, never changed after)
            rows = {v: p for v, p in chain if p and type(p) in (bytes, bytearray)}
            run = _Run(rows, sum(map(len, rows.values())))
            if replayed is None and old is not None and old.replayed is not None:
                equal = {v for (v, p), same in zip(chain, vouched, strict=True) if same and p}
                if equal.issuperset(old.replayed.carriers):
                    replayed = old.replayed  # its rows are all still here, unchanged: it holds
            half = limit // 2  # one big run would push every other one out
            if replayed is not None and run.size + replayed.size <= half:
                run.replayed = replayed
                run.size += replayed.size
            if run.size > half:
                return
            self._runs[run_id] = run
            self._bytes += run.size
            while self._bytes > limit:
                self._bytes -= self._runs.pop(next(iter(self._runs))).size
