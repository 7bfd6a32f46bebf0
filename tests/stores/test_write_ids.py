"""A commit whose reply was lost, retried by its owner: the same version, stored once.

The store gives each commit a write id; when the save fails, the context keeps the taken
changes with that id (``restore_changes``), so the owner's next commit of the same changes
carries it, and the backend recognises its own write instead of storing it again or
calling it a conflict. Run ids are checked by every entry point with one rule.
"""

from __future__ import annotations

from typing import Any

import pytest

from tether.errors import ConfigError, StoreUnavailable
from tether.state import ExecutionContext
from tether.stores import RetryPolicy

from .conftest import new_id


async def test_a_commit_retried_after_a_lost_reply_is_stored_once(make_store: Any) -> None:
    async with make_store(retry=RetryPolicy(attempts=1)) as store:
        ctx = ExecutionContext(new_id(), {"messages": ["a"]})
        first = await store.commit(ctx)
        ctx.merge({"messages": ["b"]})
        real = store.backend.append
        lost: list[str] = []

        async def landed_then_lost(w: Any) -> Any:
            result = await real(w)
            if not lost:
                lost.append(w.write_id)
                raise StoreUnavailable("the reply was lost")
            return result

        store.backend.append = landed_then_lost
        with pytest.raises(StoreUnavailable):
            await store.commit(ctx)
        assert ctx.version == first and ctx.dirty  # the context still holds its changes
        again = await store.commit(ctx)
        assert again == first + 1  # the version the lost write got, not a second one
        assert [h.version for h in await store.history(ctx.run_id)] == [first + 1, first]
        assert (await store.load(ctx.run_id)).state == {"messages": ["a", "b"]}
        ctx.merge({"messages": ["c"]})
        assert await store.commit(ctx) == first + 2


async def test_run_ids_are_checked_by_every_entry_point(make_store: Any) -> None:
    async with make_store() as store:
        for call in (store.get_run, store.delete, store.load, store.history):
            with pytest.raises(ConfigError, match="NUL"):
                await call("bad\x00id")
