"""A command run over SSH dies with the local process that started it (tools/ssh.py,
``_watched``), against a real OpenSSH ``sshd`` on loopback (the remote processes are on
this machine, so the test sees them in ``/proc``).

The local parent is killed -9 while its remote command sleeps: sshd closes the channel,
and the watcher the command's script forked kills the command's process group. A command
that ended normally keeps what it left in the background, and leaves no watcher behind.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("asyncssh")

from tests.runtime.test_fencing import lease_dead, wait_line
from tests.stores.conftest import new_id, open_test_store, require_url
from tests.tools.test_lifeline import cleanup, group_alive, kill_and_time, read_pid, running
from tests.tools.test_openssh import OpenSSH, sshd  # noqa: F401 - the fixture
from tether.errors import ConfigError
from tether.state import RunStatus
from tether.tools import SSHSession
from tether.tools._lifeline import LEASE_TTL
from tether.tools._relay import connected

ROOT = Path(__file__).resolve().parents[2]
TTL = 2.0

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
    pgid = read_pid(tmp_path / "pg")
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
        relays = my_relays()
        assert len(relays) == 1  # the connection goes through a relay (tools/_relay.py)
        result = await s.run(f"nohup sleep {token} > /dev/null 2>&1 & echo $$ > pg; echo done")
        assert (result.exit_code, result.stdout) == (0, "done\n")
        assert (await s.run('printf "%s\\n" "$X"', env={"X": "a\nb 'c' \\d"})).stdout == "a\nb 'c' \\d\n"
    pgid = read_pid(tmp_path / "pg")
    try:
        time.sleep(0.5)  # the session closed: a watcher would have acted by now
        assert running(f"sleep {token}")
        assert watchers(token) == []
        assert not set(relays) & set(my_relays())  # the relay ended with the session
    finally:
        for pid in running(f"sleep {token}"):
            os.kill(pid, signal.SIGKILL)
        cleanup(pgid)


async def test_a_remote_command_that_closes_its_output_runs_to_its_end(sshd: OpenSSH, tmp_path: Path) -> None:  # noqa: F811
    """A command that sends its output elsewhere and goes on working (as a script that logs
    to a file does) is not taken for one whose connection dropped: the end of its output is
    not the end of the command."""
    async with SSHSession(sshd.creds(), cwd=str(tmp_path)) as s:
        result = await s.run("exec > log 2>&1; sleep 0.5; echo finished > marker")
    assert result.exit_code == 0, result  # (a command killed by a signal reports 128 + it)
    assert (tmp_path / "marker").read_text() == "finished\n"


def watchers(token: str) -> list[int]:
    """The watchers (and keepalive timers) of this test's remote commands, told from other
    tests' by ``token`` in the command (a remote shell's command line holds its script)."""
    return [pid for pid in set(running("while read -r _t_l")) & set(running(token)) if pid != os.getpid()]


def my_relays() -> list[int]:
    """This process's relay processes (other tests' run beside it under xdist)."""
    mine = []
    for pid in running("socket.socket(fileno=0)"):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
            mine.append(pid)
    return mine


def stall_flow(ssh: OpenSSH, url: str, run_id: str, mode: str, work: Path) -> subprocess.Popen[str]:
    """A runner whose step runs ``sleep 60`` over SSH (``tests/tools/_stall_flow.py``)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "TETHER_STALL_SSH": f"{ssh.port} {ssh.client_key} {ssh.known_hosts}",
    }
    seconds = "60" if mode == "start" else "0.2"
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.tools._stall_flow",
            url,
            run_id,
            mode,
            str(TTL),
            "wait",
            seconds,
            str(work),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.slow
async def test_a_stopped_holders_remote_command_ends_as_its_lease_runs_out(
    sshd: OpenSSH,  # noqa: F811
    tmp_path: Path,
) -> None:
    """SIGSTOP a runner while its SSH command sleeps. A stopped process cannot close its
    connection, so the command watcher kills the relay that holds it: the remote command is
    gone by the time the lease runs out, before another runner takes the run over and runs
    the step (and its command) again. The woken runner writes nothing."""
    url = require_url("sqlite", tmp_path)
    run_id = new_id("fence-ssh")
    stale = stall_flow(sshd, url, run_id, "start", tmp_path)
    pgid = None
    try:
        wait_line(stale, "in:cmd")
        pgid = read_pid(tmp_path / "start.pg")
        os.kill(stale.pid, signal.SIGSTOP)
        stopped_at = time.time()
        while group_alive(pgid):
            assert time.time() - stopped_at < TTL + 5, (
                "a stopped holder's remote command outlived its lease by 5 s"
            )
            await asyncio.sleep(0.01)
        gone_at = time.time()
        async with open_test_store("sqlite", url) as store:
            until = (await store.get_run(run_id)).lease_until  # type: ignore[union-attr]
            assert until is not None
            print(f"\nlease {TTL}s; remote command gone {gone_at - until:+.3f}s after the lease ran out")
            assert gone_at - until < 0.3
            while not await lease_dead(store, run_id):
                assert time.time() - stopped_at < TTL + 5
                await asyncio.sleep(0.05)
            second = stall_flow(sshd, url, run_id, "resume", tmp_path)
            out, err = second.communicate(timeout=60)
            assert out.split()[-1] == "COMPLETED", err
            after = await store.get_run(run_id)
            os.kill(stale.pid, signal.SIGCONT)
            out, err = stale.communicate(timeout=60)
            assert stale.returncode == 3 and out.split()[-1] == "LEASE_LOST", (out, err)
            again = await store.get_run(run_id)
            assert after is not None and again is not None
            assert (again.version, again.status) == (after.version, RunStatus.COMPLETED)
    finally:
        if stale.poll() is None:
            os.kill(stale.pid, signal.SIGCONT)
            stale.kill()
            stale.communicate()
        if pgid is not None:
            cleanup(pgid)
    effects = (tmp_path / "effects").read_text().split()
    assert effects == ["resume"]  # the stale remote command never reached its end


