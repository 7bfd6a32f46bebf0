"""The store of a saver serving sync graphs: its calls run in the caller's thread."""

from __future__ import annotations

import builtins
from typing import Any

from tether.errors import StoreUnavailable
from tether.state import ExecutionContext, ReducerRegistry, RunStatus
from tether.state.model import Checkpoint as StoredCheckpoint
from tether.state.model import RunInfo
from tether.stores import CheckpointStore
from tether.stores.blocking import run_inline
from tether.sync import LoopThread, SyncStore

__all__ = ["InlineStore"]


class InlineStore:
    """The store calls of a saver that runs in its callers' threads, as coroutines that never
    suspend: a graph step's (commit, load, load_context, get_run) on the store's blocking
    twin when it has one, the others (and a twin's call that failed for a transient cause,
    which the async store retries) run on the store's loop thread, the caller waiting."""

    def __init__(self, sync_store: SyncStore, twin: CheckpointStore | None) -> None:
        self.sync_store = sync_store
        self.store: CheckpointStore = sync_store.store
        self.runner: LoopThread = sync_store.runner
        self.twin = twin

    def close(self) -> None:
        """Close the twin, then the store and its loop thread."""
        try:
            if self.twin is not None:
                twin, self.twin = self.twin, None
                run_inline(twin.aclose())
        finally:
            self.sync_store.close()

    async def commit(self, ctx: ExecutionContext, **options: Any) -> int:
        if self.twin is not None:
            try:
                return await self.twin.commit(ctx, **options)
            except StoreUnavailable:
                pass  # the context kept its changes and their write id: the retry is safe
        return self.runner.run(self.store.commit(ctx, **options))

    async def load(self, run_id: str, version: int | None = None) -> StoredCheckpoint | None:
        if self.twin is not None:
            try:
                return await self.twin.load(run_id, version)
            except StoreUnavailable:
                pass
        return self.runner.run(self.store.load(run_id, version))

    async def load_context(
        self, run_id: str, version: int | None = None, *, reducers: ReducerRegistry | None = None
    ) -> ExecutionContext | None:
        if self.twin is not None:
            try:
                return await self.twin.load_context(run_id, version, reducers=reducers)
            except StoreUnavailable:
                pass
        return self.runner.run(self.store.load_context(run_id, version, reducers=reducers))

    async def get_run(self, run_id: str) -> RunInfo | None:
        if self.twin is not None:
            try:
                return await self.twin.get_run(run_id)
            except StoreUnavailable:
                pass
        return self.runner.run(self.store.get_run(run_id))

    async def delete(self, run_id: str) -> bool:
        return self.runner.run(self.store.delete(run_id))

    async def prune(self, run_id: str, *, keep: int) -> int:
        return self.runner.run(self.store.prune(run_id, keep=keep))

    async def set_status(self, run_id: str, status: RunStatus | str) -> None:
        self.runner.run(self.store.set_status(run_id, status))

    async def list_runs(
        self, *, status: RunStatus | None = None, limit: int = 100, offset: int = 0
    ) -> builtins.list[RunInfo]:
        return self.runner.run(self.store.list_runs(status=status, limit=limit, offset=offset))
