"""``benchmarks/bench_workers.py`` measures in a PostgreSQL database of its own, set up before
any worker starts, vacuumed between lines, and gone when the bench ends, even when it fails."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from .conftest import store_url

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def _databases(url: str) -> set[str]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return {row[0] for row in conn.execute("SELECT datname FROM pg_database")}


def test_the_bench_works_in_a_database_of_its_own_that_it_drops() -> None:
    import bench_workers
    import psycopg

    url = store_url("postgresql")
    before = _databases(url)
    with pytest.raises(RuntimeError, match="the bench failed"), bench_workers.own_database(url) as own:
        name = urlsplit(own).path.lstrip("/")
        assert name.startswith("tether_bench_") and name not in before
        with psycopg.connect(own) as conn:  # the tables exist before any worker starts
            tables = {row[0] for row in conn.execute("SELECT tablename FROM pg_tables")}
        assert {"tether_runs", "tether_checkpoints"} <= tables
        bench_workers.vacuum(own)  # what runs before each line
        raise RuntimeError("the bench failed")
    assert name not in _databases(url)


def test_a_setting_given_to_the_bench_holds_in_its_database_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--pg-set synchronous_commit=off`` is for the bench's own database: every session there
    (the workers' too) has it, the server's other databases keep theirs, a malformed setting
    is refused before anything is created, and one the server refuses leaves no database."""
    import bench_workers
    import psycopg

    url = store_url("postgresql")
    setting = bench_workers.pg_setting("synchronous_commit=off")
    with bench_workers.own_database(url, [setting]) as own, psycopg.connect(own) as conn:
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)
    with psycopg.connect(url) as conn:
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
    for bad in ("synchronous_commit", "=off", "x; DROP TABLE y=1"):
        with pytest.raises(SystemExit, match="expected NAME=VALUE"):
            bench_workers.pg_setting(bad)
    # a setting the server refuses leaves no database behind
    known = uuid.uuid4()
    monkeypatch.setattr(bench_workers.uuid, "uuid4", lambda: known)
    unknown = bench_workers.pg_setting("no_such_setting=1")
    with pytest.raises(psycopg.Error, match="no_such_setting"), bench_workers.own_database(url, [unknown]):
        pass
    assert f"tether_bench_{known.hex[:8]}" not in _databases(url)
