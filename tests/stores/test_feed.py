"""The change feed on real stores, with the runs changed by other processes: a ``tether
run`` subprocess, and a connection dropped under the listener (its changes meanwhile
come back after the reconnect)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tether.state import ExecutionContext, RunStatus
from tether.stores import CheckpointStore
from tether.stores.feed import Change, Feed, open_feed

from .conftest import ROOT, new_id, open_test_store, require_url

pytestmark = pytest.mark.slow

LISTENING = {"postgresql": "listen", "redis": "pubsub"}


@pytest.fixture
def quiet_pg(tmp_path: Path) -> Iterator[str]:
    """A PostgreSQL database of this test's own: whether any feed listens is per database,
    and on the shared one other tests' feeds come and go."""
    import urllib.parse

    import psycopg

    url = require_url("postgresql", tmp_path)
    name = f"tether_feed_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield urllib.parse.urlsplit(url)._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


WRITER = """
import asyncio, sys
from tether.state import ExecutionContext
from tether.stores import open_store
async def main(url, run_id, n):
    async with open_store(url) as s:
        for i in range(n):
            ctx = await s.load_context(run_id) or ExecutionContext(run_id, {})
            ctx.put("n", i)
            print(await s.commit(ctx), flush=True)
asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def write_in_another_process(url: str, run_id: str, n: int) -> int:
    """Commit ``n`` versions of ``run_id`` from a new process (blocking); the last version."""
    done = subprocess.run(
        [sys.executable, "-c", WRITER, url, run_id, str(n)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


async def changes_until(feed: Feed, run_id: str, version: int, timeout: float = 20) -> list[Change]:
    """Changes of ``run_id`` until one reaches ``version``."""
    got: list[Change] = []
    async with asyncio.timeout(timeout):
        async for change in feed:
            if change.run_id == run_id:
                got.append(change)
                if change.version >= version:
                    return got
    raise AssertionError("unreachable")


async def until_completed(feed: Feed, store: CheckpointStore, run_id: str) -> list[int]:
    """The versions the feed reports for ``run_id``, read as they come (re-reading the run
    on each, as a consumer does), until the run is COMPLETED at the reported version."""
    versions = []
    async for change in feed:
        if change.run_id == run_id:
            versions.append(change.version)
            info = await store.get_run(run_id)
            if info is not None and info.status is RunStatus.COMPLETED and info.version == change.version:
                return versions
    raise AssertionError("unreachable")


@pytest.fixture(params=["sqlite", "postgresql", "redis", "mysql", "tiered"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_a_run_executed_by_tether_run_in_another_process_is_seen(kind, tmp_path):
    """`tether run` executes a run in its own process; the feed of this process sees each
    of its versions up to the last one, whose stored status is COMPLETED."""
    url = require_url(kind, tmp_path)
    run_id = new_id("feed")
    async with open_test_store(kind, url) as store, open_feed(store) as feed:
        assert feed.kind == LISTENING.get(kind, "poll")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tether.cli.app", "run", "tests.server.test_feed_flows:steps",
            "--store", url, "--run-id", run_id, "--plain", "--input", '{"delay": 0.4}',
            cwd=ROOT, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        (_, err), versions = await asyncio.wait_for(
            asyncio.gather(proc.communicate(), until_completed(feed, store, run_id)), 120
        )
        assert proc.returncode == 0, err.decode()
        info = await store.get_run(run_id)
        assert info is not None and info.status is RunStatus.COMPLETED
    assert versions == sorted(versions) and versions[-1] == info.version
    assert len(set(versions)) >= 3  # every step's version showed up, not only the end
    assert feed.reconnects == 0


async def test_postgres_listener_killed_gets_what_was_committed_meanwhile(tmp_path):
    """pg_terminate_backend on the listening connection, a commit from another process
    while it is gone: after the feed reconnects by itself it yields that version."""
    import psycopg

    url = require_url("postgresql", tmp_path)
    run_id = new_id("feed-pg")
    async with open_test_store("postgresql", url) as store, open_feed(store) as feed:
        await store.commit(ExecutionContext(run_id, {"n": -1}))
        assert (await changes_until(feed, run_id, 1))[-1] == Change(run_id, 1)
        pid = feed.listener_pid
        assert pid is not None
        # blocking calls: the feed's task cannot run (and reconnect) until they are done
        with psycopg.connect(url, autocommit=True) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
            deadline = time.monotonic() + 10
            while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
                assert time.monotonic() < deadline
                time.sleep(0.01)
        last = write_in_another_process(url, run_id, 2)  # NOTIFY reaches nobody now
        assert last == 3
        got = await changes_until(feed, run_id, last)
        assert got[-1] == Change(run_id, 3)
        assert feed.reconnects >= 1 and feed.listener_pid not in (None, pid)
        # and it listens again: the next commit comes as a notification
        await store.commit((await store.load_context(run_id)) or ExecutionContext(run_id, {}))
        assert (await changes_until(feed, run_id, 4))[-1] == Change(run_id, 4)


async def test_redis_subscriber_killed_gets_what_was_committed_meanwhile(tmp_path):
    """CLIENT KILL on the subscribed connection, commits from another process while it
    is gone: the feed notices the client's silent reconnection and yields the latest."""
    import redis

    url = require_url("redis", tmp_path)
    prefix = f"feed-{new_id()}:"
    run_id = new_id("feed-redis")
    admin = redis.Redis.from_url(url)
    before = _subscribers(admin)
    try:
        async with open_test_store("redis", url, prefix=prefix) as store, open_feed(store) as feed:
            await store.commit(ExecutionContext(run_id, {"n": -1}))
            assert (await changes_until(feed, run_id, 1))[-1] == Change(run_id, 1)
            mine = _subscribers(admin) - before
            assert len(mine) == 1, mine
            assert admin.execute_command("CLIENT", "KILL", "ID", mine.pop()) == 1
            last = write_in_another_process(f"{url}?prefix={prefix}", run_id, 2)
            assert last == 3
            got = await changes_until(feed, run_id, last)
            assert got[-1] == Change(run_id, 3)
            assert feed.reconnects >= 1
            await store.commit((await store.load_context(run_id)) or ExecutionContext(run_id, {}))
            assert (await changes_until(feed, run_id, 4))[-1] == Change(run_id, 4)
    finally:
        for key in admin.scan_iter(match=f"{prefix}*", count=500):
            admin.delete(key)
        admin.close()


