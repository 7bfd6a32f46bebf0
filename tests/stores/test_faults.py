"""The failure matrix of the stores: every fault injected into a real server, each one a run
of steps driven through it.

Each test drives a run (a commit per step) with one fault injected mid-way: a killed
connection (PostgreSQL ``pg_terminate_backend``, MariaDB ``KILL``), a private Redis stopped
for 3 s, a forced deadlock, a reply lost after the write landed (a proxy), a state over
``max_allowed_packet``, a full or read-only disk, a flipped byte, a missing row. It then
asserts the run ended COMPLETED, or PAUSED / FAILED with a report of what went wrong, and
that every checkpoint committed before, during and after the fault loads as committed.

Most tests drive the run with :func:`drive`, a few lines that commit step by step and, on a
store error that outlasts the store's retries, record the run PAUSED with a report once the
store takes writes again: the store side alone, every assertion on stored data. The last
test runs the faults that end a run differently under the real ``Runner`` (which pauses or
interrupts a run on a store error instead of dying).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tether.errors import (
    CheckpointCorrupt,
    ConfigError,
    StoreError,
    StoreNotWritable,
    StoreUnavailable,
)
from tether.state import ExecutionContext, RunStatus, default_registry
from tether.state.reserved import runtime_state, runtime_update
from tether.stores import CheckpointStore, RetryPolicy
from tether.stores.redis import RedisStore
from tether.stores.sqlite import SqliteStore

from ._faults import ReplyDropper, flip_sql_byte, private_redis, small_tmpfs, with_port
from .conftest import new_id, open_test_store, require_url

REDUCERS = default_registry().register("items", "append")
ENDINGS = {RunStatus.COMPLETED, RunStatus.PAUSED, RunStatus.INTERRUPTED, RunStatus.FAILED}

Fault = Callable[[ExecutionContext], Awaitable[None]]


async def drive(
    store: CheckpointStore, run_id: str, *, steps: int, fault_at: int, fault: Fault
) -> dict[int, list[str]]:
    """Run ``steps`` steps (each appends one item and commits), calling ``fault`` before
    step ``fault_at``. A store error that the store's retries did not absorb pauses the
    run with a report (written once the store takes writes again). Returns what each
    committed version holds."""
    ctx = ExecutionContext(run_id, {"items": []}, reducers=REDUCERS)
    committed: dict[int, list[str]] = {await store.commit(ctx): []}
    for step in range(1, steps + 1):
        if step == fault_at:
            await fault(ctx)
        ctx.merge({"items": [f"step-{step}"]})
        try:
            version = await store.commit(ctx, node_id=f"step-{step}")
        except StoreError as exc:
            await _pause_with_report(store, run_id, step, exc)
            return committed
        committed[version] = list(ctx.get("items"))
    await store.set_status(run_id, RunStatus.COMPLETED)
    return committed


async def _pause_with_report(store: CheckpointStore, run_id: str, step: int, exc: StoreError) -> None:
    """What the runner does on a store error it cannot retry: status PAUSED, a report."""
    report = {"step": step, "error": type(exc).__name__, "message": str(exc)}
    for _ in range(50):
        try:
            ctx = await store.load_context(run_id, reducers=REDUCERS)
            assert ctx is not None
            ctx.merge(runtime_update(failure_report=report))
            await store.commit(ctx, status=RunStatus.PAUSED, metadata={"report": report})
            return
        except StoreError:
            await asyncio.sleep(0.1)  # not writable yet: the report waits for the store
    raise AssertionError("the store never took the report")


async def assert_consistent(
    store: CheckpointStore, run_id: str, committed: dict[int, list[str]], *, ended: set[RunStatus] = ENDINGS
) -> RunStatus:
    """The run ended in an allowed status (with a report unless COMPLETED) and every
    committed version loads exactly as it was committed."""
    info = await store.get_run(run_id)
    assert info is not None and info.status in ended, info
    if info.status is not RunStatus.COMPLETED:
        cp = await store.load(run_id)
        assert cp is not None and runtime_state(cp.state).get("failure_report"), cp
    for version, items in committed.items():
        cp = await store.load(run_id, version)
        assert cp is not None and cp.state["items"] == items, (version, cp)
    versions = [h.version for h in await store.history(run_id)]
    assert versions == list(range(info.version, 0, -1))  # nothing stored twice, none lost
    return info.status


def _retry_logged(caplog: pytest.LogCaptureFixture, word: str) -> bool:
    return any("retry" in r.getMessage() and word in r.getMessage().lower() for r in caplog.records)


# -- connection loss ------------------------------------------------------------------
async def test_postgres_connection_killed_between_commits(tmp_path, caplog):
    """``pg_terminate_backend`` of the store's own connection: the next commit reconnects."""
    import psycopg

    url = require_url("postgresql", tmp_path)
    async with (
        open_test_store("postgresql", url) as store,
        await psycopg.AsyncConnection.connect(url, autocommit=True) as admin,
    ):

        async def kill(_ctx: ExecutionContext) -> None:
            (pid,) = (await store.backend._query("SELECT pg_backend_pid()"))[0]
            await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

        run_id = new_id("pgkill")
        committed = await drive(store, run_id, steps=4, fault_at=2, fault=kill)
        assert await assert_consistent(store, run_id, committed) is RunStatus.COMPLETED
        assert _retry_logged(caplog, "postgresql")


