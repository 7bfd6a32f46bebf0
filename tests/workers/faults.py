"""Faults the fleet tests inject from outside the workers, on real sockets and processes:

* :class:`FaultProxy`, a TCP proxy between the workers and their store (PostgreSQL or
  Redis) that reads the wire protocol and, once armed, breaks the next checkpoint write:
  ``cut`` closes both connections when half the write has reached the server (it never
  happens); ``lose_reply`` forwards the write, lets the server finish it, and closes the
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
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

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


class _PgWire:
    """PostgreSQL's protocol, as far as the proxy needs it (one per connection)."""

    def __init__(self) -> None:
        self.started = False
        self.prepared: set[bytes] = set()  # statement names (b"": unnamed) holding a write's SQL
        self.rest = b""

    def split(self, buf: bytes) -> tuple[list[tuple[bytes, bool]], bytes]:
        """The complete client messages at the start of ``buf`` (with whether each executes a
        checkpoint write), and what is left (the startup message has no type byte)."""
        out = []
        while True:
            if not self.started:
                if len(buf) < 4 or len(buf) < struct.unpack("!I", buf[:4])[0]:
                    break
                size = struct.unpack("!I", buf[:4])[0]
                out.append((buf[:size], False))
                buf, self.started = buf[size:], True
                continue
            if len(buf) < 5 or len(buf) < struct.unpack("!I", buf[1:5])[0] + 1:
                break
            size = struct.unpack("!I", buf[1:5])[0] + 1
            out.append((buf[:size], self.is_write(buf[:1], buf[5:size])))
            buf = buf[size:]
        return out, buf

    def is_write(self, kind: bytes, body: bytes) -> bool:
        """A simple query with the write's SQL, or the Bind of a statement whose Parse
        carried it (psycopg prepares a statement it runs often in a round trip of its own,
        and then binds it by name)."""
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

    def swallow(self, data: bytes, kept: list[bytes]) -> bool:
        """Server replies kept from the client; True once the write is committed
        (ReadyForQuery). ``kept`` gets the command tags, e.g. b"UPDATE 1"."""
        self.rest += data
        while len(self.rest) >= 5:
            size = struct.unpack("!I", self.rest[1:5])[0] + 1
            if len(self.rest) < size:
                break
            kind, body, self.rest = self.rest[:1], self.rest[5:size], self.rest[size:]
            if kind == b"C":
                kept.append(body.rstrip(b"\x00"))
            if kind == b"Z":
                return True
        return False


class _RespWire:
    """Redis's protocol (RESP arrays of bulk strings): a write is EVALSHA of ``write.lua``."""

    def __init__(self, write_sha: bytes) -> None:
        self.sha = write_sha

    def split(self, buf: bytes) -> tuple[list[tuple[bytes, bool]], bytes]:
        out = []
        while buf.startswith(b"*"):
            at = buf.find(b"\r\n")
            if at < 0:
                break
            count, pos, args, whole = int(buf[1:at]), at + 2, [], True
            for _ in range(count):
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    whole = False
                    break
                size = int(buf[pos + 1 : end])
                if len(buf) < end + 2 + size + 2:
                    whole = False
                    break
                args.append(buf[end + 2 : end + 2 + size])
                pos = end + 2 + size + 2
            if not whole:
                break
            write = len(args) > 1 and args[0].upper() == b"EVALSHA" and args[1] == self.sha
            out.append((buf[:pos], write))
            buf = buf[pos:]
        return out, buf

    def swallow(self, data: bytes, kept: list[bytes]) -> bool:
        """The script's reply (one command in flight: its first bytes are its reply)."""
        kept.append(data[:1])  # b"*": the script ran and answered; b"-": an error
        return True


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, proxy: FaultProxy, client: socket.socket, server: socket.socket) -> None:
        self.proxy, self.client, self.server = proxy, client, server
        self.wire = proxy.wire()
        self.losing = False
        self.closed = False

    def close(self) -> None:
        self.closed = True
        for s in (self.client, self.server):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def upstream(self) -> None:
        """Client to server, message by message; the armed fault hits the first write."""
        buf = b""
        try:
            while not self.closed:
                data = self.client.recv(65536)
                if not data:
                    break
                messages, buf = self.wire.split(buf + data)
                out = b""
                for whole, write in messages:
                    mode = self.proxy.mode
                    if mode is not None and write:
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
        """Server to client; while losing, swallow the write's reply, then cut."""
        try:
            while not self.closed:
                data = self.server.recv(65536)
                if not data:
                    break
                if not self.losing:
                    self.client.sendall(data)
                elif self.wire.swallow(data, self.proxy.swallowed):
                    self.close()  # the write is done; its reply never arrives
                    return
        except OSError:
            pass
        self.close()


class FaultProxy:
    """A loopback proxy to a database that breaks the next checkpoint write once armed."""

    def __init__(self, upstream: tuple[str, int], wire: Callable[[], Any]) -> None:
        self.upstream = upstream
        self.wire = wire
        self.mode: Mode | None = None
        self.fired = threading.Event()
        self.swallowed: list[bytes] = []
        """What ``lose_reply`` kept from the worker (PostgreSQL: command tags such as
        b"UPDATE 1"; Redis: the reply's first byte, b"*" for the script's answer)."""
        self.links: list[_Link] = []
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = int(self._sock.getsockname()[1])
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, store_url: str) -> str:
        """``store_url`` through this proxy (PostgreSQL in plain text: the proxy reads it)."""
        from urllib.parse import urlsplit

        parts = urlsplit(store_url)
        auth = parts.netloc.rpartition("@")[0]
        netloc = f"{auth}@127.0.0.1:{self.port}" if auth else f"127.0.0.1:{self.port}"
        extra = "sslmode=disable&gssencmode=disable" if parts.scheme.startswith("postgres") else ""
        query = "&".join(q for q in (parts.query, extra) if q)
        return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")

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


def pg_proxy(upstream: tuple[str, int]) -> FaultProxy:
    """Between the workers and PostgreSQL: a write is the statement that inserts into
    ``tether_checkpoints`` and moves ``tether_runs``."""
    return FaultProxy(upstream, _PgWire)


def redis_proxy(upstream: tuple[str, int]) -> FaultProxy:
    """Between the workers and a Redis store: a write is EVALSHA of the store's write script."""
    import hashlib

    from tether.stores.redis.scripts import source

    sha = hashlib.sha1(source("write").encode()).hexdigest().encode()
    return FaultProxy(upstream, lambda: _RespWire(sha))


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
