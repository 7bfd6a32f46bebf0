"""TetherSaver in LangGraph's own test suite (copied into the suite's run directory as the
top-level module ``tether_suite_fixtures``; LangGraph's ``tests/conftest.py`` then imports
these two fixtures, which replace its own).

Each fixture keeps LangGraph's reference savers (``memory``, and SqliteSaver as
``sqlite`` / ``sqlite_aio``) and adds TetherSaver on SQLite, PostgreSQL and Redis:
opened with ``with`` for the sync tests, with ``async with`` for the async ones. Which
run is chosen by ``TETHER_SUITE_SAVERS`` (comma-separated parameter names). Every saver
gets a run-id prefix of its own, and its threads are deleted afterwards (the servers are
shared).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest

SYNC = ["memory", "sqlite", "tether_sqlite", "tether_postgres", "tether_redis"]
ASYNC = ["memory", "sqlite_aio", "tether_sqlite", "tether_postgres", "tether_redis"]
_URLS = {
    "tether_postgres": "TETHER_TEST_POSTGRESQL_URL",
    "tether_redis": "TETHER_TEST_REDIS_URL",
}


def _chosen(names: list[str]) -> list[str]:
    wanted = [s.strip() for s in os.environ.get("TETHER_SUITE_SAVERS", "").split(",") if s.strip()]
    return [n for n in names if not wanted or n in wanted]


def _url(name: str, tmp: Any) -> str:
    if name == "tether_sqlite":
        # WAL without an fsync per commit, as LangGraph's SqliteSaver here runs in memory:
        # the suite checks what a graph sees, not durability (tether's own tests do)
        return f"sqlite:///{tmp}/tether.db?synchronous=NORMAL"
    url = os.environ.get(_URLS[name])
    if not url:
        pytest.fail(f"set {_URLS[name]} to run LangGraph's suite on {name}")
    return url


def _prefix() -> str:
    # not uuid.uuid4(): some tests replace it with a fixed sequence and count its calls
    return f"lgs{os.urandom(5).hex()}"


def _recording(saver: Any) -> set[str]:
    """The thread ids the test puts checkpoints in, to delete them afterwards (listing every
    thread would scan the whole shared store)."""
    threads: set[str] = set()
    put, aput = saver.put, saver.aput

    def put_recorded(config: Any, *args: Any, **kwargs: Any) -> Any:
        threads.add(str(config["configurable"]["thread_id"]))
        return put(config, *args, **kwargs)

    async def aput_recorded(config: Any, *args: Any, **kwargs: Any) -> Any:
        threads.add(str(config["configurable"]["thread_id"]))
        return await aput(config, *args, **kwargs)

    saver.put, saver.aput = put_recorded, aput_recorded
    return threads


@contextmanager
def _tether_sync(name: str, tmp: Any) -> Iterator[Any]:
    from tether.integrations.langgraph import TetherSaver

    with TetherSaver.from_url(_url(name, tmp), prefix=_prefix()) as saver:
        threads = _recording(saver)
        try:
            yield saver
        finally:
            if name != "tether_sqlite":
                for thread in threads:
                    saver.delete_thread(thread)


@asynccontextmanager
async def _tether_async(name: str, tmp: Any) -> AsyncIterator[Any]:
    from tether.integrations.langgraph import TetherSaver

    async with TetherSaver.from_url(_url(name, tmp), prefix=_prefix()) as saver:
        threads = _recording(saver)
        try:
            yield saver
        finally:
            if name != "tether_sqlite":
                for thread in threads:
                    await saver.adelete_thread(thread)


@pytest.fixture(scope="function", params=_chosen(SYNC))
def sync_checkpointer(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Any]:
    from tests.conftest_checkpointer import _checkpointer_memory, _checkpointer_sqlite

    name = request.param
    if name.startswith("tether_"):
        with _tether_sync(name, tmp_path) as saver:
            yield saver
        return
    with (_checkpointer_memory if name == "memory" else _checkpointer_sqlite)() as saver:
        yield saver


@pytest.fixture(scope="function", params=_chosen(ASYNC))
async def async_checkpointer(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[Any]:
    from tests.conftest_checkpointer import _checkpointer_memory, _checkpointer_sqlite_aio

    name = request.param
    if name.startswith("tether_"):
        async with _tether_async(name, tmp_path) as saver:
            yield saver
        return
    if name == "memory":
        with _checkpointer_memory() as saver:
            yield saver
        return
    async with _checkpointer_sqlite_aio() as saver:
        yield saver
