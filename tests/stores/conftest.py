"""Every store test runs against every backend (memory, SQLite, Redis, PostgreSQL, MySQL,
tiered). Server URLs come from TETHER_TEST_<NAME>_URL; `scripts/test` sets them for the
local servers. With CI=true a missing or unreachable server fails the run; elsewhere it
skips that parametrisation with the reason.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tether.errors import StoreUnavailable
from tether.state import RunStatus
from tether.stores import CheckpointStore, create_store
from tether.stores.base import Write

BACKENDS = ["memory", "sqlite", "redis", "postgresql", "mysql", "tiered"]
SERVER_BACKENDS = {"redis", "postgresql", "mysql", "tiered"}
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def backend_url(name: str, tmp_path: Path) -> str | None:
    if name == "memory":
        return f"memory://{tmp_path}"
    if name == "sqlite":
        return f"sqlite:///{tmp_path}/tether.db"
    return os.environ.get(f"TETHER_TEST_{name.upper()}_URL")


def require_url(name: str, tmp_path: Path) -> str:
    url = backend_url(name, tmp_path)
    if url is None:
        reason = f"set TETHER_TEST_{name.upper()}_URL to run the {name} store tests"
        if IN_CI:
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    return url


def new_id(prefix: str = "run") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


StoreFactory = Callable[..., AbstractAsyncContextManager[CheckpointStore]]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: Path) -> str:
    return require_url(backend, tmp_path)


@asynccontextmanager
async def open_test_store(backend: str, url: str, **options: Any) -> AsyncIterator[CheckpointStore]:
    """A set-up store on ``url``; an unreachable server fails under CI, else skips."""
    store = create_store(url, **options)
    try:
        await store.setup()
    except StoreUnavailable as exc:
        await store.aclose()
        if IN_CI:
            pytest.fail(f"CI=true but the {backend} server is unreachable: {exc}")
        pytest.skip(f"{backend} server unreachable: {exc}")
    try:
        yield store
    finally:
        await store.aclose()


@pytest.fixture
def make_store(backend: str, store_url: str) -> StoreFactory:
    """Open another store on the same backend (other options, or a second 'process')."""
    return lambda **options: open_test_store(backend, store_url, **options)


@pytest.fixture
async def store(make_store: StoreFactory) -> AsyncIterator[CheckpointStore]:
    async with make_store() as s:
        yield s


def unavailable(what: str, exc: BaseException) -> None:
    """A server the test needs is down: a failure under CI, a skip elsewhere."""
    if IN_CI:
        pytest.fail(f"CI=true but {what} is unreachable: {exc}")
    pytest.skip(f"{what} unreachable: {exc}")


async def delete_prefixed(client: Any, prefix: str) -> int:
    """Delete every key under ``prefix`` (what FLUSHALL does to one test's keys)."""
    keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=500)]
    if keys:
        await client.delete(*keys)
    return len(keys)


@asynccontextmanager
async def redis_client(url: str, prefix: str) -> AsyncIterator[Any]:
    """A raw redis.asyncio client for checking what a store left in Redis; removes the
    test's keys (``prefix``) afterwards."""
    import redis.asyncio as aioredis

    c = aioredis.Redis.from_url(url, socket_connect_timeout=5)
    try:
        await c.ping()
    except (OSError, aioredis.ConnectionError) as exc:
        await c.aclose()
        unavailable("Redis", exc)
    try:
        yield c
    finally:
        await delete_prefixed(c, prefix)
        await c.aclose()


async def raw_write(
    store: CheckpointStore,
    run_id: str,
    payload: bytes,
    *,
    kind: str = "delta",
    expected: int,
    seal_from: int = 0,
) -> None:
    """Store ``payload`` as the run's next row as it is, past every check a commit makes:
    how the tests put damaged rows in a store."""
    await store._write(
        Write(
            run_id=run_id,
            kind=kind,
            payload=payload,
            node_id="bad",
            status=RunStatus.RUNNING,
            created_at=time.time(),
            expires_at=None,
            expected_version=expected,
            seal_from=seal_from,
        )
    )


# -- writer processes (tests/stores/_worker.py) ----------------------------------------
ROOT = Path(__file__).resolve().parents[2]


def spawn(url: str, run_id: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.stores._worker", url, run_id, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def kill_after(url: str, run_id: str, mode: str, lines: int, pause: float) -> int:
    """Start a ``mode`` worker on the run, let it report ``lines`` saves, SIGKILL it up to
    ``pause`` seconds later (somewhere inside a save), and return the last step it reported."""
    proc = spawn(url, run_id, mode)
    assert proc.stdout is not None
    last = 0
    for _ in range(lines):
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        last = int(line.split()[1])
    time.sleep(pause)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    return last