def _subscribers(admin: object) -> set[str]:
    """Ids of the server's clients subscribed to a channel."""
    listed = admin.client_list()  # type: ignore[attr-defined]
    return {str(c["id"]) for c in listed if "P" in c.get("flags", "") and c.get("sub") not in ("0", 0)}


async def test_polling_sees_a_status_change_without_a_new_version(tmp_path):
    """`tether cancel` from another process changes the status, not the version: the
    polling feed reports the run again at the same version."""
    url = require_url("sqlite", tmp_path)
    run_id = new_id("feed-status")
    async with open_test_store("sqlite", url) as store, open_feed(store, interval=0.05) as feed:
        await store.commit(ExecutionContext(run_id, {}), status=RunStatus.PAUSED)
        assert (await changes_until(feed, run_id, 1))[-1] == Change(run_id, 1)
        done = subprocess.run(
            [sys.executable, "-m", "tether.cli.app", "cancel", run_id, "--store", url],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert await changes_until(feed, run_id, 1) == [Change(run_id, 1)]
        assert (await store.get_run(run_id)).status is RunStatus.CANCELLED  # type: ignore[union-attr]


async def test_changes_before_the_feed_opened_are_not_reported(tmp_path):
    """A feed reports what changes from now on: older runs are a baseline."""
    url = require_url("sqlite", tmp_path)
    old, new = new_id("old"), new_id("new")
    async with open_test_store("sqlite", url) as store:
        await store.commit(ExecutionContext(old, {}))
        async with open_feed(store, interval=0.05) as feed:
            await store.commit(ExecutionContext(new, {}))
            got = await changes_until(feed, new, 1)
            await asyncio.sleep(0.2)
            assert feed.pending == 0
    assert got == [Change(new, 1)]


async def test_store_kind_picks_the_feed(tmp_path):
    url = require_url("sqlite", tmp_path)
    store: CheckpointStore
    async with open_test_store("sqlite", url) as store, open_feed(store) as feed:
        assert (feed.kind, feed.interval) == ("poll", 0.25)


async def test_a_consumer_that_falls_behind_gets_each_run_once_at_its_newest_version(tmp_path):
    """20 notified commits while nobody reads: one change, the newest (memory is bounded
    by the runs that moved, not by the writes)."""
    url = require_url("postgresql", tmp_path)
    run_id = new_id("feed-behind")
    async with open_test_store("postgresql", url) as store, open_feed(store) as feed:
        ctx = ExecutionContext(run_id, {"n": 0})
        for i in range(20):
            ctx.put("n", i)
            await store.commit(ctx)
        async with asyncio.timeout(10):
            while feed.pending == 0 or (await store.get_run(run_id)) is None:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)  # every notification is in
        got = [c async for c in _take(feed, run_id, 0.5)]
    assert got == [Change(run_id, 20)]


