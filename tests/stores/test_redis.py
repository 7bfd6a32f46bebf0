"""RedisStore quirks the conformance suite does not see: key TTLs, layout, index, errors."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from tether.errors import (
    CheckpointCorrupt,
    ConfigError,
    RunExpired,
    RunNotFound,
    StoreError,
    StoreUnavailable,
    VersionConflict,
)
from tether.state import Checkpoint, ExecutionContext, RunStatus
from tether.stores import CompactionPolicy, ExpiryPolicy, create_store
from tether.stores.redis import RedisStore

from ._worker import REDUCERS as _APPEND
from .conftest import new_id, redis_client, require_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def redis_url(tmp_path: Path) -> str:
    return require_url("redis", tmp_path)


@pytest.fixture
def prefix() -> str:
    return f"tether-test-{uuid.uuid4().hex[:8]}:"


@pytest.fixture
async def client(redis_url: str, prefix: str) -> AsyncIterator[aioredis.Redis]:
    """A raw client on the test db; removes this test's keys afterwards."""
    async with redis_client(redis_url, prefix) as c:
        yield c


def _url(redis_url: str, prefix: str) -> str:
    return f"{redis_url}{'&' if '?' in redis_url else '?'}prefix={prefix}"


@pytest.fixture
async def store(client: aioredis.Redis, redis_url: str, prefix: str) -> AsyncIterator[RedisStore]:
    s = RedisStore.from_url(_url(redis_url, prefix))
    await s.setup()
    yield s
    await s.aclose()


def _keys(prefix: str, run_id: str) -> list[str]:
    return [f"{prefix}{kind}:{run_id}" for kind in ("run", "rows", "hist", "full")]


async def test_keys_use_the_prefix_from_the_url(store, client, prefix):
    """Every key of a run lives under the store's prefix, and nothing else is written."""
    ctx = ExecutionContext(new_id(), {"a": 1})
    await store.commit(ctx)
    ctx.put("a", 2)
    await store.commit(ctx)
    found = sorted([k.decode() async for k in client.scan_iter(match=f"*{ctx.run_id}*")])
    assert found == sorted(_keys(prefix, ctx.run_id))
    assert await client.zscore(f"{prefix}runs", ctx.run_id) is not None
    assert sorted(await client.hkeys(f"{prefix}rows:{ctx.run_id}")) == [b"1", b"2", b"_base"]


async def test_every_key_of_a_run_carries_the_checkpoint_ttl(store, client, prefix):
    """Saves set PEXPIREAT = expires_at on all the run's keys; COMPLETED shortens it."""
    store.expiry = ExpiryPolicy(checkpoint_ttl=dt.timedelta(days=7), completed_ttl=dt.timedelta(hours=24))
    ctx = ExecutionContext(new_id(), {"a": 1})
    await store.commit(ctx)
    ctx.put("a", 2)
    await store.commit(ctx)
    week, day = 7 * 86400 * 1000, 86400 * 1000
    for key in _keys(prefix, ctx.run_id):
        assert week - 60_000 < await client.pttl(key) <= week + 1000, key
    info = await store.get_run(ctx.run_id)
    assert info.expires_at is not None
    await store.set_status(ctx.run_id, RunStatus.COMPLETED)
    for key in _keys(prefix, ctx.run_id):
        assert day - 60_000 < await client.pttl(key) <= day + 1000, key


async def test_no_ttl_persists_the_keys(store, client, prefix):
    """ExpiryPolicy(None) removes earlier TTLs: the run is kept forever."""
    ctx = ExecutionContext(new_id(), {"a": 1})
    await store.commit(ctx)
    assert await client.pttl(_keys(prefix, ctx.run_id)[0]) > 0
    store.expiry = ExpiryPolicy(checkpoint_ttl=None, completed_ttl=None)
    ctx.put("a", 2)
    await store.commit(ctx)
    for key in _keys(prefix, ctx.run_id):
        assert await client.pttl(key) == -1, key
    assert (await store.get_run(ctx.run_id)).expires_at is None


