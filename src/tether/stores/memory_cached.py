"""An in-process backend with a read cache of each run's latest checkpoint (opt-in).

``memory://?cache=1`` or ``InMemoryStore(cache=True)``. It behaves as :class:`MemoryBackend`
does; with no I/O to hide behind, a memory load is all Python, so this one keeps the
latest version ready: after a full save, the state packed on its own (a view into the
row, found by ``Write.state_at``) that each load decodes; after a chain a load replayed
twice, the state as objects that each load copies. Benchmarks use it to measure the
store's own overhead; the reference backend stays plain (see ``memory.py``), and this one
adds only the cache to it.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass
from time import time as _now
from typing import Any, ClassVar

from tether.errors import CheckpointCorrupt
from tether.state.model import Checkpoint, RunStatus, make_checkpoint
from tether.state.serde import SCHEMA_VERSION, pack_plain, plain_decoder, unpack_dated
from tether.state.values import copy_value
from tether.stores._chain import Write
from tether.stores.backend import Capabilities, Load
from tether.stores.memory import MemoryBackend, MemoryRun

__all__ = ["CachedMemoryBackend"]

_Latest = tuple[
    int,
    Callable[[Any], Any],
    bytes | memoryview,
    str | None,
    tuple[str, ...],
    bytes | None,
    dt.datetime | float,
    RunStatus,
]
"""The latest checkpoint as a save wrote it: (version, the state's decoder, state, node_id,
executed node ids, metadata packed or None, timestamp, status). A plain tuple: a load
unpacks it."""

_Kept = tuple[
    int, dict[str, Any], str | None, tuple[str, ...], dict[str, Any] | None, dt.datetime | float, RunStatus
]
"""As :data:`_Latest`, for a state replayed from a chain, kept as a private copy."""

_SMALL_BYTES = 16 * 1024
"""Up to this size a saved state is kept as its own bytes, beyond it as a view."""


@dataclass(slots=True)
class _CachedRun(MemoryRun):
    """A run as :class:`MemoryBackend` keeps it, with what the cache keeps of its latest version."""

    latest: _Latest | None = None
    kept: _Kept | None = None
    replayed: int = 0
    """The version a load last replayed from a chain without keeping it."""


class CachedMemoryBackend(MemoryBackend):
    """:class:`~tether.stores.memory.MemoryBackend` with the latest checkpoint kept ready."""

    capabilities = Capabilities(splits_state=True)
    _run_type = _CachedRun
    _shared: ClassVar[dict[str, tuple[dict[str, Any], threading.Lock]]] = {}
    _runs: dict[str, _CachedRun]  # type: ignore[assignment]

    def _written(self, run: MemoryRun, w: Write, version: int) -> None:
        """Keep a plain full row just written as the latest (its head as the save encoded
        it, so nothing is decoded), unless that head is one a load would refuse."""
        # only ever one of this backend's runs (``_run_type``): no isinstance on the write path
        run.latest = run.kept = None  # type: ignore[attr-defined]
        head = w.head
        if not w.state_at or head is None or head.get("v") != SCHEMA_VERSION or head.get("kind") != "full":
            return
        executed, meta, payload = head.get("executed"), head.get("meta"), w.payload
        if type(executed) is not list:
            return
        run.latest = (  # type: ignore[attr-defined]
            version,
            plain_decoder(len(payload), datetimes=w.dated),
            # a small state copied out as bytes (read without the buffer protocol), a big one a view
            payload[w.state_at :] if len(payload) < _SMALL_BYTES else memoryview(payload)[w.state_at :],
            w.node_id,
            tuple(executed),
            pack_plain(meta) if meta else None,
            w.created_at,
            w.status,
        )

    async def rebase(self, run_id: str, version: int, payload: bytes, after: bytes = b"") -> int:
        if after:  # never: this backend takes no segments
            raise ValueError("the memory backend holds no segments to cut")
        # what the cache keeps is the decoded state, which a rebase does not change
        return await super().rebase(run_id, version, payload)

    # -- the cache (``CheckpointStore.load`` asks it first) ---------------------------
    def front(self, load: Load) -> Load:
        """``load`` with the cache asked first: the latest checkpoint of a stored run from
        what a save kept (its state decoded, the rest as objects) or from a chain's kept
        copy; anything else from ``load``. One function, the store's ``load``: a load the
        cache answers is one call (a hot path: see benchmarks/README.md)."""
        runs = self._runs  # the same dict for the backend's life: writers swap whole values

        async def load_latest_first(run_id: str, version: int | None = None) -> Checkpoint | None:
            # only a stored run's (checked) id is found in ``runs``
            run = runs.get(run_id) if version is None and type(run_id) is str else None
            if run is not None:
                hit, expires = run.latest, run.expires_at
                if hit is not None and (expires is None or expires > _now()):
                    number, decode, body, node, executed, meta, when, status = hit
                    try:
                        state = decode(body)
                        extra = None if meta is None else unpack_dated(meta)
                    except Exception as exc:  # bytes this process packed: only a bug lands here
                        raise CheckpointCorrupt(
                            f"cached state unreadable ({exc})", run_id=run_id, version=number
                        ) from exc
                    return make_checkpoint(run_id, node, state, executed, when, number, status, extra)
                if run.kept is not None and run.live(_now()):
                    return _copied(run_id, run.kept)
            return await load(run_id, version)

        return load_latest_first

    def loaded_latest(self, run_id: str, cp: Checkpoint, plain: bool) -> None:
        """A load replayed the latest chain into ``cp``: keep a copy once it is read twice
        (a run read once per save never pays for it), never in the clear what a key guards."""
        run = self._runs.get(run_id)
        if run is None or not plain:
            return
        if run.replayed != cp.version:
            run.replayed = cp.version
            return
        kept = (
            cp.version,
            copy_value(cp.state),
            cp.node_id,
            tuple(cp.executed_node_ids),
            copy_value(cp.metadata) if cp.metadata else None,
            cp.timestamp,
            cp.status,
        )
        with self._lock:
            if self._runs.get(run_id) is run and run.version == cp.version:
                run.kept = kept


def _copied(run_id: str, kept: _Kept) -> Checkpoint:
    """A checkpoint of its own from a chain's kept copy."""
    number, state, node, executed, meta, when, status = kept
    copied = None if meta is None else copy_value(meta)
    return make_checkpoint(run_id, node, copy_value(state), executed, when, number, status, copied)