async def test_mariadb_connection_killed_between_commits(tmp_path, caplog):
    """MariaDB ``KILL`` of the store's own connection: the next commit reconnects."""
    import asyncmy

    url = require_url("mysql", tmp_path)
    parts = urlsplit(url)
    async with open_test_store("mysql", url) as store:
        admin = await asyncmy.connect(
            host=parts.hostname, port=parts.port or 3306, user=parts.username or "root",
            password=parts.password or "", db=parts.path.lstrip("/"), autocommit=True,
        )  # fmt: skip

        async def kill(_ctx: ExecutionContext) -> None:
            (conn_id,) = (await store.backend._query("SELECT CONNECTION_ID()"))[0]
            async with admin.cursor() as cur:
                await cur.execute(f"KILL {int(conn_id)}")

        try:
            run_id = new_id("mykill")
            committed = await drive(store, run_id, steps=4, fault_at=2, fault=kill)
        finally:
            admin.close()
        assert await assert_consistent(store, run_id, committed) is RunStatus.COMPLETED
        assert _retry_logged(caplog, "mysql")


async def test_private_redis_stopped_for_3s_and_restarted(tmp_path):
    """A commit while Redis is away waits for it (retries with backoff) and lands once."""
    with private_redis(tmp_path) as server:
        async with open_test_store("redis", server.url) as store:
            run_id = new_id("redisdown")
            started = 0.0

            async def outage(_ctx: ExecutionContext) -> None:
                nonlocal started
                started = time.monotonic()
                server.stop()
                asyncio.get_running_loop().call_later(3.0, server.start)

            committed = await drive(store, run_id, steps=4, fault_at=2, fault=outage)
            assert time.monotonic() - started >= 2.5  # step 2's commit waited out the outage
            assert await assert_consistent(store, run_id, committed) is RunStatus.COMPLETED


async def test_redis_away_longer_than_the_retries_pauses_the_run(tmp_path):
    """Past the retry budget the error reaches the caller as StoreUnavailable; the run is
    paused with its report once Redis is back, and nothing committed is lost."""
    with private_redis(tmp_path) as server:
        policy = RetryPolicy(attempts=3, first_delay=0.05, max_delay=0.1)
        async with open_test_store("redis", server.url, retry=policy) as store:
            run_id = new_id("redislong")

            async def outage(_ctx: ExecutionContext) -> None:
                server.stop()
                asyncio.get_running_loop().call_later(2.0, server.start)

            committed = await drive(store, run_id, steps=4, fault_at=3, fault=outage)
            status = await assert_consistent(store, run_id, committed)
            assert status is RunStatus.PAUSED and sorted(committed) == [1, 2, 3]
            cp = await store.load(run_id)
            assert runtime_state(cp.state)["failure_report"]["error"] == "StoreUnavailable"


