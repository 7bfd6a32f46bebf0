"""A loopback SSH server for the tests, on asyncssh: real local processes behind it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncssh

COMMANDS: list[str] = []
"""Every command line the server was asked to exec (what a remote ``ps`` would show)."""

USERNAME = "deployer"
PASSWORD = "s3cret-Pa55word!"


class _Server(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return True

    def validate_password(self, username: str, password: str) -> bool:
        return username == USERNAME and password == PASSWORD


async def _handle(process: asyncssh.SSHServerProcess) -> None:
    """Run the exec'd command as a real local process, in its own session like sshd does;
    the channel's stdin is the process's stdin."""
    COMMANDS.append(process.command or "")
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        process.command or "true",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )

    async def pump(src: asyncio.StreamReader, dst: asyncssh.SSHWriter) -> None:
        while chunk := await src.read(65536):
            with contextlib.suppress(Exception):
                dst.write(chunk)

    async def feed() -> None:
        assert proc.stdin is not None
        with contextlib.suppress(Exception):
            while chunk := await process.stdin.read(65536):
                proc.stdin.write(chunk)
                await proc.stdin.drain()
        with contextlib.suppress(Exception):
            proc.stdin.close()

    feeder = asyncio.ensure_future(feed())
    try:
        assert proc.stdout is not None and proc.stderr is not None
        await asyncio.gather(pump(proc.stdout, process.stdout), pump(proc.stderr, process.stderr))
        code = await proc.wait()
        process.exit(code if code >= 0 else 128 - code)
    finally:
        feeder.cancel()
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


@dataclass
class LoopbackSSH:
    port: int
    host_key: asyncssh.SSHKey
    client_key_path: Path
    known_hosts_path: Path


@contextlib.asynccontextmanager
async def loopback_ssh(tmp_path: Path) -> AsyncIterator[LoopbackSSH]:
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    key_path = tmp_path / "id_test"
    client_key.write_private_key(key_path)
    server = await asyncssh.create_server(
        _Server,
        "127.0.0.1",
        0,
        server_host_keys=[host_key],
        authorized_client_keys=asyncssh.import_authorized_keys(client_key.export_public_key().decode()),
        process_factory=_handle,
        encoding=None,
    )
    port = server.sockets[0].getsockname()[1]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_key.export_public_key().decode()}")
    try:
        yield LoopbackSSH(port, host_key, key_path, known_hosts)
    finally:
        server.close()
        await server.wait_closed()
