"""Shared test setup: a clean TETHER_* environment for every test."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Library code must not depend on the caller's TETHER_* variables (httpx clean_environ)."""
    for name in list(os.environ):
        if name.startswith("TETHER_") and not name.startswith("TETHER_TEST_"):
            monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _no_model_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may reach a real model API (local test servers on loopback are allowed)."""
    import tether.models

    monkeypatch.setattr(tether.models, "ALLOW_MODEL_REQUESTS", False)


@pytest.fixture(autouse=True)
def _private_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Agent artefacts of server-store runs go under XDG_DATA_HOME: keep them out of the home."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.getbasetemp() / "xdg-data"))