# -- deadlocks ------------------------------------------------------------------------
async def test_postgres_deadlock_is_retried_inside_the_store(tmp_path, caplog):
    """A real deadlock (40P01) between the store's commit and another connection of ours,
    on rows of our own schema: the store's transaction is the victim and is retried."""
    import psycopg

    url = require_url("postgresql", tmp_path)
    schema = f"fault_{uuid.uuid4().hex[:10]}"
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        await admin.execute(f"CREATE SCHEMA {schema}")
        try:
            sep = "&" if "?" in url else "?"
            private = f"{url}{sep}options=-csearch_path%3D{schema}"
            async with open_test_store("postgresql", private) as store:
                key = int(uuid.uuid4().int % (1 << 62))
                await admin.execute(
                    f"CREATE FUNCTION {schema}.hold() RETURNS trigger LANGUAGE plpgsql AS "
                    f"$$ BEGIN PERFORM pg_advisory_xact_lock({key}); RETURN NEW; END $$"
                )
                await admin.execute(
                    f"CREATE TRIGGER hold BEFORE INSERT ON {schema}.tether_checkpoints "
                    f"FOR EACH ROW EXECUTE FUNCTION {schema}.hold()"
                )
                other = await psycopg.AsyncConnection.connect(url)

                async def deadlock(ctx: ExecutionContext) -> None:
                    await other.execute("SET deadlock_timeout = '20s'")  # the store detects it
                    await other.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
                    ctx.merge({"items": ["in-deadlock"]})
                    commit = asyncio.create_task(store.commit(ctx))
                    await asyncio.sleep(0.5)  # the store holds the run's row, waits on the key
                    await other.execute(
                        f"SELECT 1 FROM {schema}.tether_runs WHERE run_id = %s FOR UPDATE", (ctx.run_id,)
                    )
                    await other.rollback()
                    assert await commit == 3

                try:
                    run_id = new_id("pgdead")
                    committed = await drive(store, run_id, steps=3, fault_at=2, fault=deadlock)
                finally:
                    await other.close()
                assert await assert_consistent(store, run_id, committed) is RunStatus.COMPLETED
                cp = await store.load(run_id, 3)
                assert cp.state["items"] == ["step-1", "in-deadlock"]
                assert _retry_logged(caplog, "deadlock")
        finally:
            await admin.execute(f"DROP SCHEMA {schema} CASCADE")


async def test_mariadb_deadlock_is_retried_inside_the_store(tmp_path, caplog):
    """A real deadlock (1213) between the store's commit and another connection of ours,
    in a database of our own: the store's transaction is the victim and is retried."""
    import asyncmy

    url = require_url("mysql", tmp_path)
    parts = urlsplit(url)
    db = f"fault_{uuid.uuid4().hex[:10]}"
    params: dict[str, Any] = {
        "host": parts.hostname, "port": parts.port or 3306, "user": parts.username or "root",
        "password": parts.password or "", "autocommit": True,
    }  # fmt: skip
    admin = await asyncmy.connect(**params)

    async def sql(conn: Any, statement: str, args: tuple[Any, ...] = ()) -> None:
        async with conn.cursor() as cur:
            await cur.execute(statement, args or None)
            await cur.fetchall()

    await sql(admin, f"CREATE DATABASE {db}")
    try:
        async with open_test_store("mysql", parts._replace(path=f"/{db}").geturl()) as store:
            await sql(admin, f"CREATE TABLE {db}.gate (id INT PRIMARY KEY) ENGINE=InnoDB")
            await sql(admin, f"CREATE TABLE {db}.ballast (id INT PRIMARY KEY) ENGINE=InnoDB")
            await sql(admin, f"INSERT INTO {db}.gate VALUES (1)")
            await sql(
                admin,
                f"CREATE TRIGGER {db}.hold BEFORE INSERT ON {db}.tether_checkpoints FOR EACH ROW "
                f"BEGIN DECLARE x INT; SELECT id INTO x FROM {db}.gate WHERE id = 1 FOR UPDATE; END",
            )
            other = await asyncmy.connect(**{**params, "autocommit": False})

            async def deadlock(ctx: ExecutionContext) -> None:
                await other.begin()
                await sql(other, f"INSERT INTO {db}.ballast SELECT seq FROM {db}.seq_1_to_200")  # heavier
                await sql(other, f"SELECT id FROM {db}.gate WHERE id = 1 FOR UPDATE")
                ctx.merge({"items": ["in-deadlock"]})
                commit = asyncio.create_task(store.commit(ctx))
                await asyncio.sleep(0.5)  # the store holds the run's row, waits on the gate
                await sql(
                    other, f"SELECT run_id FROM {db}.tether_runs WHERE run_id = %s FOR UPDATE", (ctx.run_id,)
                )
                await other.rollback()
                assert await commit == 3

            try:
                run_id = new_id("mydead")
                committed = await drive(store, run_id, steps=3, fault_at=2, fault=deadlock)
            finally:
                other.close()
            assert await assert_consistent(store, run_id, committed) is RunStatus.COMPLETED
            assert _retry_logged(caplog, "deadlock")
    finally:
        await sql(admin, f"DROP DATABASE {db}")
        admin.close()