async def test_a_direct_connection_without_a_relay_runs_commands(sshd: OpenSSH, tmp_path: Path) -> None:  # noqa: F811
    """``relay=False`` connects directly: no relay process, the same results."""
    async with SSHSession(sshd.creds(), cwd=str(tmp_path), relay=False) as s:
        assert my_relays() == []
        assert (await s.run("echo $((6 * 7))")).stdout == "42\n"


def test_the_relays_connection_sends_small_packets_at_once_and_is_kept_alive() -> None:
    """The relay's TCP connection is set up as asyncssh sets up one it opens itself: with
    ``TCP_NODELAY`` (else each command's small packets wait for the host's delayed
    acknowledgement, tens of milliseconds a command, see ``benchmarks/bench_ssh.py``) and
    ``SO_KEEPALIVE``."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        tcp = connected("127.0.0.1", server.getsockname()[1], 5.0)
        with tcp:
            assert tcp.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
            assert tcp.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1


async def test_a_host_that_stops_hearing_from_its_command_kills_it_after_the_keepalive(
    sshd: OpenSSH,  # noqa: F811
    tmp_path: Path,
) -> None:
    """This machine cut off from the host, as when it is lost: the relay that holds the
    connection is stopped, so nothing more reaches the host and no end of the connection
    either. The host's watcher has heard no line for the keepalive (here two thirds of the
    lease, as a run's command gets by default) and kills the command's group; its last line
    never runs."""
    LEASE_TTL.set(2.0)
    keepalive = 2.0 * 2 / 3
    cmd = "echo $$ > pg; sleep 60; echo late > effect"
    async with SSHSession(sshd.creds(), cwd=str(tmp_path)) as s:
        (relay,) = my_relays()
        task = asyncio.create_task(s.run(cmd))
        while not (tmp_path / "pg").exists() or not (tmp_path / "pg").read_text().strip():
            assert not task.done(), task
            await asyncio.sleep(0.02)
        pgid = read_pid(tmp_path / "pg")
        try:
            await asyncio.sleep(1.5)  # alive past the keepalive's first timer: the lines keep it
            assert group_alive(pgid)
            os.kill(relay, signal.SIGSTOP)
            cut_at = time.monotonic()
            while group_alive(pgid):
                assert time.monotonic() - cut_at < keepalive + 1.0, "the command outlived its keepalive"
                await asyncio.sleep(0.02)
            took = time.monotonic() - cut_at
            print(f"\nlease 2s: remote command gone {took:.3f}s after the host stopped hearing from it")
            assert took > keepalive * 2 / 3 - 0.2  # not before the last line's timer ran out
        finally:
            os.kill(relay, signal.SIGCONT)
            cleanup(pgid)
        result = await asyncio.wait_for(task, 30)
        assert result.exit_code == 128 + signal.SIGKILL, result
    assert not (tmp_path / "effect").exists()


async def test_a_command_longer_than_its_keepalive_runs_to_its_end(sshd: OpenSSH, tmp_path: Path) -> None:  # noqa: F811
    """The lines sent every third of the keepalive hold it; no timer is left once it ends."""
    token = "62.125"
    async with SSHSession(sshd.creds(), cwd=str(tmp_path), keepalive=1.0) as s:
        result = await s.run(f"sleep 3.5; echo done; nohup sleep {token} > /dev/null 2>&1 &")
        assert (result.exit_code, result.stdout) == (0, "done\n")
    try:
        time.sleep(0.5)
        assert running(f"sleep {token}")  # its background process lives on, as without a keepalive
        assert watchers(token) == []
    finally:
        for pid in running(f"sleep {token}"):
            os.kill(pid, signal.SIGKILL)


async def test_a_command_outside_a_leased_run_has_no_keepalive_by_default(sshd: OpenSSH) -> None:  # noqa: F811
    assert SSHSession(sshd.creds())._keepalive() is None
    LEASE_TTL.set(7.5)
    assert SSHSession(sshd.creds())._keepalive() == 5.0
    assert SSHSession(sshd.creds(), keepalive=None)._keepalive() is None
    for bad in (0, -1.0, "30", True):
        with pytest.raises(ConfigError, match="keepalive"):
            SSHSession(sshd.creds(), keepalive=bad)  # type: ignore[arg-type]
