"""TieredStore quirks: Redis flushed, restarted from an old snapshot, down, or left
behind by a crashed writer; SQL must always win and Redis must refill itself."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit

import pytest
import redis.asyncio as aioredis

from tether.errors import ConfigError, StoreUnavailable, VersionConflict
from tether.state import ExecutionContext, RunStatus
from tether.stores import CompactionPolicy, ExpiryPolicy, create_store
from tether.stores.base import Write
from tether.stores.memory import InMemoryStore
from tether.stores.redis import RedisStore
from tether.stores.tiered import TieredStore

from .conftest import IN_CI, delete_prefixed, new_id, redis_client, require_url, unavailable


@pytest.fixture
def tiered_url(tmp_path: Path) -> str:
    return require_url("tiered", tmp_path)


@pytest.fixture
def sql_url(tiered_url: str) -> str:
    return dict(parse_qsl(urlsplit(tiered_url).query))["sql"]


@pytest.fixture
def redis_url(tiered_url: str) -> str:
    parts = urlsplit(tiered_url)
    return f"redis://{parts.netloc}{parts.path}"


@pytest.fixture
def prefix() -> str:
    return f"tether-tiered-{uuid.uuid4().hex[:8]}:"


@pytest.fixture
async def client(redis_url: str, prefix: str) -> AsyncIterator[aioredis.Redis]:
    """A raw client on the tiered store's Redis db; removes this test's keys afterwards."""
    async with redis_client(redis_url, prefix) as c:
        yield c


_flush = delete_prefixed


async def _open(url: str, **options: object) -> TieredStore:
    store = TieredStore.from_url(url, **options)
    try:
        await store.setup()
    except StoreUnavailable as exc:
        await store.aclose()
        unavailable("a tiered server", exc)
    return store


@pytest.fixture
async def store(client, tiered_url: str, prefix: str) -> AsyncIterator[TieredStore]:
    s = await _open(f"{tiered_url}&prefix={prefix}")
    yield s
    await s.aclose()


async def _redis_only(redis_url: str, prefix: str) -> TieredStore:
    """A tiered store over an empty SQL side: whatever it loads came from Redis."""
    return TieredStore(redis=RedisStore.from_url(redis_url, prefix=prefix), sql=InMemoryStore())


async def _cached_version(client: aioredis.Redis, prefix: str, run_id: str) -> int | None:
    raw = await client.hget(f"{prefix}run:{run_id}", "version")
    return None if raw is None else int(raw)


async def _grow(store: TieredStore, n: int, run_id: str | None = None) -> ExecutionContext:
    ctx = ExecutionContext(run_id or new_id(), {"messages": []})
    for i in range(n):
        ctx.merge({"messages": [{"i": i, "text": "x" * 100}], "step": i})
        ctx.mark_executed(f"n{i}")
        await store.commit(ctx, node_id=f"n{i}")
    return ctx


async def test_flushed_redis_is_refilled_from_sql(store, client, redis_url, prefix):
    """After Redis loses everything, loads come from SQL and put the run back in Redis."""
    ctx = await _grow(store, 6)
    assert await _cached_version(client, prefix, ctx.run_id) == 6
    assert await _flush(client, prefix) > 0

    cp = await store.load(ctx.run_id)
    assert cp.version == 6 and cp.state == ctx.snapshot()
    assert cp.executed_node_ids == [f"n{i}" for i in range(6)]
    assert await _cached_version(client, prefix, ctx.run_id) == 6  # refilled
    assert [h.version for h in await store.history(ctx.run_id)] == [6, 5, 4, 3, 2, 1]
    assert (await store.load(ctx.run_id, 2)).state["step"] == 1
    assert ctx.run_id in {r.run_id for r in await store.list_runs(limit=10_000)}

    # the next load is served by Redis alone
    cache = await _redis_only(redis_url, prefix)
    try:
        again = await cache.load(ctx.run_id)
        assert again.version == 6 and again.state == ctx.snapshot()
        restored = await cache.load_context(ctx.run_id)
        assert restored.version == 6 and restored.chain == (await store.get_run(ctx.run_id)).chain
    finally:
        await cache.aclose()

    # and the run carries on: the first save after a flush lands in both tiers
    ctx2 = await store.load_context(ctx.run_id)
    await _flush(client, prefix)
    ctx2.merge({"step": 99})
    assert await store.commit(ctx2) == 7
    assert await _cached_version(client, prefix, ctx.run_id) is None  # not at v6: dropped
    assert (await store.load(ctx.run_id)).state["step"] == 99
    assert await _cached_version(client, prefix, ctx.run_id) == 7


async def test_redis_keeps_only_the_latest_chain_with_the_policy_ttl(store, client, prefix):
    """SQL keeps every version; Redis keeps the last full row and its deltas, with TTLs."""
    store.compaction = CompactionPolicy(max_chain=4)
    store.expiry = ExpiryPolicy(checkpoint_ttl=dt.timedelta(days=7), completed_ttl=dt.timedelta(hours=24))
    ctx = await _grow(store, 10)
    info = await store.get_run(ctx.run_id)
    cached = await client.hkeys(f"{prefix}rows:{ctx.run_id}")
    assert sorted(int(v) for v in cached if v != b"_base") == list(range(info.chain.base_version, 11))
    assert int(await client.hget(f"{prefix}rows:{ctx.run_id}", "_base")) == info.chain.base_version
    assert len(await store.history(ctx.run_id)) == 10
    week, day = 7 * 86400_000, 86400_000
    for kind in ("run", "rows", "hist", "full"):
        assert week - 60_000 < await client.pttl(f"{prefix}{kind}:{ctx.run_id}") <= week + 1000
    await store.set_status(ctx.run_id, RunStatus.COMPLETED)
    for kind in ("run", "rows", "hist", "full"):
        assert day - 60_000 < await client.pttl(f"{prefix}{kind}:{ctx.run_id}") <= day + 1000
    # the run record in Redis is the SQL one, field for field
    assert await store.get_run(ctx.run_id) == await store.sql.get_run(ctx.run_id)


async def test_a_crashed_writer_never_lets_redis_serve_a_stale_version(client, tiered_url, prefix):
    """Killed between its SQL commit and the Redis copy: reads go to SQL until the lease ends."""
    store = await _open(f"{tiered_url}&prefix={prefix}", lease=0.5)
    try:
        ctx = await _grow(store, 2)
        # what a writer killed after its SQL commit leaves: a lease, no Redis update
        await store.cache.begin(ctx.run_id, "dead-writer", time.time() + store.lease)
        ctx.merge({"step": 42})
        kind, payload, _, _, growth, rewrite, _ = store._encode_commit(
            ctx, ctx._take(), "n9", RunStatus.RUNNING, time.time(), {}
        )
        w = Write(
            run_id=ctx.run_id, kind=kind, payload=payload, node_id="n9",
            status=RunStatus.RUNNING, created_at=time.time(), expires_at=None,
            expected_version=2, growth_bytes=growth, rewrite_bytes=rewrite,
        )  # fmt: skip
        await store.sql._write(w)
        assert await _cached_version(client, prefix, ctx.run_id) == 2  # stale copy

        cp = await store.load(ctx.run_id)
        assert cp.version == 3 and cp.state["step"] == 42
        assert await _cached_version(client, prefix, ctx.run_id) == 2  # not refilled yet
        await asyncio.sleep(0.6)
        assert (await store.load(ctx.run_id)).version == 3
        assert await _cached_version(client, prefix, ctx.run_id) == 3  # lease over: refilled
        assert not await client.hexists(f"{prefix}run:{ctx.run_id}", "lease:dead-writer")
    finally:
        await store.aclose()


async def test_a_stale_copy_heals_at_the_first_conflict(store, client, prefix, sql_url):
    """A copy left stale (writer cut off from Redis) costs one conflict, not a loop."""
    ctx = await _grow(store, 2)
    behind = await store.load_context(ctx.run_id)
    other = TieredStore(
        redis=RedisStore.from_url("redis://127.0.0.1:1/0", prefix=prefix),
        sql=create_store(sql_url),
    )  # a writer whose Redis is unreachable: only SQL sees its save
    try:
        ahead = await other.load_context(ctx.run_id)
        ahead.merge({"step": 100})
        assert await other.commit(ahead) == 3
    finally:
        await other.aclose()
    assert await _cached_version(client, prefix, ctx.run_id) == 2
    behind.merge({"step": -1})
    with pytest.raises(VersionConflict):
        await store.commit(behind)
    fresh = await store.load_context(ctx.run_id)
    assert fresh.version == 3 and fresh.get("step") == 100
    fresh.merge({"step": 101})
    assert await store.commit(fresh) == 4
    assert await _cached_version(client, prefix, ctx.run_id) == 4


async def test_a_refill_loses_to_a_write_that_began_after_the_miss(store, client, prefix):
    """A reader that read SQL before a save cannot put that older chain into Redis."""
    ctx = await _grow(store, 3)
    await _flush(client, prefix)
    info, rows, token = await store.cache.fetch(ctx.run_id)
    assert info is None
    old_info, old_rows = await store.sql._read(ctx.run_id, None)
    ctx.merge({"step": 7})
    await store.commit(ctx)  # lands in SQL; Redis had no copy to append to
    assert not await store.cache.warm(old_info, old_rows, token)
    assert await _cached_version(client, prefix, ctx.run_id) is None
    assert (await store.load(ctx.run_id)).state["step"] == 7
    assert await _cached_version(client, prefix, ctx.run_id) == 4


async def test_delete_and_prune_drop_the_redis_copy(store, client, prefix):
    """delete() leaves no copy to resurrect the run; prune() leaves a correct one."""
    ctx = await _grow(store, 5)
    state = ctx.snapshot()
    assert await store.prune(ctx.run_id, keep=2) == 3
    assert await _cached_version(client, prefix, ctx.run_id) is None
    assert (await store.load(ctx.run_id)).state == state
    assert [h.version for h in await store.history(ctx.run_id)] == [5, 4]
    assert await store.delete(ctx.run_id) is True
    for kind in ("run", "rows", "hist", "full"):
        assert not await client.exists(f"{prefix}{kind}:{ctx.run_id}")
    assert await store.load(ctx.run_id) is None
    assert await store.get_run(ctx.run_id) is None


async def test_redis_down_saves_and_loads_through_sql(tiered_url, sql_url, caplog):
    """With Redis unreachable every operation still works, from SQL, with a warning."""
    caplog.set_level(logging.WARNING, logger="tether.stores.tiered")
    sql = create_store(sql_url)
    store = TieredStore(redis=RedisStore.from_url("redis://127.0.0.1:1/0"), sql=sql)
    try:
        try:
            await sql.setup()
        except StoreUnavailable as exc:
            unavailable("the SQL server", exc)
        ctx = await _grow(store, 3)
        assert (await store.load(ctx.run_id)).state == ctx.snapshot()
        await store.set_status(ctx.run_id, RunStatus.PAUSED)
        assert await store.update_state(ctx.run_id, {"step": 5}) == 4
        assert (await store.get_run(ctx.run_id)).status is RunStatus.PAUSED
        assert (await store.load_context(ctx.run_id)).get("step") == 5
        assert await store.delete(ctx.run_id)
    finally:
        await store.aclose()
    assert any("tiered: redis" in r.getMessage() for r in caplog.records)


# -- a private Redis server, restarted from an old snapshot --------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[tuple[int, Callable[[], None]]]:
    """A redis-server of our own (so restarting it bothers nobody) and a restart()."""
    binary = shutil.which("redis-server")
    if binary is None:
        if IN_CI:
            pytest.fail("CI=true but redis-server is not installed")
        pytest.skip("redis-server is not installed")
    port = _free_port()
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path),
             "--save", "", "--appendonly", "no", "--dbfilename", "snap.rdb"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        procs.append(proc)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("private redis-server did not start")

    def restart() -> None:
        procs[-1].kill()  # like a crash: nothing after the last SAVE survives
        procs[-1].wait(timeout=10)
        start()

    start()
    yield port, restart
    for p in procs:
        p.kill()
        p.wait(timeout=10)


async def test_redis_restarted_from_an_old_snapshot_is_not_trusted(private_redis, sql_url):
    """Redis comes back with v3 after v5 was saved: loads give v5 and refill Redis."""
    port, restart = private_redis
    url = f"tiered+redis://127.0.0.1:{port}/0?sql={quote(sql_url, safe='')}"
    store = await _open(url)
    raw = aioredis.Redis(port=port)
    try:
        ctx = await _grow(store, 3)
        await raw.save()  # the snapshot a restart will load
        ctx.merge({"step": 50})
        await store.commit(ctx)
        ctx.merge({"step": 51})
        await store.commit(ctx)
        restart()
        assert int(await raw.hget(f"tether:run:{ctx.run_id}", "version")) == 3  # stale copy

        cp = await store.load(ctx.run_id)
        assert cp.version == 5 and cp.state == ctx.snapshot()
        assert int(await raw.hget(f"tether:run:{ctx.run_id}", "version")) == 5  # refilled
        ctx.merge({"step": 52})
        assert await store.commit(ctx) == 6
        assert int(await raw.hget(f"tether:run:{ctx.run_id}", "version")) == 6
        assert (await store.load(ctx.run_id)).state["step"] == 52
    finally:
        await raw.aclose()
        await store.delete(ctx.run_id)
        await store.aclose()


def test_url_needs_the_sql_store():
    """The SQL side is required and named in the error message."""
    with pytest.raises(ConfigError, match="sql="):
        TieredStore.from_url("tiered+redis://127.0.0.1:6379/0")
    with pytest.raises(ConfigError):
        TieredStore(redis=RedisStore.from_url("redis://127.0.0.1:6379/0"), sql=None)  # type: ignore[arg-type]