# -- lost replies ---------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["postgresql", "mysql", "redis"])
async def test_a_write_whose_reply_was_lost_is_stored_once(backend, tmp_path):
    """A proxy forwards the commit, lets the server act on it, and drops the reply: the
    store's retry finds its own write id and returns the same version, never a conflict
    nor a second copy."""
    url = require_url(backend, tmp_path)
    parts = urlsplit(url)
    async with ReplyDropper(parts.hostname or "127.0.0.1", parts.port or 0) as proxy:
        marker = f"lost-reply-{uuid.uuid4().hex}"

        async def drop_reply(ctx: ExecutionContext) -> None:
            ctx.merge({"items": [marker]})
            proxy.arm(marker.encode(), then=b"COMMIT" if backend == "mysql" else None)

        run_id = new_id("lost")
        async with open_test_store(backend, with_port(url, proxy.listen_port)) as store:
            committed = await drive(store, run_id, steps=3, fault_at=2, fault=drop_reply)
            assert proxy.dropped == 1 and committed[3] == ["step-1", marker, "step-2"]
            assert await assert_consistent(store, run_id, committed) is RunStatus.COMPLETED
            assert sorted(committed) == [1, 2, 3, 4]


# -- limits and full disks ------------------------------------------------------------
async def test_a_state_over_max_allowed_packet_is_state_too_large(tmp_path):
    """Checked before sending: StateTooLarge names the server's limit and the fix; the run
    pauses with that report and stays usable."""
    url = require_url("mysql", tmp_path)
    async with open_test_store("mysql", url) as store:
        (limit,) = (await store.backend._query("SELECT @@max_allowed_packet"))[0]
        run_id = new_id("packet")

        async def too_big(ctx: ExecutionContext) -> None:
            ctx.merge({"items": ["x" * (int(limit) + 1024)]})

        committed = await drive(store, run_id, steps=3, fault_at=2, fault=too_big)
        assert await assert_consistent(store, run_id, committed) is RunStatus.PAUSED
        report = runtime_state((await store.load(run_id)).state)["failure_report"]
        assert report["error"] == "StateTooLarge"
        assert "max_allowed_packet" in report["message"] and str(limit) in report["message"]


async def test_a_full_disk_and_a_read_only_one_are_not_transient(tmp_path):
    """SQLite on a 2 MB tmpfs: a full disk is StoreNotWritable (never StoreUnavailable,
    which would be retried forever); so is the file system remounted read-only."""
    with small_tmpfs(tmp_path / "disk", "2m") as disk:
        if disk is None:
            pytest.skip("cannot mount a tmpfs here (needs root and mount privileges)")
        url = f"sqlite:///{disk}/t.db"
        async with open_test_store("sqlite", url, retry=RetryPolicy(attempts=2)) as store:
            run_id = new_id("full")
            caught: list[BaseException] = []

            async def fill(ctx: ExecutionContext) -> None:
                ctx.merge({"items": [os.urandom(3 << 20).hex()[: 3 << 20]]})

            ctx = ExecutionContext(run_id, {"items": []}, reducers=REDUCERS)
            await store.commit(ctx)
            await fill(ctx)
            with pytest.raises(StoreNotWritable) as full:
                await store.commit(ctx)
            caught.append(full.value)
            assert full.value.reason == "disk full" and not isinstance(full.value, StoreUnavailable)
            assert "free space" in str(full.value)
            assert (await store.load(run_id)).state == {"items": []}  # version 1 intact
        remount = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True)
        assert remount.returncode == 0, remount.stderr
        store = SqliteStore(disk / "t.db", retry=RetryPolicy(attempts=2))
        try:
            with pytest.raises(StoreNotWritable) as ro:
                await store.setup()
                await store.commit(ExecutionContext(new_id(), {"a": 1}))
            assert ro.value.reason == "read-only" and "read-only" in str(ro.value)
        finally:
            await store.aclose()


