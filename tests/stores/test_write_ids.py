"""A commit whose reply was lost, retried by its owner: the same version, stored once.

The store gives each commit a write id; when the save fails, the context keeps the taken
changes with that id (``restore_changes``), so the owner's next commit of the same changes
carries it, and the backend recognises its own write instead of storing it again or
calling it a conflict. Run ids are checked by every entry point with one rule.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from tether.errors import ConfigError, StoreError, StoreUnavailable, VersionConflict
from tether.state import ExecutionContext, RunStatus
from tether.stores import RetryPolicy

from ._faults import ReplyDropper, with_port
from .conftest import new_id, open_test_store, require_url


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


def lose_reply(store: Any, *, lands: bool, after: int = 0) -> list[str]:
    """Make one append, after ``after`` that pass, fail as a lost reply would: after the
    write landed (``lands``) or before it reached the database. Returns its write id."""
    real = store.backend.append
    lost: list[str] = []
    passed = [0]

    async def append(w: Any) -> Any:
        if lost or passed[0] < after:
            passed[0] += 1
            return await real(w)
        lost.append(w.write_id)
        if lands:
            await real(w)
        raise StoreUnavailable("the reply was lost")

    store.backend.append = append
    return lost


async def versions(store: Any, run_id: str) -> list[int]:
    return sorted(h.version for h in await store.history(run_id))


@pytest.mark.parametrize("lands", [True, False], ids=["landed", "not-landed"])
async def test_changes_recorded_after_a_lost_reply_are_committed_after_it(
    make_store: Any, lands: bool
) -> None:
    """The owner records more before committing again: the lost write is settled first
    (found if it landed, else written now), then the newer changes follow it; each change
    is stored once, no conflict, versions contiguous."""
    async with make_store(retry=RetryPolicy(attempts=1)) as store:
        ctx = ExecutionContext(new_id(), {"messages": ["a"]})
        first = await store.commit(ctx)
        ctx.merge({"messages": ["b"], "n": 1})
        lost = lose_reply(store, lands=lands)
        with pytest.raises(StoreUnavailable):
            await store.commit(ctx)
        assert lost and ctx.version == first
        ctx.merge({"messages": ["c"], "n": 2})
        ctx.mark_executed("step-c")
        last = await store.commit(ctx, status=RunStatus.PAUSED, _require_status=RunStatus.RUNNING)
        assert last == ctx.version == first + 2
        assert await versions(store, ctx.run_id) == [first, first + 1, first + 2]
        cp = await store.load(ctx.run_id)
        assert cp.state == {"messages": ["a", "b", "c"], "n": 2}
        assert cp.executed_node_ids == ["step-c"] and cp.status is RunStatus.PAUSED
        assert (await store.load(ctx.run_id, first + 1)).state == {"messages": ["a", "b"], "n": 1}
        assert (await store.load(ctx.run_id, first + 1)).status is RunStatus.RUNNING
        assert not ctx.dirty
        ctx.merge({"messages": ["d"]})
        assert await store.commit(ctx, status=RunStatus.PAUSED) == first + 3


async def test_two_lost_replies_in_a_row_still_store_each_change_once(make_store: Any) -> None:
    """The write after a catch-up loses its reply too: each unknown attempt is settled in
    order at the next commit, whatever landed."""
    async with make_store(retry=RetryPolicy(attempts=1)) as store:
        ctx = ExecutionContext(new_id(), {"messages": ["a"]})
        first = await store.commit(ctx)
        ctx.merge({"messages": ["b"]})
        lose_reply(store, lands=True)
        with pytest.raises(StoreUnavailable):
            await store.commit(ctx)
        ctx.merge({"messages": ["c"]})
        lose_reply(store, lands=True, after=1)  # the catch-up is found; "c" lands, unanswered
        with pytest.raises(StoreUnavailable):
            await store.commit(ctx)
        assert ctx.version == first + 1 and ctx.dirty  # "b" settled; "c" unknown
        ctx.merge({"messages": ["d"]})
        assert await store.commit(ctx) == first + 3
        assert (await store.load(ctx.run_id)).state == {"messages": ["a", "b", "c", "d"]}
        assert await versions(store, ctx.run_id) == [first, first + 1, first + 2, first + 3]


async def test_a_lost_write_overtaken_by_another_writer_is_a_conflict(make_store: Any) -> None:
    """Found neither landed nor at its version: another writer did save first."""
    async with make_store(retry=RetryPolicy(attempts=1)) as store:
        ctx = ExecutionContext(new_id(), {"messages": ["a"]})
        await store.commit(ctx)
        other = await store.load_context(ctx.run_id)
        ctx.merge({"messages": ["b"]})
        lose_reply(store, lands=False)
        with pytest.raises(StoreUnavailable):
            await store.commit(ctx)
        other.merge({"messages": ["x"]})
        await store.commit(other)
        ctx.merge({"messages": ["c"]})
        with pytest.raises(VersionConflict):
            await store.commit(ctx)
        assert (await store.load(ctx.run_id)).state == {"messages": ["a", "x"]}


async def test_run_ids_are_checked_by_every_entry_point(make_store: Any) -> None:
    async with make_store() as store:
        for call in (store.get_run, store.delete, store.load, store.history):
            with pytest.raises(ConfigError, match="NUL"):
                await call("bad\x00id")


async def test_a_load_names_what_is_wrong_with_a_run_id_while_runs_are_stored(make_store: Any) -> None:
    """A store that holds runs (and reads small ones at once) still checks the id a load
    asks for, instead of reporting nothing stored or the driver's encoding error."""
    async with make_store() as store:
        await store.commit(ExecutionContext(new_id(), {"messages": ["a"]}))
        for bad, why in (
            ("bad\x00id", "NUL"),
            ("bad\ud800id", "Unicode"),
            ("x" * 5000, "long"),
            ("", "empty"),
        ):
            with pytest.raises(ConfigError, match=why):
                await store.load(bad)


@pytest.mark.parametrize("name", ["postgresql", "mysql"])
async def test_a_reply_dropped_on_the_wire_then_more_changes(name: str, tmp_path: Any) -> None:
    """The database commits the write and the connection drops before its reply: the
    owner's next commit, with more changes recorded meanwhile, stores each change once."""
    url = require_url(name, tmp_path)
    parts = urlsplit(url)
    async with (
        ReplyDropper(parts.hostname or "127.0.0.1", parts.port or 0) as proxy,
        open_test_store(name, with_port(url, proxy.listen_port), retry=RetryPolicy(attempts=1)) as store,
    ):
        ctx = ExecutionContext(new_id("writeid"), {"messages": ["a"]})
        first = await store.commit(ctx)
        ctx.merge({"messages": ["b"]})
        # PostgreSQL writes in one autocommit statement; MySQL in a transaction
        proxy.arm(ctx.run_id.encode(), then=b"COMMIT" if name == "mysql" else None)
        with pytest.raises(StoreError):
            await store.commit(ctx)
        assert proxy.dropped == 1
        assert (await store.get_run(ctx.run_id)).version == first + 1  # it did land
        ctx.merge({"messages": ["c"]})
        assert await store.commit(ctx) == first + 2
        assert (await store.load(ctx.run_id)).state == {"messages": ["a", "b", "c"]}
        assert await versions(store, ctx.run_id) == [first, first + 1, first + 2]
        await store.delete(ctx.run_id)
