"""The shortest delta writes (SQLite's ``_sqlite_write``, PostgreSQL's ``_DELTA_WRITE``, taken
by a plain delta) leave the run as the general write would, and hand every case they
do not cover (a conflict, an expired run, a change of expiry) to the general write."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from tether.errors import RunExpired, VersionConflict
from tether.state import ExecutionContext, RunStatus
from tether.state.model import RunInfo
from tether.stores import ExpiryPolicy, create_store

from .conftest import new_id

_DAY = ExpiryPolicy(checkpoint_ttl=dt.timedelta(days=1), completed_ttl=None)
_NEVER = ExpiryPolicy(checkpoint_ttl=None, completed_ttl=None)


def _record(info: RunInfo | None) -> tuple[object, ...]:
    assert info is not None
    expires = (
        None if info.expires_at is None else round(info.expires_at.timestamp() - info.updated_at.timestamp())
    )
    return info.version, info.status, info.node_id, info.chain, expires, info.fence


def _url(backend: str, tmp_path: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path}/t.db"
    url = os.environ.get("TETHER_TEST_POSTGRESQL_URL")
    if not url:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but TETHER_TEST_POSTGRESQL_URL is not set")
        pytest.skip("set TETHER_TEST_POSTGRESQL_URL to run the postgresql store tests")
    return url


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_deltas_leave_the_run_record_as_on_the_memory_store(backend: str, tmp_path: Path) -> None:
    """The same commits (with an expiry, without one, and changing between them, status and
    node changes among them) give the same run record and state as the memory store's."""
    stores = [create_store(_url(backend, tmp_path)), create_store("memory://")]
    run_id = new_id()
    seen = []
    for store in stores:
        await store.setup()
        ctx = ExecutionContext(run_id, {"messages": [], "count": 0})
        steps = [(_DAY, RunStatus.RUNNING), (_DAY, RunStatus.PAUSED), (_NEVER, RunStatus.RUNNING)]
        steps += [(_NEVER, RunStatus.RUNNING), (_DAY, RunStatus.RUNNING), (_NEVER, RunStatus.COMPLETED)]
        records = []
        for i, (policy, status) in enumerate(steps * 3):
            store.expiry = policy
            ctx.merge({"messages": [f"m{i}" * 50], "count": i})
            await store.commit(ctx, node_id=f"n{i % 2}", status=status)
            records.append(_record(await store.get_run(run_id)))
        cp = await store.load(run_id)
        assert cp is not None
        seen.append((records, cp.state))
        await store.delete(run_id)  # (a shared database: leave nothing behind)
        await store.aclose()
    assert seen[0] == seen[1]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_delta_after_another_writer_or_an_expiry_says_so_and_stores_nothing(
    backend: str, tmp_path: Path
) -> None:
    url = _url(backend, tmp_path)
    mine, other = create_store(url, expiry=_NEVER), create_store(url, expiry=_NEVER)
    await mine.setup()
    await other.setup()
    try:
        ctx = ExecutionContext(new_id(), {"messages": ["a"]})
        await mine.commit(ctx)
        theirs = await other.load_context(ctx.run_id)
        assert theirs is not None
        theirs.merge({"messages": ["theirs"]})
        await other.commit(theirs)
        ctx.merge({"messages": ["mine"]})
        with pytest.raises(VersionConflict):
            await mine.commit(ctx)
        after = await mine.load(ctx.run_id)
        assert after is not None and after.state["messages"] == ["a", "theirs"] and after.version == 2

        mine.expiry = ExpiryPolicy(checkpoint_ttl=dt.timedelta(seconds=-1), completed_ttl=None)
        late = ExecutionContext(new_id(), {"messages": ["a"]})
        await mine.commit(late)  # stored already expired
        late.merge({"messages": ["b"]})
        with pytest.raises(RunExpired):
            await mine.commit(late)
        for run_id in (ctx.run_id, late.run_id):
            await other.delete(run_id)
    finally:
        await mine.aclose()
        await other.aclose()
