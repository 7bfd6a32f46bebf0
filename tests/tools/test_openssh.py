"""SSHSession against a real OpenSSH ``sshd`` on loopback, started by the test with its own
host key, client key and configuration (Debian's openssh-server, installed by
scripts/services). The asyncssh server of test_ssh.py runs commands the way sshd does; this
checks that the secrets sent on the channel's stdin, the process-group kill and the exit
codes hold against the server users actually run."""

from __future__ import annotations

import asyncio
import getpass
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("asyncssh")

from tests.stores.conftest import unavailable
from tests.tools.test_local import wait_dead
from tether.tools import SSHCredentials, SSHSession

SSHD = Path("/usr/sbin/sshd")


@dataclass
class OpenSSH:
    port: int
    client_key: Path
    known_hosts: Path
    log: Path

    def creds(self) -> SSHCredentials:
        return SSHCredentials(
            host="127.0.0.1",
            port=self.port,
            username=getpass.getuser(),
            key_path=self.client_key,
            known_hosts=self.known_hosts,
            connect_timeout=10.0,
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _keygen(path: Path) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, capture_output=True
    )
    return path.with_suffix(".pub").read_text().strip()


@pytest.fixture
async def sshd(tmp_path: Path) -> AsyncIterator[OpenSSH]:
    if not SSHD.exists():
        unavailable("OpenSSH's sshd", FileNotFoundError(f"{SSHD} (install Debian's openssh-server)"))
    home = tmp_path / "sshd"
    home.mkdir()
    host_pub = _keygen(home / "host_key")
    client_pub = _keygen(home / "client_key")
    (home / "authorized_keys").write_text(client_pub + "\n")
    port = _free_port()
    (home / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub}\n")
    config = home / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {home / 'host_key'}",
                f"AuthorizedKeysFile {home / 'authorized_keys'}",
                f"PidFile {home / 'sshd.pid'}",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                "StrictModes no",
                "UsePAM no",
                "LogLevel DEBUG3",
                "",
            ]
        )
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # its privilege-separation directory
    log = home / "sshd.log"
    proc = subprocess.Popen([str(SSHD), "-D", "-f", str(config), "-E", str(log)])
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    text = log.read_text() if log.exists() else ""
                    unavailable("OpenSSH's sshd", RuntimeError(f"did not start: {text[-2000:]}"))
                await asyncio.sleep(0.05)
        yield OpenSSH(port, home / "client_key", home / "known_hosts", log)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_output_exit_code_and_cwd_over_openssh(sshd: OpenSSH, tmp_path: Path) -> None:
    async with SSHSession(sshd.creds(), cwd=str(tmp_path)) as s:
        ok = await s.run("echo hello; pwd")
        bad = await s.run("echo oops >&2; exit 3")
        await s.run("mkdir -p app && cd app")
        assert s.cwd == str(tmp_path / "app")
    assert (ok.success, ok.stdout) == (True, f"hello\n{tmp_path}\n")
    assert (bad.exit_code, bad.stderr) == (3, "oops\n")


async def test_a_secret_sent_on_stdin_reaches_the_remote_command_and_no_log(
    sshd: OpenSSH, tmp_path: Path
) -> None:
    """The environment values travel on the channel's stdin: the remote command sees them,
    its own stdin still ends at once, and neither a remote ``ps`` (the argv of every process,
    the shell sshd started included) nor sshd's DEBUG3 log shows the secret."""
    secret = "PLANTED-openssh-" + "Vb72kQ9" * 3
    out = tmp_path / "seen"
    async with SSHSession(sshd.creds(), env={"BASE_TOKEN": secret + "-base"}) as s:
        result = await s.run(
            f'printf "%s|%s" "$DEPLOY_TOKEN" "$BASE_TOKEN" > {out}; ps -eo args > {out}.ps; cat; echo end',
            env={"DEPLOY_TOKEN": secret},
        )
    assert result.exit_code == 0 and result.stdout == "end\n", result
    assert out.read_text() == f"{secret}|{secret}-base"
    assert secret not in Path(f"{out}.ps").read_text()
    log = sshd.log.read_text()
    assert "exec" in log and secret not in log


async def test_timeout_kills_the_remote_process_group_over_openssh(sshd: OpenSSH) -> None:
    async with SSHSession(sshd.creds()) as s:
        started = time.monotonic()
        result = await s.run("sh -c 'sleep 30 & echo $!; sleep 30'", timeout=0.5)
        assert time.monotonic() - started < 5
        assert (await s.run("echo still usable")).stdout == "still usable\n"
    assert result.timed_out and result.exit_code == 124
    assert await wait_dead(int(result.stdout.split()[0]))