async def test_expired_runs_leave_the_index(store, client, prefix):
    """Redis drops expired keys; list_runs skips their ids and purge_expired sweeps them."""
    store.expiry = ExpiryPolicy(checkpoint_ttl=dt.timedelta(milliseconds=200))
    gone = [ExecutionContext(new_id(), {"a": i}) for i in range(3)]
    for ctx in gone:
        await store.commit(ctx)
    await asyncio.sleep(0.4)
    assert await client.zcard(f"{prefix}runs") == 3
    assert await store.purge_expired() == 3
    assert await client.zcard(f"{prefix}runs") == 0
    for ctx in gone:
        await store.commit(ExecutionContext(ctx.run_id, {"again": 1}))
    await asyncio.sleep(0.4)
    assert await store.list_runs() == []
    assert await client.zcard(f"{prefix}runs") == 0  # list_runs cleaned them lazily


async def test_list_runs_pages_past_stale_and_filtered_entries(store):
    """offset/limit count only live runs of the asked status, newest first."""
    ids = []
    for i in range(7):
        cp = Checkpoint(run_id=new_id(), node_id=None, state={"i": i})
        await store.save(cp)
        if i % 2:
            await store.set_status(cp.run_id, RunStatus.PAUSED)
        ids.append(cp.run_id)
    store.expiry = ExpiryPolicy(checkpoint_ttl=dt.timedelta(milliseconds=1))
    await store.save(Checkpoint(run_id=new_id(), node_id=None, state={}, status=RunStatus.PAUSED))
    await asyncio.sleep(0.05)
    paused = await store.list_runs(status=RunStatus.PAUSED, limit=2, offset=1)
    assert [r.run_id for r in paused] == [ids[3], ids[1]]
    assert [r.run_id for r in await store.list_runs(limit=3)] == [ids[6], ids[5], ids[4]]
    assert [r.run_id for r in await store.list_runs(limit=2, offset=6)] == [ids[0]]


async def test_racing_writers_on_separate_connections(store, redis_url, prefix):
    """Many writers with the same expected version at once: exactly one wins."""
    run_id = new_id()
    await store.save(Checkpoint(run_id=run_id, node_id=None, state={"n": 0}))
    stores = [RedisStore.from_url(_url(redis_url, prefix)) for _ in range(8)]
    try:
        results = await asyncio.gather(
            *(
                s.save(Checkpoint(run_id=run_id, node_id=None, state={"n": i}), expected_version=1)
                for i, s in enumerate(stores)
            ),
            return_exceptions=True,
        )
    finally:
        for s in stores:
            await s.aclose()
    wins = [r for r in results if isinstance(r, int)]
    conflicts = [r for r in results if isinstance(r, VersionConflict)]
    assert wins == [2] and len(conflicts) == 7, results
    assert (await store.load(run_id)).version == 2


async def test_a_given_client_is_not_closed(client, prefix):
    """RedisStore(client) leaves the caller's client open on aclose()."""
    store = RedisStore(client, prefix=prefix)
    await store.setup()
    await store.save(Checkpoint(run_id=new_id(), node_id=None, state={}))
    await store.aclose()
    assert await client.ping()


async def test_unreachable_server_is_store_unavailable():
    """A refused connection becomes StoreUnavailable, not a redis exception."""
    store = create_store("redis://127.0.0.1:1/0")
    try:
        with pytest.raises(StoreUnavailable):
            await store.setup()
        with pytest.raises(StoreUnavailable):
            await store.load(new_id())
    finally:
        await store.aclose()


async def test_server_errors_are_store_errors(store, client, prefix):
    """A key of the wrong type (someone else's data) gives StoreError naming redis."""
    run_id = new_id()
    await client.set(f"{prefix}run:{run_id}", b"not a hash")
    with pytest.raises(StoreError, match="redis"):
        await store.load(run_id)


async def test_bad_options_are_config_errors():
    """decode_responses would corrupt payloads; a bad URL says so."""
    with pytest.raises(ConfigError, match="decode_responses"):
        RedisStore.from_url("redis://127.0.0.1:6379/0", decode_responses=True)
    with pytest.raises(ConfigError):
        RedisStore.from_url("http://127.0.0.1/0")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )


