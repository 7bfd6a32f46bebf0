"""PostgreSQL's payload column: stored uncompressed out of line (schema version 4), read in
slices when a payload is big, whole when a row was stored compressed before; each test
works in a schema of its own, so it may change how that schema's table stores payloads."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.stores.conftest import new_id, open_test_store, require_url
from tether.state import ExecutionContext, ReducerRegistry
from tether.stores import CheckpointStore, CompactionPolicy
from tether.stores._pg_slices import SLICE as _SLICE
from tether.stores._pg_slices import Slices
from tether.stores.blocking import blocking_twin, run_inline

_APPEND = ReducerRegistry().register("items", "append")


@pytest.fixture
async def schema(tmp_path: Path) -> AsyncIterator[tuple[str, Any, str]]:
    """``(url, admin connection, schema)``: a URL whose store lives in a new schema."""
    import psycopg

    url = require_url("postgresql", tmp_path)
    name = f"pgpay_{uuid.uuid4().hex[:10]}"
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        await admin.execute(f"CREATE SCHEMA {name}")
        try:
            sep = "&" if "?" in url else "?"
            yield f"{url}{sep}options=-csearch_path%3D{name}", admin, name
        finally:
            await admin.execute(f"DROP SCHEMA {name} CASCADE")


def _text(rng: random.Random, n: int) -> str:
    """``n`` characters of varied words: compressible as prose is, not as one repeated byte."""
    words = ["deploy", "service", "rollback", "ledger", "token", "span", "retry", "node", "cache", "queue"]
    out: list[str] = []
    size = 0
    while size < n:
        w = rng.choice(words) + str(rng.randrange(10_000))
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


async def _storage(admin: Any, schema: str) -> str:
    cur = await admin.execute(
        "SELECT attstorage FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'payload'",
        (f"{schema}.tether_checkpoints",),
    )
    row = await cur.fetchone()
    return str(row[0])


async def _stored(admin: Any, schema: str, run_id: str) -> list[tuple[int, int, int]]:
    """``(version, bytes, bytes as stored)`` of the run's rows that hold a payload."""
    cur = await admin.execute(
        f"SELECT version, octet_length(payload), pg_column_size(payload) FROM {schema}.tether_checkpoints "
        "WHERE run_id = %s AND nbytes > 0 ORDER BY version",
        (run_id,),
    )
    return [(int(v), int(n), int(s)) for v, n, s in await cur.fetchall()]


async def _grow(store: CheckpointStore, run_id: str, items: list[str]) -> list[int]:
    """Commit ``items`` one per version; the version of each."""
    ctx = await store.load_context(run_id, reducers=_APPEND) or ExecutionContext(run_id, reducers=_APPEND)
    versions = []
    for item in items:
        ctx.merge({"items": [item]})
        versions.append(await store.commit(ctx))
    return versions


async def test_big_payloads_are_stored_uncompressed_and_read_back_in_slices(schema, monkeypatch) -> None:
    """A state several slices big, then deltas (a few of them big too): the latest and every
    older version load back equal, from the async store and from its blocking twin, the
    big rows stored uncompressed and read in slices."""
    url, admin, name = schema
    slices = []
    add = Slices.add
    monkeypatch.setattr(Slices, "add", lambda self, row: (slices.append(row[-2]), add(self, row)))
    rng = random.Random(7)
    items = [_text(rng, 5 * _SLICE + 123)] + [_text(rng, rng.choice([300, 2 * _SLICE + 5])) for _ in range(6)]
    async with open_test_store("postgresql", url, compaction=CompactionPolicy(max_chain=100)) as store:
        assert await _storage(admin, name) == "e"
        run_id = new_id("pgslice")
        versions = await _grow(store, run_id, items)
        stored = await _stored(admin, name, run_id)
        assert any(n > 5 * _SLICE for _, n, _s in stored)
        assert all(s >= n for _, n, s in stored if n > _SLICE)  # uncompressed: sliced on reads
        async with open_test_store("postgresql", url) as fresh:  # no hint, nothing kept
            got = await fresh.load(run_id)
            assert got is not None and got.state == {"items": items}
            assert any(at is not None for at in slices)
            for i, version in enumerate(versions):
                old = await fresh.load(run_id, version)
                assert old is not None and old.state == {"items": items[: i + 1]}
            ctx = await fresh.load_context(run_id, reducers=_APPEND)
            assert ctx is not None and ctx.get("items") == items
        twin = blocking_twin(store, url, {})
        assert twin is not None
        try:
            again = run_inline(twin.load(run_id))
            assert again is not None and again.state == {"items": items}
        finally:
            run_inline(twin.aclose())


async def test_rows_stored_compressed_before_the_migration_still_read_whole(schema) -> None:
    """A database whose payloads were compressed (as before schema version 4) gets the new
    storage from ``setup``; its compressed rows read back whole, the rows written since in
    slices, and a chain of both loads equal."""
    url, admin, name = schema
    rng = random.Random(11)
    big = _text(rng, 8 * _SLICE)
    async with open_test_store("postgresql", url, compaction=CompactionPolicy(max_chain=100)):
        pass
    # the schema as a version 3 database has it: compressed payloads
    await admin.execute(f"ALTER TABLE {name}.tether_checkpoints ALTER COLUMN payload SET STORAGE EXTENDED")
    await admin.execute(f"DELETE FROM {name}.tether_schema WHERE version = 4")
    run_id = new_id("pgold")
    async with open_test_store("postgresql", url, compaction=CompactionPolicy(max_chain=100)) as store:
        assert await _storage(admin, name) == "e"  # setup migrated it
        await admin.execute(
            f"ALTER TABLE {name}.tether_checkpoints ALTER COLUMN payload SET STORAGE EXTENDED"
        )
        await _grow(store, run_id, [big])
        [(_, n, s)] = await _stored(admin, name, run_id)
        assert s < n  # compressed: not sliceable
        await admin.execute(
            f"ALTER TABLE {name}.tether_checkpoints ALTER COLUMN payload SET STORAGE EXTERNAL"
        )
        tail = [_text(rng, 3 * _SLICE), "small"]
        await _grow(store, run_id, tail)
    async with open_test_store("postgresql", url) as fresh:
        got = await fresh.load(run_id)
        assert got is not None and got.state == {"items": [big, *tail]}
        first = await fresh.load(run_id, 1)
        assert first is not None and first.state == {"items": [big]}
