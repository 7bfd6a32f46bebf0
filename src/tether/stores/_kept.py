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

A chain read again whole also keeps what it replays to (a :class:`Replayed`: the state, the
executed ids and the last head packed as one MessagePack body), so that a next read of the
same rows, compared equal, decodes that one body instead of decoding and applying every row:
the rows are still read and compared, only the work they imply is not done again. A chain
that grew past them (later deltas) starts from it and applies only its new rows. It counts
in the same budget.

Pure: no I/O (the chain engine's contract).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, NamedTuple

from tether.state.serde import pack_plain, plain_decoder

__all__ = ["KeptRows", "Replayed"]


class Replayed(NamedTuple):
    """A chain's replay, packed: what a next read of the same rows decodes instead."""

    version: int
    """The version it is the state of: its chain's last, the end of its last carrier."""
    carriers: tuple[int, ...]
    """The versions of that chain's rows that hold a payload, in order."""
    packed: bytes
    """MessagePack of ``[state, executed, node, status, ts, meta]``."""

    def unpack(self) -> list[Any]:
        """The six fields, freshly decoded (the caller may change them)."""
        fields: list[Any] = plain_decoder(len(self.packed), datetimes=True)(self.packed)
        return fields


def pack_replayed(version: int, chain: Sequence[tuple[int, bytes]], fields: list[Any]) -> Replayed | None:
    """``fields`` (as :meth:`Replayed.unpack` returns them) packed for ``chain``, or None when
    they do not pack (a value MessagePack cannot hold: the rows then replay each time)."""
    try:
        packed = pack_plain(fields, datetimes=True)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return Replayed(version, tuple(v for v, p in chain if p), packed)


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
            rows = {v: p for v, p in chain if p and type(p) is bytes}
            run = _Run(rows, sum(map(len, rows.values())))
            if replayed is None and old is not None and old.replayed is not None:
                equal = {v for (v, p), same in zip(chain, vouched, strict=True) if same and p}
                if equal.issuperset(old.replayed.carriers):
                    replayed = old.replayed  # its rows are all still here, unchanged: it holds
            if replayed is not None:
                run.replayed = replayed
                run.size += len(replayed.packed)
            if run.size > limit // 2:  # one big run would push every other one out
                return
            self._runs[run_id] = run
            self._bytes += run.size
            while self._bytes > limit:
                self._bytes -= self._runs.pop(next(iter(self._runs))).size
