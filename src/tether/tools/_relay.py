"""An SSH connection that the command watcher can cut while this process is stopped.

A remote command dies when its SSH connection drops (``tools/ssh.py``, ``_watched``): a
killed process's sockets are closed by the kernel, sshd sees the end of the connection,
and the command's watcher kills it. A *stopped* process (SIGSTOP, a long pause) keeps its
sockets open, so its remote command ran on while another runner, which took the lapsed
lease over, ran the step again.

So the TCP connection is not held by this process but by a small relay process of its
own group, registered with the command watcher (``tools/_lifeline.py``) like a local
command. This process talks SSH to the relay through a socket pair; the relay copies the
bytes to the host and back. When the heartbeat sidecar fences this process (its lease
ran out unrenewed), the watcher kills the relay with its local commands: the connection
ends, and the remote command with it. When this process dies the relay reads the end of
the socket pair and exits, and the watcher kills it anyway.

The relay costs a process start (a Python interpreter without ``site``: tens of
milliseconds) per connection and one more copy of each byte; a connection is opened once
per session and reused by its commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys

from tether.tools._lifeline import lifeline

__all__ = ["Relay", "connected"]

RELAY = r"""
import select, socket, sys
client = socket.socket(fileno=0)
host = socket.socket(fileno=int(sys.argv[1]))
peer = {client: host, host: client}
reading = [client, host]
try:
    while reading:
        for s in select.select(reading, [], [])[0]:
            try:
                data = s.recv(262144)
            except OSError:
                data = b""
            if data:
                peer[s].sendall(data)
                continue
            reading.remove(s)
            try:
                peer[s].shutdown(socket.SHUT_WR)
            except OSError:
                pass
except OSError:
    pass
"""
"""The relay: its standard input is this process's socket pair, ``argv[1]`` the host's
connection; it copies both ways and passes each end of stream on, until both ended."""


def connected(host: str, port: int, limit: float) -> socket.socket:
    """A TCP connection to ``host:port`` set up as asyncssh sets up one it opens itself
    (asyncssh cannot: it sees only the relay's socket pair). Without ``TCP_NODELAY`` the
    small packets of an SSH exchange wait for the host's delayed acknowledgement at every
    command (``benchmarks/bench_ssh.py``); ``SO_KEEPALIVE`` is asyncssh's default."""
    tcp = socket.create_connection((host, port), limit)
    try:
        tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    except OSError:
        tcp.close()
        raise
    return tcp


class Relay:
    """One relayed connection: :attr:`sock` is this process's end (for asyncssh's
    ``sock=``); the relay's group is registered with the command watcher until
    :meth:`close`."""

    def __init__(self, sock: socket.socket, proc: asyncio.subprocess.Process) -> None:
        self.sock = sock
        self.proc = proc

    @classmethod
    async def open(cls, host: str, port: int, limit: float) -> Relay:
        """Connect to ``host:port`` within ``limit`` seconds (``OSError`` and
        ``TimeoutError`` as a direct connection raises them), then hand the connection to
        a new relay process."""
        tcp = await asyncio.to_thread(connected, host, port, limit)
        ours, theirs = socket.socketpair()
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-I", "-S", "-c", RELAY, str(tcp.fileno()),
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(tcp.fileno(),),
                cwd="/",
                start_new_session=True,  # its own group: the watcher kills it by group
            )  # fmt: skip
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
            tcp.close()  # from now on the relay holds the host's connection alone
        lifeline.started(proc.pid)
        return cls(ours, proc)

    async def close(self, linger: float = 0.5) -> None:
        """The connection is closed (or lost): the relay ends by itself once it passed on
        the end of both streams; it is killed if it still runs after ``linger`` seconds
        (a host that never closes its side). Then it is unregistered and reaped."""
        with contextlib.suppress(OSError):
            self.sock.close()
        try:
            await asyncio.wait_for(self.proc.wait(), linger)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()
        lifeline.ended(self.proc.pid)

    @property
    def alive(self) -> bool:
        """Whether the relay still runs."""
        return self.proc.returncode is None
