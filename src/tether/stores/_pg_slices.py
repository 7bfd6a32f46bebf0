"""Reading a big PostgreSQL payload in slices: one fresh buffer of its size, not five.

A payload read whole costs several fresh buffers of its size on both sides (the server
detoasts it and builds its message, libpq holds that message and its result, psycopg
copies it into ``bytes``), each paid in page faults by a new process or a new session (a
cold read). The payload column is stored uncompressed out of line (schema version 4), so
the server can fetch each slice from TOAST on its own: both sides then reuse the same
small buffers, and the client fills one buffer of the payload's size (:class:`Slices`).
"""

from __future__ import annotations

import functools
from typing import Any

from tether.errors import StoreError
from tether.state.serde import CheckedRow, frame_crc

__all__ = ["SLICE", "Slices", "slices_cursor", "sliced"]

SLICE = 64 * 1024
"""A chain read returns an uncompressed payload bigger than this in slices of this size."""


@functools.lru_cache(maxsize=64)
def sliced(sql: str) -> tuple[str, int, int] | None:
    """A chain read (``SELECT …, c.payload, … FROM …``, one row per ``c.version``) rewritten
    so that each uncompressed payload over :data:`SLICE` bytes comes back as rows of slices,
    with the positions of the payload and the version in the original row; None for any
    other statement.

    A payload read whole costs several fresh buffers of its size on both sides (the server
    detoasts it and builds its message, libpq holds that message and its result, psycopg
    copies it into ``bytes``), each paid in page faults by a new process or a new session
    (a cold read). In slices, the server fetches each from TOAST on its own and both sides
    reuse the same small buffers: the client fills one buffer of the payload's size
    (:class:`Slices`). A compressed payload (a row written before the column was stored
    uncompressed) cannot be sliced without decompressing it from its start for each slice,
    so it comes whole. The result arrives in no particular order (sorting the slices would
    spill them to disk): :class:`Slices` puts them in place and the rows in version order."""
    head, sep, rest = sql.partition(" FROM ")
    if not head.startswith("SELECT ") or not sep:
        return None
    cols = head[len("SELECT ") :].split(", ")
    if "c.payload" not in cols or "c.version" not in cols:
        return None
    k, v = cols.index("c.payload"), cols.index("c.version")
    body = rest.partition(" ORDER BY ")[0]
    names = [f"q{i}" for i in range(len(cols))]
    payload = f"q.q{k}"
    kept = ", ".join(f"q.{name}" for i, name in enumerate(names) if i != k)
    sliceable = f"q.n > {SLICE} AND q.stored >= q.n"  # (a compressed payload's stored size is smaller)
    return (
        f"SELECT {kept}, q.n, s.at, "
        f"CASE WHEN s.at IS NULL THEN {payload} ELSE substring({payload} FROM s.at FOR {SLICE}) END "
        f"FROM ({head}, octet_length(c.payload), pg_column_size(c.payload) FROM {body}) "
        f"AS q({', '.join(names)}, n, stored) "
        f"LEFT JOIN LATERAL generate_series(1, CASE WHEN {sliceable} THEN q.n ELSE 0 END, {SLICE}) "
        "AS s(at) ON TRUE",
        k,
        v,
    )


def slices_cursor(conn: Any) -> Any:
    """A binary cursor of ``conn`` whose ``bytea`` values are views of the driver's own
    buffer, not ``bytes``: each slice is then copied once, into its payload's buffer, where
    a ``bytes`` of it cost one more copy of every byte read. :class:`Slices` copies what it
    keeps of a view (a view lives only as long as the driver's result it looks into)."""
    cur = conn.cursor(binary=True)
    cur.adapters.register_loader("bytea", _view_loader())
    return cur


@functools.cache
def _view_loader() -> type:
    """psycopg's loader of a binary ``bytea`` as the view it is given (made once, on first
    use: psycopg is imported only by a store that uses it)."""
    from psycopg.adapt import Loader
    from psycopg.pq import Format

    class View(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> Any:
            return data

    return View


class Slices:
    """The rows of a chain read from the rows of its :func:`sliced` statement: each sliced
    payload put together in one :class:`CheckedRow` (never changed once complete).

    While slices come in order (as the server sends them), the frame's CRC is computed on
    each as it arrives, in the time the client waits for the next one anyway; the codec then
    compares it with the frame's instead of running one more pass over the whole row (at
    10 MB, a pass of several milliseconds). A slice out of order leaves ``crc`` None: the
    codec computes it, as for any row."""

    __slots__ = ("bufs", "crcs", "filled", "k", "rows", "totals", "v")

    def __init__(self, k: int, v: int) -> None:
        self.k, self.v = k, v if v < k else v - 1
        self.rows: list[tuple[Any, ...]] = []
        self.bufs: dict[Any, CheckedRow] = {}
        self.filled: dict[Any, int] = {}
        self.totals: dict[Any, int] = {}
        self.crcs: dict[Any, int | None] = {}
        """The running CRC of each payload's slices so far; None once one came out of order."""

    def add(self, row: tuple[Any, ...]) -> None:
        """One row of the sliced statement; its ``bytea`` values may be views of the driver's
        buffer (:func:`slices_cursor`), copied here into what is kept."""
        k = self.k
        cols, total, at, part = row[:-3], row[-3], row[-2], row[-1]
        if any(type(c) is memoryview for c in cols):
            cols = tuple(bytes(c) if type(c) is memoryview else c for c in cols)
        if at is None:
            self.rows.append((*cols[:k], None if part is None else bytes(part), *cols[k:]))
            return
        version = cols[self.v]
        buf = self.bufs.get(version)
        if buf is None:
            buf = self.bufs[version] = CheckedRow()
            self.filled[version] = 0
            self.crcs[version] = None
            self.totals[version] = total
            self.rows.append((*cols[:k], buf, *cols[k:]))
        filled = self.filled[version]
        start, end = at - 1, at - 1 + len(part)
        if at == 1 and filled == 0 and len(part) >= 8:
            self.crcs[version] = frame_crc(part)
        elif start == filled and filled:
            crc = self.crcs[version]
            self.crcs[version] = None if crc is None else frame_crc(part, crc)
        else:
            self.crcs[version] = None
        if start == len(buf):  # in order: one copy, appended
            buf += part
        else:  # out of order: the gap stays zeros until its slice comes
            if end > len(buf):
                buf.extend(bytes(end - len(buf)))
            with memoryview(buf) as view:
                view[start:end] = part  # (a bytearray slice assignment would copy twice)
        self.filled[version] = filled + len(part)

    def result(self) -> list[tuple[Any, ...]]:
        for version, buf in self.bufs.items():
            if not self.filled[version] == len(buf) == self.totals[version]:  # (cannot happen)
                raise StoreError(f"postgresql: version {version} was read incompletely")
            buf.crc = self.crcs[version]
        v = self.v if self.v < self.k else self.v + 1
        self.rows.sort(key=lambda r: -1 if r[v] is None else r[v])
        return self.rows