def test_importing_tether_stores_does_not_import_redis():
    """The driver is imported only when a Redis store is asked for."""
    out = _python("import sys, tether.stores; print('redis' in sys.modules)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_missing_driver_is_a_config_error_with_the_fix():
    """Without the redis package, opening a redis:// store says what to install."""
    out = _python(
        "import sys; sys.modules['redis'] = None\n"
        "from tether.stores import create_store\n"
        "try:\n    create_store('redis://127.0.0.1:6379/0')\n"
        "except Exception as e:\n    print(type(e).__name__, e)\n"
    )
    assert out.stdout.strip() == ("ConfigError RedisStore needs redis: pip install 'tether[redis]'"), (
        out.stderr
    )


class _CountingConnection(aioredis.Connection):
    """Counts what the client sends: one send is one round trip (pipelines included)."""

    sent = 0

    async def send_packed_command(self, command, check_health=True):
        type(self).sent += 1
        await super().send_packed_command(command, check_health)


async def test_a_save_and_a_load_are_one_round_trip_each(client, redis_url, prefix):
    """commit() of a delta is one EVALSHA; loading the latest chain one (two the first time a
    store reads a chain over 64 KiB)."""
    store = RedisStore.from_url(_url(redis_url, prefix), connection_class=_CountingConnection)
    try:
        await store.setup()  # connects and loads the scripts
        ctx = ExecutionContext(new_id(), {"messages": []})
        await store.commit(ctx)
        for i in range(20):
            ctx.merge({"messages": [f"m{i}"]})
            before = _CountingConnection.sent
            await store.commit(ctx)
            assert _CountingConnection.sent - before == 1
        before = _CountingConnection.sent
        loaded = await store.load(ctx.run_id)
        assert _CountingConnection.sent - before == 1
        assert loaded.state == ctx.snapshot()
        # the store knows the chain it wrote: one plain HMGET, however big
        ctx.put("blob", b"x" * (2 << 20))
        await store.commit(ctx)
        before = _CountingConnection.sent
        loaded = await store.load(ctx.run_id)
        assert _CountingConnection.sent - before == 1
        assert loaded.state == ctx.snapshot()
        # a store that has not seen the run: the script, then (over CHAIN_INLINE_BYTES,
        # skipping Lua's copies) the HMGET; after that it knows the chain too
        fresh = RedisStore.from_url(_url(redis_url, prefix), connection_class=_CountingConnection)
        try:
            await fresh.setup()
            for expected_trips in (2, 1):
                before = _CountingConnection.sent
                loaded = await fresh.load(ctx.run_id)
                assert _CountingConnection.sent - before == expected_trips
                assert loaded.state == ctx.snapshot()
        finally:
            await fresh.aclose()
    finally:
        await store.aclose()


async def test_loads_survive_a_server_that_forgot_the_scripts(store, client, redis_url, prefix):
    """A restarted (or SCRIPT FLUSHed) server has no scripts: a load by hash must load the
    script and ask again, on the hinted path, the unhinted one and a big chain's."""
    small = ExecutionContext(new_id(), {"messages": ["a"]})
    big = ExecutionContext(new_id(), {"blob": b"y" * (200 << 10)})
    for ctx in (small, big):
        await store.commit(ctx)
    fresh = RedisStore.from_url(_url(redis_url, prefix))
    await fresh.setup()
    try:
        for reader in (fresh, store, fresh):  # unhinted, hinted, then hinted for the fresh store
            for ctx in (small, big):
                await client.script_flush()
                loaded = await reader.load(ctx.run_id)
                assert loaded is not None and loaded.state == ctx.snapshot()
        await client.script_flush()
        assert await fresh.load(new_id()) is None
    finally:
        await fresh.aclose()


@pytest.mark.parametrize(
    ("key", "base", "latest"), [("p:rows:x", 1, 1), ("p:rows:é-ü", 7, 1300), ("r", 99, 100)]
)
def test_the_chain_fetch_packs_as_redis_py_would(key: str, base: int, latest: int) -> None:
    """The rows HMGET is packed by hand (a 1,000-row chain is a 1,004-argument command):
    it must be byte for byte what redis-py sends."""
    import redis

    from tether.stores.redis.pipeline import hmget_rows

    conn = redis.Redis().connection_pool.make_connection()
    versions = [*range(base, latest + 1, 7), latest + 1]
    expected = b"".join(conn.pack_command("HMGET", key, "_base", *versions))
    assert hmget_rows(key, versions) == expected


async def test_a_long_chain_under_a_non_ascii_run_id_loads_by_both_paths(store, redis_url, prefix):
    run_id = new_id("ünïcode-run")
    ctx = ExecutionContext(run_id, {"messages": []})
    await store.commit(ctx)
    for i in range(300):
        ctx.merge({"messages": [{"i": i, "text": "x" * 2000}]})
        await store.commit(ctx)
    assert (await store.history(run_id, limit=1))[0].kind == "delta"
    hinted = await store.load(run_id)  # this store wrote it: the hint, one HMGET
    fresh = create_store(_url(redis_url, prefix))
    try:
        cold = await fresh.load(run_id)  # the script, then the HMGET of a big chain
    finally:
        await fresh.aclose()
    assert hinted is not None and cold is not None
    assert hinted.state == cold.state == ctx.snapshot() and hinted.version == cold.version == 301


# -- failure paths: expiry and damage say what they are -----------------------------------
async def test_an_expired_run_is_run_expired_until_its_id_is_swept(store, client, prefix):
    """Redis's TTL drops the keys, the run index keeps the id: load, load_context, commit
    and set_status say RunExpired (not "not found", not "another writer"); once
    purge_expired sweeps the id, the run is simply not found and its id can be reused."""
    store.expiry = ExpiryPolicy(checkpoint_ttl=dt.timedelta(milliseconds=300))
    ctx = ExecutionContext(new_id("expired"), {"a": 1})
    await store.commit(ctx)
    await asyncio.sleep(0.6)
    assert await client.exists(*_keys(prefix, ctx.run_id)) == 0
    with pytest.raises(RunExpired, match="has expired"):
        await store.load(ctx.run_id)
    with pytest.raises(RunExpired):
        await store.load(ctx.run_id, 1)
    with pytest.raises(RunExpired):
        await store.load_context(ctx.run_id)
    ctx.merge({"a": 2})
    with pytest.raises(RunExpired):
        await store.commit(ctx)
    with pytest.raises(RunExpired):
        await store.set_status(ctx.run_id, RunStatus.PAUSED)
    assert await store.get_run(ctx.run_id) is None
    assert await store.purge_expired() == 1
    assert await store.load(ctx.run_id) is None
    store.expiry = ExpiryPolicy()
    assert await store.commit(ExecutionContext(ctx.run_id, {"again": 1})) == 1


async def test_a_deleted_or_unknown_run_is_not_found_not_expired(store):
    ctx = ExecutionContext(new_id("deleted"), {"a": 1})
    await store.commit(ctx)
    assert await store.delete(ctx.run_id)
    assert await store.load(ctx.run_id) is None
    assert await store.load(new_id("never")) is None
    ctx.merge({"a": 2})
    with pytest.raises(RunNotFound) as caught:
        await store.commit(ctx)
    assert not isinstance(caught.value, RunExpired)


async def test_an_unindexed_store_cannot_tell_expired_from_unknown(client, redis_url, prefix):
    """Without the run index (indexed=False) nothing outlives the TTL: not found."""
    store = RedisStore.from_url(_url(redis_url, prefix), indexed=False)
    store.expiry = ExpiryPolicy(checkpoint_ttl=dt.timedelta(milliseconds=300))
    try:
        ctx = ExecutionContext(new_id("unindexed"), {"a": 1})
        await store.commit(ctx)
        assert await client.zscore(f"{prefix}runs", ctx.run_id) is None
        await asyncio.sleep(0.6)
        assert await store.load(ctx.run_id) is None
    finally:
        await store.aclose()


async def test_a_missing_row_inside_a_chain_is_corrupt_on_every_read(store, redis_url, prefix, client):
    """A delta row gone from the middle of a chain (evicted, deleted by hand): every read
    path says CheckpointCorrupt naming run and version, never a state without it."""
    store.compaction = CompactionPolicy(seal_whole_bytes=0)  # deltas, not an open segment
    ctx = ExecutionContext(new_id("hole"), {"items": []}, reducers=_APPEND)
    await store.commit(ctx)
    for i in range(3):
        ctx.merge({"items": [f"item {i}"]})
        await store.commit(ctx)
    assert [c.kind for c in await store.history(ctx.run_id)][::-1] == ["full", "delta", "delta", "delta"]
    await client.hdel(f"{prefix}rows:{ctx.run_id}", "2")
    fresh = RedisStore.from_url(_url(redis_url, prefix))
    try:
        for s in (store, fresh):  # with this store's hint, and without
            with pytest.raises(CheckpointCorrupt, match=rf"run '{ctx.run_id}' version 2"):
                await s.load(ctx.run_id)
            with pytest.raises(CheckpointCorrupt, match=rf"run '{ctx.run_id}' version 2"):
                await s.load(ctx.run_id, 3)
            with pytest.raises(CheckpointCorrupt, match=rf"run '{ctx.run_id}' version 2"):
                await s.load_context(ctx.run_id)
        assert (await store.load(ctx.run_id, 1)).state == {"items": []}
    finally:
        await fresh.aclose()


async def test_rows_without_their_run_record_are_corrupt_not_a_new_run(store, client, redis_url, prefix):
    """An evicted run record would make its run look new (and the next save start it
    over): a load by a process that never saw the run says CheckpointCorrupt instead, and
    so does a write onto it."""
    ctx = ExecutionContext(new_id("headless"), {"a": 1})
    await store.commit(ctx)
    ctx.merge({"a": 2})
    await store.commit(ctx)
    await client.delete(f"{prefix}run:{ctx.run_id}")
    fresh = RedisStore.from_url(_url(redis_url, prefix))
    try:
        with pytest.raises(CheckpointCorrupt, match="run record is missing"):
            await fresh.load(ctx.run_id)
        with pytest.raises(CheckpointCorrupt, match="run record is missing"):
            await fresh.load_context(ctx.run_id)
    finally:
        await fresh.aclose()
    ctx.merge({"a": 3})
    with pytest.raises(CheckpointCorrupt, match="run record is missing"):
        await store.commit(ctx)


async def test_the_blocking_twin_recovers_its_connection_and_the_scripts(store, client, redis_url, prefix):
    """The sync twin sends its writes on one connection it keeps: a connection the server
    dropped fails one call (StoreUnavailable, which a caller redoes on the async store),
    and the next call reconnects; a server that forgot the scripts is sent them again."""
    from tether.stores.blocking import blocking_twin, run_inline

    twin = blocking_twin(store, _url(redis_url, prefix), {})
    assert twin is not None
    try:
        ctx = ExecutionContext(new_id("twin"), {"n": 0})
        run_inline(twin.commit(ctx))
        held = twin.backend.keyspace.client._held  # type: ignore[attr-defined]
        held.conn.send_command("CLIENT", "ID")
        await client.client_kill_filter(_id=str(held.conn.read_response()))
        ctx.put("n", 1)
        with pytest.raises(StoreUnavailable):
            run_inline(twin.commit(ctx))
        assert run_inline(twin.commit(ctx)) == 2  # the write id: stored once either way
        await client.script_flush()
        ctx.put("n", 2)
        assert run_inline(twin.commit(ctx)) == 3
        assert (await store.load(ctx.run_id)).state == {"n": 2}
        assert [h.version for h in await store.history(ctx.run_id)] == [3, 2, 1]
    finally:
        run_inline(twin.aclose())


async def test_the_blocking_twin_serves_threads_at_once(store, redis_url, prefix):
    """Calls from several threads share one twin: one of them gets the kept connection,
    the others the pool's, and every write lands."""
    import concurrent.futures

    from tether.stores.blocking import blocking_twin, run_inline

    twin = blocking_twin(store, _url(redis_url, prefix), {})
    assert twin is not None
    ids = [new_id(f"t{i}") for i in range(4)]

    def work(run_id: str) -> int:
        ctx = ExecutionContext(run_id, reducers=_APPEND)
        for i in range(30):
            ctx.merge({"items": [i]})
            run_inline(twin.commit(ctx))
            assert run_inline(twin.load(run_id)).state == {"items": list(range(i + 1))}
        return ctx.version

    try:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            assert list(pool.map(work, ids)) == [30] * 4
    finally:
        run_inline(twin.aclose())
    for run_id in ids:
        assert (await store.load(run_id)).state == {"items": list(range(30))}
