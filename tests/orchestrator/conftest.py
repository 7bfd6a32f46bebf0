"""Orchestrator tests: a sample project with a real bug and a real pytest suite per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.orchestrator.demo import make_sample_repo
from tether.stores import create_store


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_sample_repo(tmp_path / "project")


@pytest.fixture
async def store(tmp_path: Path):
    s = create_store(f"sqlite:///{tmp_path}/orchestrator.db")
    await s.setup()
    yield s
    await s.aclose()
