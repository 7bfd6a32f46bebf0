"""Runtime tests run on SQLite, PostgreSQL and Redis (and memory for the pure logic)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.stores.conftest import IN_CI, require_url
from tether.errors import StoreUnavailable
from tether.stores import CheckpointStore, create_store

RUNTIME_BACKENDS = ["memory", "sqlite", "postgresql", "redis"]


@pytest.fixture(params=RUNTIME_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: Path) -> str:
    return require_url(backend, tmp_path)


@pytest.fixture
async def store(backend: str, store_url: str) -> AsyncIterator[CheckpointStore]:
    s = create_store(store_url)
    try:
        await s.setup()
    except StoreUnavailable as exc:
        await s.aclose()
        if IN_CI:
            pytest.fail(f"CI=true but the {backend} server is unreachable: {exc}")
        pytest.skip(f"{backend} server unreachable: {exc}")
    try:
        yield s
    finally:
        await s.aclose()
