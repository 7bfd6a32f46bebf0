"""The checks a backend makes inside its atomic write (:func:`check_write`), and the lease
token a take stores (:func:`next_fence`). Pure: no I/O, so every backend, the SQL ones, the
memory one, judges a write the same way (the Redis scripts mirror it in Lua).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from tether.errors import LeaseLost, RunExpired, RunNotFound, RunNotPaused, VersionConflict
from tether.state.model import RunStatus

if TYPE_CHECKING:
    from tether.stores._chain import Write

__all__ = ["RunHead", "check_write", "next_fence"]


class RunHead(Protocol):
    """What :func:`check_write` reads of a run record (a ``RunInfo``, or a backend's own)."""

    @property
    def version(self) -> int: ...
    @property
    def status(self) -> RunStatus: ...


def next_fence(current: int, now: float) -> int:
    """The token a new lease takes after ``current``: greater than every token issued before,
    also when the stored one was lost (a Redis that keeps nothing on disk, a run deleted and
    started again), since it is at least the time of the take in milliseconds."""
    return max(current + 1, int(now * 1000))


def check_write(
    w: Write,
    info: RunHead | None,
    *,
    expired: bool = False,
    write_id: str | None = None,
    fence: int = 0,
) -> bool:
    """Judge ``w`` against the run record it would follow (``info``, None when absent),
    inside the backend's atomic section: True when this very write already landed (its
    reply was lost; ``write_id`` is the one stored with the run), False to go ahead.

    Raises RunExpired / RunNotFound when the writer's run is gone, LeaseLost when the
    writer holds a lease token that is not the run's current one (``fence``),
    VersionConflict when ``expected_version`` does not match, RunNotPaused when
    ``require_status`` does not. ``expired``: the record found is past its expiry (the
    backend drops it if this returns False)."""
    if expired:
        if w.expected_version:  # the writer's run is gone, not taken by another writer
            raise RunExpired(w.run_id)
        info = None
    current = info.version if info else 0
    if info is not None and w.write_id and write_id == w.write_id:
        return True
    if w.fence and not w.take and w.fence != fence:
        raise LeaseLost(w.run_id, held=w.fence, current=fence)
    if info is None and w.expected_version:
        raise RunNotFound(w.run_id)  # deleted (or expired and purged) under the writer
    if w.expected_version is not None and w.expected_version != current:
        raise VersionConflict(w.run_id, expected=w.expected_version, actual=current)
    if w.require_status is not None and (info is None or info.status is not w.require_status):
        raise RunNotPaused(w.run_id, str(info.status) if info else "missing")
    if info is None and w.kind != "full":
        raise RunNotFound(w.run_id)
    return False
