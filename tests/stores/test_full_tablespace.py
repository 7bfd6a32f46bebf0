"""A full tablespace on a real PostgreSQL and a real MariaDB: a commit that does not fit is
``StoreNotWritable`` (not retried forever as ``StoreUnavailable``), every checkpoint
committed before it still loads.

Each test starts a private server of its own (filling the shared servers' disks would
break everyone else's tests; MariaDB even crashes on a full file-per-table tablespace on
tmpfs, so its private server keeps tables in a capped system tablespace instead, which
gives the clean "table is full" error a full disk gives in production).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.errors import StoreNotWritable, StoreUnavailable
from tether.state import ExecutionContext, default_registry
from tether.stores import RetryPolicy, create_store

from ._faults import small_tmpfs
from .conftest import IN_CI, new_id

REDUCERS = default_registry().register("items", "append")
PG_BIN = next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin"))), None)


def _missing(what: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true but {what}")
    pytest.skip(what)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"private server exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.1)
    raise RuntimeError(f"private server did not listen on {port} in {timeout} s")


def _as_user(user: str, *cmd: str) -> list[str]:
    return ["runuser", "-u", user, "--", *cmd]


@contextlib.contextmanager
def server_root(prefix: str) -> Iterator[Path]:
    """A directory a server's own user can reach (pytest's tmp_path is private to root)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def private_postgres(root: Path) -> Iterator[tuple[int, Path]]:
    """A throw-away PostgreSQL cluster under ``root`` (owned by the ``postgres`` user):
    yields its port and a directory for a tablespace."""
    assert PG_BIN is not None
    data = root / "data"
    data.mkdir()
    shutil.chown(root, "postgres")
    shutil.chown(data, "postgres")
    subprocess.run(
        _as_user("postgres", str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"),
        check=True,
        capture_output=True,
    )
    port = _free_port()
    proc = subprocess.Popen(
        _as_user(
            "postgres",
            str(PG_BIN / "postgres"),
            "-D",
            str(data),
            "-p",
            str(port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={root}",
            "-c",
            "fsync=off",
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port, proc)
        yield port, root
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def private_mariadb(root: Path, *, system_tablespace_max: str) -> Iterator[int]:
    """A throw-away MariaDB whose tables live in a system tablespace capped at
    ``system_tablespace_max``."""
    data = root / "data"
    data.mkdir()
    shutil.chown(root, "mysql")
    shutil.chown(data, "mysql")
    opts = [
        f"--datadir={data}",
        "--innodb-file-per-table=0",
        f"--innodb-data-file-path=ibdata1:12M:autoextend:max:{system_tablespace_max}",
        "--innodb-log-file-size=8M",
        "--innodb-buffer-pool-size=16M",
    ]
    subprocess.run(
        [
            "mariadb-install-db",
            "--no-defaults",
            "--user=mysql",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            *opts,
        ],
        check=True,
        capture_output=True,
    )
    port = _free_port()
    proc = subprocess.Popen(
        [
            "mariadbd",
            "--no-defaults",
            "--user=mysql",
            *opts,
            f"--port={port}",
            "--bind-address=127.0.0.1",
            f"--socket={root}/mysqld.sock",
            f"--pid-file={root}/mysqld.pid",
            "--skip-grant-tables",
            "--max-allowed-packet=64M",
            "--innodb-flush-method=fsync",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port, proc)
        subprocess.run(
            [
                "mariadb",
                "--no-defaults",
                "-uroot",
                "-h127.0.0.1",
                f"-P{port}",
                "-e",
                "CREATE DATABASE IF NOT EXISTS t",
            ],
            check=True,
            capture_output=True,
        )
        yield port
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def _fill_until_full(url: str) -> None:
    """Commit 1 MB steps until the store reports the disk full; then check every committed
    version still loads as committed."""
    async with create_store(url, retry=RetryPolicy(attempts=2, first_delay=0.01)) as store:
        await store.setup()
        ballast = ExecutionContext(new_id("ballast"), {"items": [os.urandom(1 << 20).hex()]})
        await store.commit(ballast)
        run_id = new_id("full")
        ctx = ExecutionContext(run_id, {"items": []}, reducers=REDUCERS)
        await store.commit(ctx)
        committed: dict[int, int] = {}
        with pytest.raises(StoreNotWritable) as full:
            for n in range(1, 65):
                ctx.merge({"items": [os.urandom(1 << 19).hex()]})
                version = await store.commit(ctx)
                committed[version] = n
        assert not isinstance(full.value, StoreUnavailable)
        assert full.value.reason in {"disk full", "table full"}
        assert "resume" in str(full.value)
        assert committed, "the tablespace filled before a single step: make it bigger"
        print(f"full after {len(committed)} steps: {full.value}")
        for version, n in committed.items():
            loaded = await store.load(run_id, version)
            assert loaded is not None and len(loaded.state["items"]) == n
        assert (await store.load(ballast.run_id)) is not None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a tmpfs and start a private server")
async def test_a_full_postgresql_tablespace_is_not_writable_and_loses_nothing() -> None:
    if PG_BIN is None or shutil.which("runuser") is None:
        _missing("PostgreSQL server binaries (initdb, postgres) or runuser are not installed")
    with (
        server_root("tether-pg-") as where,
        private_postgres(where) as (port, root),
        small_tmpfs(root / "space", "12m") as space,
    ):
        if space is None:
            _missing("cannot mount a tmpfs here")
        assert space is not None
        shutil.chown(space, "postgres")
        psql = [
            str(PG_BIN / "psql"),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-U",
            "postgres",
            "-v",
            "ON_ERROR_STOP=1",
        ]
        subprocess.run(
            [*psql, "-c", f"CREATE TABLESPACE small LOCATION '{space}'"], check=True, capture_output=True
        )
        subprocess.run([*psql, "-c", "CREATE DATABASE t TABLESPACE small"], check=True, capture_output=True)
        try:
            await _fill_until_full(f"postgresql://postgres@127.0.0.1:{port}/t")
        finally:  # never leave a tablespace on a mount about to go away
            subprocess.run([*psql, "-c", "DROP DATABASE IF EXISTS t WITH (FORCE)"], capture_output=True)
            subprocess.run([*psql, "-c", "DROP TABLESPACE IF EXISTS small"], capture_output=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a private MariaDB as the mysql user")
async def test_a_full_mariadb_tablespace_is_not_writable_and_loses_nothing() -> None:
    if shutil.which("mariadbd") is None or shutil.which("mariadb-install-db") is None:
        _missing("the MariaDB server (mariadbd, mariadb-install-db) is not installed")
    with server_root("tether-my-") as where, private_mariadb(where, system_tablespace_max="24M") as port:
        await _fill_until_full(f"mysql://root@127.0.0.1:{port}/t")
