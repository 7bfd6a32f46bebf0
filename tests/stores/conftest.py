"""Every store test runs against every backend (memory, SQLite, Redis, PostgreSQL, MySQL,
tiered). Server URLs come from TETHER_TEST_<NAME>_URL; `scripts/test` sets them for the
local servers. With CI=true a missing or unreachable server fails the run; elsewhere it
skips that parametrisation with the reason.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tether.errors import StoreUnavailable
from tether.stores import CheckpointStore, create_store

BACKENDS = ["memory", "sqlite", "redis", "postgresql", "mysql", "tiered"]
SERVER_BACKENDS = {"redis", "postgresql", "mysql", "tiered"}
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def backend_url(name: str, tmp_path: Path) -> str | None:
    if name == "memory":
        return f"memory://{tmp_path}"
    if name == "sqlite":
        return f"sqlite:///{tmp_path}/tether.db"
    return os.environ.get(f"TETHER_TEST_{name.upper()}_URL")


def require_url(name: str, tmp_path: Path) -> str:
    url = backend_url(name, tmp_path)
    if url is None:
        reason = f"set TETHER_TEST_{name.upper()}_URL to run the {name} store tests"
        if IN_CI:
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    return url


def new_id(prefix: str = "run") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


StoreFactory = Callable[..., AbstractAsyncContextManager[CheckpointStore]]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: Path) -> str:
    return require_url(backend, tmp_path)


@asynccontextmanager
async def open_test_store(backend: str, url: str, **options: Any) -> AsyncIterator[CheckpointStore]:
    """A set-up store on ``url``; an unreachable server fails under CI, else skips."""
    store = create_store(url, **options)
    try:
        await store.setup()
    except StoreUnavailable as exc:
        await store.aclose()
        if IN_CI:
            pytest.fail(f"CI=true but the {backend} server is unreachable: {exc}")
        pytest.skip(f"{backend} server unreachable: {exc}")
    try:
        yield store
    finally:
        await store.aclose()


@pytest.fixture
def make_store(backend: str, store_url: str) -> StoreFactory:
    """Open another store on the same backend (other options, or a second 'process')."""
    return lambda **options: open_test_store(backend, store_url, **options)


@pytest.fixture
async def store(make_store: StoreFactory) -> AsyncIterator[CheckpointStore]:
    async with make_store() as s:
        yield s
