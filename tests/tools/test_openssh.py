"""SSHSession against a real OpenSSH ``sshd`` on loopback, started by the test with its own
host key, client key and configuration (Debian's openssh-server, installed by
scripts/services). The asyncssh server of test_ssh.py runs commands the way sshd does; this
checks that the secrets sent on the channel's stdin, the process-group kill and the exit
codes hold against the server users actually run."""

from __future__ import annotations

import asyncio
import getpass
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("asyncssh")

from tests.stores.conftest import unavailable
from tests.tools.test_local import wait_dead
from tether.tools import SSHCredentials, SSHSession

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_ssh import SSHD, start_sshd  # the private sshd, as the benchmark starts it


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


@pytest.fixture
async def sshd(tmp_path: Path) -> AsyncIterator[OpenSSH]:
    if not SSHD.exists():
        unavailable("OpenSSH's sshd", FileNotFoundError(f"{SSHD} (install Debian's openssh-server)"))
    home = tmp_path / "sshd"
    home.mkdir()
    try:  # DEBUG3: a test reads the log for what sshd saw of a command
        proc, port = await asyncio.to_thread(start_sshd, home, "DEBUG3")
    except SystemExit as exc:
        unavailable("OpenSSH's sshd", RuntimeError(str(exc)))
    try:
        yield OpenSSH(port, home / "client_key", home / "known_hosts", home / "sshd.log")
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
