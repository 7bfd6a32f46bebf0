"""A lease holder's side of a store: the token its writes carry (:class:`Fence`), the
renewal of its lease, and what a helper process needs to open the same store.

The checks themselves are in each backend's atomic write (see ``Backend.append`` and
``_chain.check_write``); this module is what :class:`~tether.stores.base.CheckpointStore`
offers a lease holder on top of them, as a mixin.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from tether.state.values import check_run_id
from tether.stores.backend import Backend

if TYPE_CHECKING:
    from tether.stores._chain import Write

__all__ = ["Fence", "LeaseOperations", "arm", "landed"]

T = TypeVar("T")


@dataclass(slots=True)
class Fence:
    """A lease holder's side of fencing, passed to each of its writes (``commit(fence=)``).

    Its first write takes a new lease: the store records a token greater than any the run
    had, in the same atomic write, and ``token`` becomes it. Every later write, and every
    renewal, is accepted only while ``token`` is still the run's current one: a holder that
    stalled while another took the run over gets :class:`~tether.errors.LeaseLost` and
    writes nothing.
    """

    token: int = 0
    """The lease token held; 0 until a write takes one."""
    until: float | None = None
    """The lease deadline the next write stores in the run record (then None again): a
    POSIX time to extend it, 0 to release the lease, None to leave it."""


def arm(fence: Fence | None, write: Write) -> None:
    """Make ``write`` a lease holder's (``fence``; None: a write of no holder): a take when
    the fence holds no token yet, else fenced by its token, with the deadline it carries."""
    if fence is not None:
        write.fence, write.take, write.lease_until = fence.token, not fence.token, fence.until


def landed(fence: Fence | None, write: Write) -> None:
    """``write`` landed: the holder's token is the one stored, its deadline is written."""
    if fence is not None:
        fence.token, fence.until = write.fence, None


class _Store(Protocol):
    @property
    def backend(self) -> Backend: ...
    async def _retried(self, call: Callable[[], Awaitable[T]]) -> T: ...


class LeaseOperations:
    """The lease operations of :class:`~tether.stores.base.CheckpointStore`."""

    _opened_from: tuple[str, dict[str, Any]] | None = None

    async def renew_lease(self: _Store, run_id: str, token: int, until: float) -> None:
        """A lease holder's heartbeat: the run's lease deadline becomes ``until`` (POSIX
        time), only while ``token`` is the run's current lease token and the lease is held
        (else :class:`~tether.errors.LeaseLost`). No new version; retried when the store is
        unavailable (a renewal that landed twice changes nothing)."""
        check_run_id(run_id)
        backend = self.backend
        await self._retried(lambda: backend.renew_lease(run_id, token, until))

    def opened_from(self) -> tuple[str, dict[str, Any]] | None:
        """The URL (credentials included) and plain options this store was opened from, for
        a helper process that opens the same database (the lease heartbeat sidecar); None
        when another process cannot open it (an in-memory store, one built without a URL).
        Secret: never log it."""
        return self._opened_from

    def remember_url(self, url: str, options: Mapping[str, Any]) -> None:
        """Record what :meth:`opened_from` answers (``create_store`` calls it). Options that
        are not plain values (a codec, a client) are left out: a renewal needs none."""
        plain = (str, int, float, bool, type(None))
        self._opened_from = (url, {k: v for k, v in options.items() if isinstance(v, plain)})
