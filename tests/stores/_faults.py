"""Fault injection for the store tests: a TCP proxy that can drop a reply, a private
redis-server, raw access to stored rows, and a small tmpfs.

Everything here touches only what the test made: its own proxy port, its own Redis
process and directory, its own run ids, its own mount point.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from .conftest import IN_CI


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_port(url: str, port: int) -> str:
    """``url`` pointing at 127.0.0.1:``port`` instead (user, path and query kept)."""
    parts = urlsplit(url)
    auth = parts.netloc.rpartition("@")[0]
    netloc = f"{auth}@127.0.0.1:{port}" if auth else f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


class ReplyDropper:
    """A TCP proxy in front of a server. ``arm(marker, then=...)`` makes it forward the
    client's bytes up to and including a message holding ``marker`` (and, with ``then``,
    the next message holding that too, e.g. the COMMIT after an INSERT), wait for the
    server to act on it, then close both sides without passing the reply on: the write
    lands, its reply is lost. Later connections pass through untouched."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.listen_port = 0
        self.dropped = 0
        self._marker: bytes | None = None
        self._then: bytes | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def arm(self, marker: bytes, *, then: bytes | None = None) -> None:
        self._marker, self._then = marker, then

    async def __aenter__(self) -> ReplyDropper:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.listen_port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            up_r, up_w = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.close()
            return
        cut = asyncio.Event()
        held = asyncio.Event()  # set before the last message goes: no reply passes after it

        async def client_to_server() -> None:
            seen = b""
            stage = 0  # 0: waiting for the marker, 1: for ``then``, 2: cut after this
            while data := await reader.read(65536):
                if self._marker is not None:
                    seen = (seen + data)[-(1 << 20) :]
                    if stage == 0 and self._marker in seen:
                        stage, seen = (1 if self._then else 2), b""
                    if stage == 1 and self._then is not None and self._then in seen:
                        stage = 2
                    if stage == 2:
                        held.set()
                up_w.write(data)
                await up_w.drain()
                if stage == 2:
                    self._marker = self._then = None
                    await asyncio.sleep(0.5)  # the server commits; its reply waits unread
                    self.dropped += 1
                    cut.set()
                    return

        async def server_to_client() -> None:
            while not cut.is_set():
                read = asyncio.ensure_future(up_r.read(65536))
                stop = asyncio.ensure_future(cut.wait())
                done, _ = await asyncio.wait({read, stop}, return_when=asyncio.FIRST_COMPLETED)
                if read not in done:
                    read.cancel()
                    return
                stop.cancel()
                data = read.result()
                if not data:
                    return
                if cut.is_set() or held.is_set():
                    return
                writer.write(data)
                await writer.drain()

        try:
            await asyncio.gather(client_to_server(), server_to_client(), return_exceptions=True)
        finally:
            for w in (writer, up_w):
                with contextlib.suppress(Exception):
                    w.close()
            self._tasks.discard(task)


class PrivateRedis:
    """A redis-server of the test's own: its own port and directory, append-only file
    fsynced on every write (so a restart keeps what it acknowledged)."""

    def __init__(self, tmp: Path, *extra: str) -> None:
        self.dir = tmp / f"redis-{os.getpid()}-{time.monotonic_ns()}"
        self.dir.mkdir()
        self.port = free_port()
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            message = "redis-server is not installed: the private-Redis fault tests need it"
            if IN_CI:
                pytest.fail(message)
            pytest.skip(message)
        args = [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir)]
        args += ["--appendonly", "yes", "--appendfsync", "always", "--save", "", *self.extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                return
            time.sleep(0.05)
        raise RuntimeError("private redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None


@contextlib.contextmanager
def private_redis(tmp: Path, *extra: str) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp, *extra)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str = "2m") -> Iterator[Path | None]:
    """A tmpfs of ``size`` mounted at ``where`` (None when this machine does not allow it).
    Unmounted afterwards; nothing but the test's own files lives on it."""
    where.mkdir()
    mounted = (
        os.geteuid() == 0
        and shutil.which("mount") is not None
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
            capture_output=True,
        ).returncode
        == 0
    )
    try:
        yield where if mounted else None
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


async def flip_sql_byte(store: object, run_id: str, version: int, at: int) -> None:
    """Flip one byte of a stored row through the store's own connection."""
    from tether.stores._sql import SqlStore

    assert isinstance(store, SqlStore)

    async def flip(tx: object) -> None:
        row = await tx.one(  # type: ignore[attr-defined]
            "SELECT payload FROM tether_checkpoints WHERE run_id = ? AND version = ?", (run_id, version)
        )
        data = bytearray(row[0])
        data[at] ^= 0x01
        await tx.run(  # type: ignore[attr-defined]
            "UPDATE tether_checkpoints SET payload = ? WHERE run_id = ? AND version = ?",
            (bytes(data), run_id, version),
        )

    await store.backend._in_tx(flip, write=True)
