"""Opening a store on a database it has already set up says nothing: no driver warning on
every start (MySQL's driver logs one for each ``CREATE TABLE IF NOT EXISTS`` of an existing
table)."""

from __future__ import annotations

import logging

import pytest

from .conftest import open_test_store, require_url


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mysql"])
async def test_a_second_setup_logs_no_warning(backend, tmp_path, caplog):
    url = require_url(backend, tmp_path)
    async with open_test_store(backend, url):
        pass
    caplog.clear()
    with caplog.at_level(logging.INFO):
        async with open_test_store(backend, url) as store:
            assert await store.get_run("quiet-setup-missing") is None
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not noisy, [r.getMessage() for r in noisy]
