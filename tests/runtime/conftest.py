"""Runtime tests run on SQLite, PostgreSQL and Redis (and memory for the pure logic)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.stores.conftest import open_test_store, require_url
from tether.stores import CheckpointStore

RUNTIME_BACKENDS = ["memory", "sqlite", "postgresql", "redis"]


@pytest.fixture(params=RUNTIME_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: Path) -> str:
    return require_url(backend, tmp_path)


@pytest.fixture
async def store(backend: str, store_url: str) -> AsyncIterator[CheckpointStore]:
    async with open_test_store(backend, store_url) as s:
        yield s