# -- integrity ------------------------------------------------------------------------
async def test_a_flipped_byte_in_a_stored_row_is_corrupt_on_every_server(tmp_path):
    """A byte changed inside a stored string: CheckpointCorrupt naming run and version, on
    SQLite, PostgreSQL, MariaDB and Redis, never the altered state; also when the store had
    read the row before it changed (it keeps the rows it read, to compare them with)."""
    backends = ["sqlite", "postgresql", "mysql", "redis"]
    for backend in backends:
        url = require_url(backend, tmp_path)
        async with open_test_store(backend, url) as store:
            ctx = ExecutionContext(new_id("flip"), {"items": []}, reducers=REDUCERS)
            await store.commit(ctx)
            ctx.merge({"items": ["a stored string that will change"]})
            await store.commit(ctx)
            assert (await store.load(ctx.run_id)).state == ctx.snapshot()
            if isinstance(store, RedisStore):
                key = f"{store.prefix}rows:{ctx.run_id}"
                row = bytearray(await store.client.hget(key, "2"))
                row[row.index(b"will change")] ^= 0x01
                await store.client.hset(key, "2", bytes(row))
            else:
                row = (
                    await store.backend._query(
                        "SELECT payload FROM tether_checkpoints WHERE run_id = ? AND version = 2",
                        (ctx.run_id,),
                    )
                )[0][0]
                await flip_sql_byte(store, ctx.run_id, 2, bytes(row).index(b"will change"))
            with pytest.raises(CheckpointCorrupt, match=rf"run '{ctx.run_id}' version 2: checksum mismatch"):
                await store.load(ctx.run_id)
            assert (await store.load(ctx.run_id, 1)).state == {"items": []}


async def test_a_missing_base_row_on_redis_is_corrupt_not_not_found(tmp_path):
    url = require_url("redis", tmp_path)
    async with open_test_store("redis", url) as writer, open_test_store("redis", url) as reader:
        assert isinstance(writer, RedisStore)
        ctx = ExecutionContext(new_id("gone"), {"items": []}, reducers=REDUCERS)
        await writer.commit(ctx)
        ctx.merge({"items": ["x"]})
        await writer.commit(ctx)
        await writer.client.hdel(f"{writer.prefix}rows:{ctx.run_id}", "1")
        for store in (writer, reader):  # with this store's hint, and without
            with pytest.raises(CheckpointCorrupt, match=rf"run '{ctx.run_id}' version 1: .*missing"):
                await store.load(ctx.run_id)


