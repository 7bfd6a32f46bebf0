"""Runs with prompt records, for the prompt, replay and streaming tests."""

from __future__ import annotations

import pytest

from tether.stores import open_store


@pytest.fixture
async def store(tmp_path):
    async with open_store(f"sqlite:///{tmp_path}/observe.db") as s:
        yield s
