"""A command run over SSH dies with the local process that started it (tools/ssh.py,
``_watched``), against a real OpenSSH ``sshd`` on loopback (the remote processes are on
this machine, so the test sees them in ``/proc``).

The local parent is killed -9 while its remote command sleeps: sshd closes the channel,
and the watcher the command's script forked kills the command's process group. A command
that ended normally keeps what it left in the background, and leaves no watcher behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("asyncssh")

from tests.tools.test_lifeline import cleanup, group_alive, kill_and_time, running
from tests.tools.test_openssh import OpenSSH, sshd  # noqa: F401 - the fixture
from tether.tools import SSHSession

PARENT = r"""
import asyncio, getpass, sys
from tether.tools import SSHCredentials, SSHSession

async def main(port, key, known, work, command):
    creds = SSHCredentials(host="127.0.0.1", port=int(port), username=getpass.getuser(), key_path=key,
                           known_hosts=known, connect_timeout=10.0)
    async with SSHSession(creds, cwd=work, env={"SECRET": "s"}) as s:
        await s.run(command)
    await asyncio.sleep(300)

asyncio.run(main(*sys.argv[1:]))
"""


def parent(ssh: OpenSSH, work: Path, command: str, ready: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [str(ssh.port), str(ssh.client_key), str(ssh.known_hosts), str(work), command]
    proc = subprocess.Popen([sys.executable, "-c", PARENT, *args], env=env)
    deadline = time.monotonic() + 30
    while not (work / ready).exists():
        assert proc.poll() is None, "the parent process failed"
        assert time.monotonic() < deadline, "the remote command did not start"
        time.sleep(0.02)
    time.sleep(0.05)  # the file written in full
    return proc


async def test_a_remote_command_dies_with_its_local_process_killed_9(sshd: OpenSSH, tmp_path: Path) -> None:  # noqa: F811
    """Its whole process group goes within a second, and its last line never runs."""
    cmd = 'echo $$ > pg; sleep 60 & [ "$SECRET" = s ] && sleep 3; echo late > effect'
    proc = parent(sshd, tmp_path, cmd, "pg")
    pgid = int((tmp_path / "pg").read_text())
    try:
        assert group_alive(pgid)
        took = kill_and_time(proc, lambda: not group_alive(pgid))
        print(f"\nremote command gone {took:.3f}s after kill -9 of its local process")
        assert took < 1.0
        time.sleep(3.5)  # past the command's sleep: had its shell lived on, it would write now
        assert not (tmp_path / "effect").exists()
    finally:
        proc.kill()
        proc.wait()
        cleanup(pgid)


async def test_an_ended_remote_command_keeps_its_background_and_leaves_no_watcher(
    sshd: OpenSSH,  # noqa: F811
    tmp_path: Path,
) -> None:
    token = "61.375"  # a sleep no other process runs
    async with SSHSession(sshd.creds(), cwd=str(tmp_path)) as s:
        result = await s.run(f"nohup sleep {token} > /dev/null 2>&1 & echo $$ > pg; echo done")
        assert (result.exit_code, result.stdout) == (0, "done\n")
        assert (await s.run('printf "%s\\n" "$X"', env={"X": "a\nb 'c' \\d"})).stdout == "a\nb 'c' \\d\n"
    pgid = int((tmp_path / "pg").read_text())
    try:
        time.sleep(0.5)  # the session closed: a watcher would have acted by now
        assert running(f"sleep {token}")
        left = [pid for pid in running("while read -r _t_l") if pid != os.getpid()]
        assert left == []
    finally:
        for pid in running(f"sleep {token}"):
            os.kill(pid, signal.SIGKILL)
        cleanup(pgid)
