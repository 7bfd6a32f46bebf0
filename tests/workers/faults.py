"""Faults the fleet tests inject from outside the workers, on real sockets and processes:

* :class:`PgProxy`, a TCP proxy between the workers and PostgreSQL that reads the wire
  protocol and, once armed, breaks the next checkpoint write (the one statement that
  inserts into ``tether_checkpoints`` and moves ``tether_runs``): ``cut`` closes both
  connections before the server has the whole write (it never happens); ``lose_reply``
  forwards the write, lets the server finish it (up to its ReadyForQuery), and closes the
  connection without passing the reply on (it happened; the worker cannot know).
* :class:`RedisServer`, a private ``redis-server`` on a free port, as a broker the tests
  may kill -9 and start again on the same port, or configure as they like, without
  touching the Redis other tests share.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Literal

import pytest

Mode = Literal["cut", "lose_reply"]

WRITE_MARKS = (b"INSERT INTO tether_checkpoints", b"UPDATE tether_runs")
"""What the SQL of a checkpoint write contains (the one-statement fast path)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cstring(buf: bytes, at: int) -> tuple[bytes, int]:
    end = buf.index(b"\x00", at)
    return buf[at:end], end + 1


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, proxy: PgProxy, client: socket.socket, server: socket.socket) -> None:
        self.proxy, self.client, self.server = proxy, client, server
        self.prepared: set[bytes] = set()  # statement names (b"": unnamed) holding a write's SQL
        self.losing = False
        self.closed = False

    def close(self) -> None:
        self.closed = True
        for s in (self.client, self.server):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def is_write(self, kind: bytes, body: bytes) -> bool:
        """Whether this message executes a checkpoint write: a simple query, or the Bind of
        a statement whose Parse carried the write's SQL (psycopg prepares a statement it
        runs often in a round trip of its own, and then binds it by name)."""
        if kind == b"Q":
            return all(m in body for m in WRITE_MARKS)
        if kind == b"P":
            name, at = _cstring(body, 0)
            sql, _ = _cstring(body, at)
            if all(m in sql for m in WRITE_MARKS):
                self.prepared.add(name)
            else:
                self.prepared.discard(name)  # the unnamed statement now holds other SQL
        if kind == b"B":
            _portal, at = _cstring(body, 0)
            name, _ = _cstring(body, at)
            return name in self.prepared
        return False

    def upstream(self) -> None:
        """Client to server, message by message (the startup message has no type byte)."""
        buf = b""
        started = False
        try:
            while not self.closed:
                data = self.client.recv(65536)
                if not data:
                    break
                buf += data
                out = b""
                while True:
                    if not started:
                        if len(buf) < 4:
                            break
                        (size,) = struct.unpack("!I", buf[:4])
                        if len(buf) < size:
                            break
                        out, buf, started = out + buf[:size], buf[size:], True
                        continue
                    if len(buf) < 5:
                        break
                    (size,) = struct.unpack("!I", buf[1:5])
                    if len(buf) < size + 1:
                        break
                    kind, body, whole = buf[:1], buf[5 : size + 1], buf[: size + 1]
                    buf = buf[size + 1 :]
                    mode = self.proxy.mode
                    if mode is not None and self.is_write(kind, body):
                        self.proxy.fire()
                        if mode == "cut":  # half of the write reaches the server, then nothing
                            self.server.sendall(out + whole[: len(whole) // 2])
                            self.close()
                            return
                        self.losing = True
                    out += whole
                if out:
                    self.server.sendall(out)
        except OSError:
            pass
        self.close()

    def downstream(self) -> None:
        """Server to client; while losing, swallow the replies up to ReadyForQuery, then cut."""
        buf = b""
        try:
            while not self.closed:
                data = self.server.recv(65536)
                if not data:
                    break
                if not self.losing:
                    self.client.sendall(data)
                    continue
                buf += data
                while len(buf) >= 5:
                    (size,) = struct.unpack("!I", buf[1:5])
                    if len(buf) < size + 1:
                        break
                    kind, body, buf = buf[:1], buf[5 : size + 1], buf[size + 1 :]
                    if kind == b"C":  # CommandComplete: what the write did, e.g. b"UPDATE 1"
                        self.proxy.swallowed.append(body.rstrip(b"\x00"))
                    if kind == b"Z":  # the write is committed; its reply never arrives
                        self.close()
                        return
        except OSError:
            pass
        self.close()


class PgProxy:
    """A loopback proxy to PostgreSQL that breaks the next checkpoint write once armed."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.mode: Mode | None = None
        self.fired = threading.Event()
        self.swallowed: list[bytes] = []
        """The command tags of the replies ``lose_reply`` kept from the worker."""
        self.links: list[_Link] = []
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = int(self._sock.getsockname()[1])
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, database_url: str) -> str:
        """``database_url`` through this proxy, in plain text (the proxy reads the protocol)."""
        from urllib.parse import urlsplit

        parts = urlsplit(database_url)
        auth = parts.netloc.rpartition("@")[0]
        netloc = f"{auth}@127.0.0.1:{self.port}" if auth else f"127.0.0.1:{self.port}"
        query = "&".join(q for q in (parts.query, "sslmode=disable&gssencmode=disable") if q)
        return f"{parts.scheme}://{netloc}{parts.path}?{query}"

    def arm(self, mode: Mode) -> None:
        self.fired.clear()
        self.mode = mode

    def fire(self) -> None:
        with self._lock:
            self.mode = None  # once
        self.fired.set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            link = _Link(self, client, server)
            self.links.append(link)
            threading.Thread(target=link.upstream, daemon=True).start()
            threading.Thread(target=link.downstream, daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()
        for link in self.links:
            link.close()


class RedisServer:
    """A private redis-server on a free loopback port, killed and restarted at will."""

    def __init__(self, tmp: Path, *, persist: bool = True) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.skip("redis-server is not installed")
        self.exe, self.dir, self.persist = exe, tmp, persist
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir)]
        args += ["--save", "", "--daemonize", "no", "--protected-mode", "no"]
        if self.persist:  # every write on disk before its reply: a kill -9 loses nothing acknowledged
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        log = open(self.dir / "redis.log", "ab")  # noqa: SIM115 - the server's lifetime
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            assert self.proc.poll() is None, (self.dir / "redis.log").read_text(errors="replace")
            time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def kill(self) -> None:
        """kill -9: no shutdown, no final save."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        self.kill()