async def _take(feed: Feed, run_id: str, quiet: float) -> AsyncIterator[Change]:
    """The changes of ``run_id`` until none came for ``quiet`` seconds."""
    changes = aiter(feed)
    while True:
        try:
            change = await asyncio.wait_for(anext(changes), quiet)
        except TimeoutError:
            return
        if change.run_id == run_id:
            yield change


async def test_postgres_commits_notify_only_while_a_feed_listens(quiet_pg):
    """Notifying makes committing transactions wait on one another, so the trigger sends
    nothing while no feed listens: a bare ``LISTEN`` hears a commit only while a feed is
    open beside it."""
    import psycopg

    url = quiet_pg
    run_id = new_id("feed-quiet")
    async with open_test_store("postgresql", url) as store:
        async with open_feed(store):  # installs the trigger
            pass
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as bare:
            await bare.execute("LISTEN tether_runs")
            ctx = ExecutionContext(run_id, {"n": 0})
            await store.commit(ctx)
            assert [n async for n in bare.notifies(timeout=0.5)] == []
            async with open_feed(store) as feed:
                ctx.put("n", 1)
                await store.commit(ctx)
                heard = [n.payload async for n in bare.notifies(timeout=5, stop_after=1)]
                assert heard == [f"2:{run_id}"]
                assert (await changes_until(feed, run_id, 2))[-1] == Change(run_id, 2)


async def test_postgres_a_write_in_flight_while_the_listener_reconnects_is_reported(quiet_pg):
    """A writer whose trigger ran while no feed listened (so it did not notify) and that
    commits only after the feed reconnected and re-read the store: the feed waits for
    such writers after subscribing and reads again, so the change still arrives."""
    import psycopg

    url = quiet_pg
    run_id = new_id("feed-flight")
    async with open_test_store("postgresql", url) as store, open_feed(store) as feed:
        await store.commit(ExecutionContext(run_id, {}))
        assert (await changes_until(feed, run_id, 1))[-1] == Change(run_id, 1)
        pid = feed.listener_pid
        # blocking calls: the feed cannot reconnect before the writer's trigger has run
        writer = psycopg.connect(url)
        try:
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                deadline = time.monotonic() + 10
                while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
                    assert time.monotonic() < deadline
                    time.sleep(0.01)
            writer.execute(
                "UPDATE tether_runs SET status = 'PAUSED', updated_at = %s WHERE run_id = %s",
                (time.time(), run_id),
            )
            async with asyncio.timeout(10):
                while feed.listener_pid in (None, pid) or not feed.reconnects:
                    await asyncio.sleep(0.02)
            # the reconnected feed re-read the store (which may report the run again as it
            # was); the write is not in it yet
            assert {c async for c in _take(feed, run_id, 0.3)} <= {Change(run_id, 1)}
            writer.commit()
        finally:
            writer.close()
        assert (await changes_until(feed, run_id, 1, timeout=5))[-1] == Change(run_id, 1)
        assert (await store.get_run(run_id)).status is RunStatus.PAUSED  # type: ignore[union-attr]


async def test_postgres_an_older_trigger_that_always_notified_is_replaced(tmp_path):
    """A database set up by an older version has a trigger that notifies on every commit:
    the first feed that listens replaces it, the trigger itself stays."""
    import psycopg

    from tether.stores.feed import LISTENING_LOCK

    url = require_url("postgresql", tmp_path)
    source = "SELECT prosrc FROM pg_proc WHERE proname = 'tether_runs_notify'"
    async with open_test_store("postgresql", url) as store:
        async with open_feed(store):
            pass
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
            await admin.execute(
                "CREATE OR REPLACE FUNCTION tether_runs_notify() RETURNS trigger LANGUAGE plpgsql AS $$ "
                "BEGIN PERFORM pg_notify('tether_runs', NEW.version::text || ':' || NEW.run_id); RETURN NULL; END $$"
            )
            assert str(LISTENING_LOCK) not in (await (await admin.execute(source)).fetchall())[0][0]
            async with open_feed(store):
                pass
            assert str(LISTENING_LOCK) in (await (await admin.execute(source)).fetchall())[0][0]
            triggers = "SELECT count(*) FROM pg_trigger WHERE tgname = 'tether_runs_notify'"
            assert (await (await admin.execute(triggers)).fetchall())[0][0] == 1
