from __future__ import annotations

from collections.abc import Iterator

import pytest

import tether.models
from tests.models._server import FakeServer


@pytest.fixture(autouse=True)
def _block_model_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reaches a real provider; loopback test servers stay reachable (allow_local)."""
    monkeypatch.setattr(tether.models, "ALLOW_MODEL_REQUESTS", False)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    srv = FakeServer().start()
    try:
        yield srv
    finally:
        srv.stop()