async def test_an_evicting_redis_is_refused_or_warned_about(tmp_path, caplog):
    """allkeys-lru can drop checkpoints: setup refuses it and names the setting; with
    allow_eviction it logs a warning instead."""
    with private_redis(tmp_path, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru") as server:
        store = RedisStore.from_url(server.url)
        try:
            with pytest.raises(ConfigError, match="maxmemory-policy noeviction") as refused:
                await store.setup()
            assert "allkeys-lru" in str(refused.value) and "allow_eviction" in str(refused.value)
        finally:
            await store.aclose()
        caplog.set_level(logging.WARNING)
        store = RedisStore.from_url(server.url + "?allow_eviction=1")
        try:
            await store.setup()
            assert any(
                "allkeys-lru" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
            )
        finally:
            await store.aclose()


async def test_rows_in_the_previous_format_still_load(make_store):
    """A bare MessagePack full row and delta (as tether wrote them before checksums) load."""
    import ormsgpack

    from .conftest import raw_write

    async with make_store() as store:
        run_id = new_id("oldfmt")
        head = {"v": 2, "node": "a", "status": "RUNNING", "ts": time.time(), "meta": {}}
        full = {**head, "kind": "full", "executed": ["a"], "state": {"items": ["one"]}}
        delta = {**head, "kind": "delta", "ops": [["items", "append", ["two"]]], "executed": ["b"]}
        await raw_write(store, run_id, ormsgpack.packb(full), kind="full", expected=0)
        await raw_write(store, run_id, ormsgpack.packb(delta), expected=1)
        cp = await store.load(run_id)
        assert cp.state == {"items": ["one", "two"]} and cp.version == 2
        ctx = await store.load_context(run_id, reducers=REDUCERS)
        ctx.merge({"items": ["three"]})
        assert await store.commit(ctx) == 3
        assert (await store.load(run_id)).state == {"items": ["one", "two", "three"]}


# -- the matrix under the Runner ----------------------------------------------------------
MATRIX = ["postgresql-kill", "mysql-kill", "redis-outage", "lost-reply", "state-too-large", "disk-full"]


@pytest.mark.parametrize("fault", MATRIX)
async def test_every_fault_under_the_runner_ends_the_run_consistently(fault, tmp_path):
    """A real Runner drives steps a, b, c; step b injects the fault. The run ends COMPLETED
    (the store absorbed the fault), or PAUSED / INTERRUPTED with the reason stored, and
    every committed version is still there and loads, none stored twice."""
    from tether.runtime import Runner, Step, Workflow

    async with contextlib.AsyncExitStack() as stack:
        inject, url = await _runner_fault(fault, tmp_path, stack)
        store = await stack.enter_async_context(open_test_store(url.split(":")[0], url))
        injected: list[str] = []

        async def step(sc: Any) -> dict[str, Any]:
            extra: list[str] = []
            if sc.step.id == "b" and not injected:
                injected.append(fault)
                extra = await inject(store)
            return {"messages": [sc.step.id, *extra]}

        workflow = Workflow.plan([Step(id=s, fn=step) for s in ("a", "b", "c")])
        result = await Runner(workflow, store, store_wait=5).start(new_id(fault))
        assert injected == [fault] and result.status in ENDINGS, result
        info = await store.get_run(result.run_id)
        assert info is not None
        if result.status is RunStatus.COMPLETED:
            assert result.state["messages"][0] == "a" and result.state["messages"][-1] == "c"
        else:
            assert info.status is not RunStatus.COMPLETED
            assert runtime_state(result.state).get("pause_reason") or runtime_state(result.state).get(
                "failure_report"
            ), result.state
        versions = [h.version for h in await store.history(result.run_id)]
        assert versions == list(range(info.version, 0, -1))
        for version in versions:
            assert await store.load(result.run_id, version) is not None


async def _runner_fault(
    fault: str, tmp_path: Path, stack: contextlib.AsyncExitStack
) -> tuple[Callable[[CheckpointStore], Awaitable[list[str]]], str]:
    """The store URL for ``fault`` and what step b does to inject it (it returns extra
    messages for the step's update)."""
    if fault == "postgresql-kill":
        import psycopg

        url = require_url("postgresql", tmp_path)
        admin = await stack.enter_async_context(await psycopg.AsyncConnection.connect(url, autocommit=True))

        async def kill_pg(store: CheckpointStore) -> list[str]:
            (pid,) = (await store.backend._query("SELECT pg_backend_pid()"))[0]  # type: ignore[attr-defined]
            await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            return []

        return kill_pg, url
    if fault == "mysql-kill":
        import asyncmy

        url = require_url("mysql", tmp_path)
        parts = urlsplit(url)
        conn = await asyncmy.connect(
            host=parts.hostname, port=parts.port or 3306, user=parts.username or "root",
            password=parts.password or "", autocommit=True,
        )  # fmt: skip
        stack.callback(conn.close)

        async def kill_my(store: CheckpointStore) -> list[str]:
            (conn_id,) = (await store.backend._query("SELECT CONNECTION_ID()"))[0]  # type: ignore[attr-defined]
            async with conn.cursor() as cur:
                await cur.execute(f"KILL {int(conn_id)}")
            return []

        return kill_my, url
    if fault == "redis-outage":
        server = stack.enter_context(private_redis(tmp_path))

        async def outage(_store: CheckpointStore) -> list[str]:
            server.stop()
            asyncio.get_running_loop().call_later(3.0, server.start)
            return []

        return outage, server.url
    if fault == "lost-reply":
        url = require_url("postgresql", tmp_path)
        parts = urlsplit(url)
        proxy = await stack.enter_async_context(ReplyDropper(parts.hostname or "127.0.0.1", parts.port or 0))
        marker = f"lost-reply-{uuid.uuid4().hex}"

        async def drop(_store: CheckpointStore) -> list[str]:
            proxy.arm(marker.encode())
            return [marker]

        return drop, with_port(url, proxy.listen_port)
    if fault == "state-too-large":
        url = require_url("mysql", tmp_path)

        async def too_big(store: CheckpointStore) -> list[str]:
            (limit,) = (await store.backend._query("SELECT @@max_allowed_packet"))[0]  # type: ignore[attr-defined]
            return ["x" * (int(limit) + 1024)]

        return too_big, url
    assert fault == "disk-full"
    disk = stack.enter_context(small_tmpfs(tmp_path / "disk", "2m"))
    if disk is None:
        pytest.skip("cannot mount a tmpfs here (needs root and mount privileges)")

    async def fill(_store: CheckpointStore) -> list[str]:
        return [os.urandom(3 << 20).hex()[: 3 << 20]]

    return fill, f"sqlite:///{disk}/t.db"
