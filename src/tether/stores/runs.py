"""What users do to stored runs besides commit and load: history, the reviewer's
snapshot, status, a paused run's update, rollback, fork, prune.

Written once on top of the store's own operations (``commit``, ``save``, ``load``…), as a
mixin of :class:`~tether.stores.base.CheckpointStore`; every backend gets them unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

from tether.errors import (
    CheckpointCorrupt,
    ConfigError,
    RunExpired,
    RunNotFound,
    RunNotPaused,
    StoreUnavailable,
)
from tether.state.context import ExecutionContext
from tether.state.model import (
    Checkpoint,
    CheckpointInfo,
    ExecutionContextSnapshot,
    RunInfo,
    RunStatus,
)
from tether.state.reducers import ReducerRegistry
from tether.state.reserved import check_user_keys, release_lease, without_lease
from tether.state.serde import Codec
from tether.state.values import check_run_id
from tether.stores._chain import ChainEngine, full_payload
from tether.stores.backend import StoredRow, utc
from tether.stores.policies import ExpiryPolicy

__all__ = ["RunOperations"]

T = TypeVar("T")
_FINISHED = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})


class _Store(Protocol):
    """What these operations use of the store they are mixed into."""

    codec: Codec
    expiry: ExpiryPolicy

    @property
    def engine(self) -> ChainEngine: ...
    async def _retry(self, call: Callable[[], Awaitable[T]], failed: StoreUnavailable) -> T: ...
    async def _read_retried(
        self, run_id: str, version: int | None
    ) -> tuple[RunInfo | None, list[StoredRow]]: ...
    async def _read_chain(self, run_id: str, version: int | None) -> list[tuple[int, bytes]]: ...
    async def _history(
        self, run_id: str, *, before: int | None, limit: int | None
    ) -> list[CheckpointInfo]: ...
    async def _set_status(self, run_id: str, status: RunStatus, expires_at: float | None) -> None: ...
    async def _is_expired(self, run_id: str) -> bool: ...
    async def _rebase(self, run_id: str, version: int, payload: bytes, after: bytes = b"") -> int: ...
    async def get_run(self, run_id: str) -> RunInfo | None: ...
    async def load(self, run_id: str, version: int | None = None) -> Checkpoint | None: ...
    async def load_context(
        self, run_id: str, version: int | None = None, *, reducers: ReducerRegistry | None = None
    ) -> ExecutionContext | None: ...
    async def save(self, checkpoint: Checkpoint, *, expected_version: int | None = None) -> int: ...
    async def commit(
        self,
        ctx: ExecutionContext,
        *,
        node_id: str | None = None,
        status: RunStatus = RunStatus.RUNNING,
        metadata: Mapping[str, Any] | None = None,
        _require_status: RunStatus | None = None,
        fence: Any = None,
        patches: bool = True,
    ) -> int: ...


class RunOperations:
    """The run operations of :class:`~tether.stores.base.CheckpointStore`."""

    async def history(
        self: _Store, run_id: str, *, before: int | None = None, limit: int | None = None
    ) -> list[CheckpointInfo]:
        """Stored versions with node and time, newest first; page with ``before``."""
        check_run_id(run_id)
        if limit is not None and limit < 0:
            raise ConfigError("limit must be >= 0")
        try:
            return await self._history(run_id, before=before, limit=limit)
        except StoreUnavailable as exc:
            return await self._retry(lambda: self._history(run_id, before=before, limit=limit), exc)

    async def snapshot(self: _Store, run_id: str) -> ExecutionContextSnapshot | None:
        """What a human reviewing the run sees, or None."""
        check_run_id(run_id)
        info, rows = await self._read_retried(run_id, None)
        if info is None or not rows:
            if info is None and await self._is_expired(run_id):
                raise RunExpired(run_id)
            if info is not None:
                raise CheckpointCorrupt(
                    "the rows of the latest version are missing while the run is stored",
                    run_id=run_id,
                    version=info.version,
                )
            return None
        state, _executed, head, _tail = self.engine.replay(run_id, [(r.version, r.payload) for r in rows])
        last = rows[-1]
        meta = head.get("meta") or {}
        history = state.get("execution_history")
        return ExecutionContextSnapshot(
            run_id=run_id,
            current_node_id=last.node_id,
            current_node_name=meta.get("node_name") or last.node_id,
            status=info.status,
            state=state,
            execution_history=history if type(history) is list else [],
            timestamp=utc(last.created_at),
            version=last.version,
        )

    async def get_status(self: _Store, run_id: str) -> RunStatus | None:
        info = await self.get_run(run_id)
        return None if info is None else info.status

    # == changing runs =============================================================
    async def set_status(self: _Store, run_id: str, status: RunStatus | str) -> None:
        """Record the run's status (PAUSED for review, COMPLETED at the end…)."""
        check_run_id(run_id)
        st = RunStatus(status)
        expires = self.expiry.expires_at(st, time.time())
        try:
            await self._set_status(run_id, st, expires)
        except StoreUnavailable as exc:
            await self._retry(lambda: self._set_status(run_id, st, expires), exc)

    async def update_state(
        self: _Store,
        run_id: str,
        update: Mapping[str, Any],
        *,
        reducers: ReducerRegistry | None = None,
        node_id: str | None = None,
    ) -> int:
        """Merge ``update`` into a PAUSED run's state through the reducers and persist it.

        Raises RunNotPaused (and changes nothing) for any other status, RunNotFound
        for an unknown run. The status check is repeated inside the atomic write, so
        a run resumed meanwhile is not modified. A runner's lease is never carried over.
        """
        check_run_id(run_id)
        check_user_keys(update, where="a state update")
        info = await self.get_run(run_id)
        if info is None:
            raise RunNotFound(run_id)
        if info.status is not RunStatus.PAUSED:
            raise RunNotPaused(run_id, str(info.status))
        ctx = await self.load_context(run_id, reducers=reducers)
        if ctx is None:
            raise RunNotFound(run_id)
        ctx.merge(update)
        release_lease(ctx)
        return await self.commit(
            ctx,
            node_id=node_id,
            status=RunStatus.PAUSED,
            metadata={"update": True},
            _require_status=RunStatus.PAUSED,
        )

    async def rollback(self: _Store, run_id: str, version: int) -> int:
        """Make the state at ``version`` the latest again, as a new version.

        History stays append-only: later versions remain readable. A runner's lease is
        not restored with the state: no process executes the restored version. A finished
        run (COMPLETED, FAILED, CANCELLED) rolled back to a version from before its end is
        PAUSED, so ``resume`` continues it from there; otherwise the status stays.
        """
        cp = await _existing(self, run_id, version)
        info = await self.get_run(run_id)
        status = info.status if info else cp.status
        if status in _FINISHED and cp.status not in _FINISHED:
            status = RunStatus.PAUSED
        restored = _restated(cp, run_id, status, {"rolled_back_to": version})
        return await self.save(restored, expected_version=info.version if info else None)

    async def copy(self: _Store, run_id: str, new_run_id: str, *, version: int | None = None) -> int:
        """Fork a run at ``version`` (latest when None) into a new run id.

        The fork starts at version 1 with the source's state, executed nodes and
        status, and records where it came from in its metadata. Raises
        VersionConflict if ``new_run_id`` exists. The source's lease is not copied.
        """
        check_run_id(new_run_id)
        cp = await _existing(self, run_id, version)
        fork = _restated(
            cp, new_run_id, cp.status, {"forked_from": {"run_id": run_id, "version": cp.version}}
        )
        return await self.save(fork, expected_version=0)

    async def prune(self: _Store, run_id: str, *, keep: int) -> int:
        """Keep only the latest ``keep`` versions; returns how many were removed.

        Safe with deltas: the oldest kept version is rewritten as a full state first,
        in the same transaction that drops the older rows.
        """
        if keep < 1:
            raise ConfigError("prune needs keep >= 1 (use delete() to remove a run)")
        info = await self.get_run(run_id)
        if info is None:
            raise RunNotFound(run_id)
        cut = info.version - keep + 1
        if cut <= 1:
            return 0
        chain = await self._read_chain(run_id, cut)
        if not chain:
            return 0
        cp = self.engine.checkpoint_of(run_id, chain)
        full, after = self.codec.encode(full_payload(cp)), self.engine.recut(run_id, chain)
        try:
            return await self._rebase(run_id, cut, full, after)
        except StoreUnavailable as exc:
            return await self._retry(lambda: self._rebase(run_id, cut, full, after), exc)


async def _existing(store: _Store, run_id: str, version: int | None) -> Checkpoint:
    cp = await store.load(run_id, version)
    if cp is None:
        raise RunNotFound(run_id, version)
    return cp


def _restated(cp: Checkpoint, run_id: str, status: RunStatus, metadata: dict[str, Any]) -> Checkpoint:
    """``cp``'s state as a new checkpoint of ``run_id``; the lease stays behind, since no
    process executes the new version yet."""
    return Checkpoint(
        run_id=run_id,
        node_id=cp.node_id,
        state=without_lease(cp.state),
        executed_node_ids=cp.executed_node_ids,
        status=status,
        metadata=metadata,
    )
