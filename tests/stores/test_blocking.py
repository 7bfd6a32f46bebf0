"""Blocking twins: each backend builds its own through its public constructor; a twin's
calls run to completion in the calling thread, from several threads at once, on the same
database as the async store."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import pytest

from tests.stores.conftest import new_id, open_test_store, require_url
from tether.state import ExecutionContext, ReducerRegistry
from tether.stores.blocking import blocking_twin, run_inline

_APPEND = ReducerRegistry().register("items", "append")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "redis"])
async def test_a_twin_serves_several_threads_on_the_stores_database(backend: str, tmp_path: Path) -> None:
    """Commits and loads from four threads land once each and in order; the async store reads
    what the twin wrote, and the twin what the store wrote."""
    url = require_url(backend, tmp_path)
    async with open_test_store(backend, url) as store:
        twin = blocking_twin(store, url, {})
        assert twin is not None
        assert type(twin.backend) is type(store.backend)  # the backend's own class
        ids = [new_id(f"twin{i}") for i in range(4)]

        def work(run_id: str) -> int:
            ctx = ExecutionContext(run_id, reducers=_APPEND)
            for i in range(15):
                ctx.merge({"items": [i]})
                run_inline(twin.commit(ctx))
                loaded = run_inline(twin.load(run_id))
                assert loaded is not None and loaded.state == {"items": list(range(i + 1))}
            return ctx.version

        try:
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                assert list(pool.map(work, ids)) == [15] * 4
            for run_id in ids:
                got = await store.load(run_id)
                assert got is not None and got.state == {"items": list(range(15))}
                ctx = await store.load_context(run_id, reducers=_APPEND)
                assert ctx is not None
                ctx.merge({"items": [15]})
                await store.commit(ctx)
                again = run_inline(twin.load(run_id))
                assert again is not None and again.state == {"items": list(range(16))}
        finally:
            run_inline(twin.aclose())
            for run_id in ids:
                await store.delete(run_id)


@pytest.mark.parametrize("backend", ["mysql", "memory"])
async def test_a_backend_without_a_synchronous_driver_has_no_twin(backend: str, tmp_path: Path) -> None:
    """MySQL (asyncmy) and the memory store offer no blocking twin: callers use the store."""
    url = require_url(backend, tmp_path)
    async with open_test_store(backend, url) as store:
        assert blocking_twin(store, url, {}) is None


def test_the_sqlite_twin_is_a_constructor_option(tmp_path: Path) -> None:
    """``SqliteBackend(path, caller_thread=True)``: statements in the caller's thread."""
    from tether.stores.sqlite import SqliteBackend, SqliteStore

    store = SqliteStore.wrap(SqliteBackend(tmp_path / "t.db", caller_thread=True))
    run_inline(store.setup())
    try:
        ctx = ExecutionContext(new_id(), {"n": 1})
        assert run_inline(store.commit(ctx)) == 1
        loaded = run_inline(store.load(ctx.run_id))
        assert loaded is not None and loaded.state == {"n": 1}
    finally:
        run_inline(store.aclose())


def test_a_failed_transaction_of_the_sqlite_twin_rolls_back(tmp_path: Path) -> None:
    """A transaction body that raises leaves nothing behind, with no event loop around."""
    from tether.stores.sqlite import SqliteBackend

    backend = SqliteBackend(tmp_path / "t.db", caller_thread=True)

    async def failing() -> None:
        async with backend._tx(write=True) as tx:
            await tx.run("CREATE TABLE t (x INTEGER)")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run_inline(failing())

    async def tables() -> list[tuple[object, ...]]:
        async with backend._tx(write=False) as tx:
            return await tx.all("SELECT name FROM sqlite_master WHERE name = 't'")

    assert run_inline(tables()) == []
    run_inline(backend.aclose())
