"""A command dies with the process that started it, even under ``kill -9`` (tools/_lifeline.py).

Each test starts a parent Python process that runs commands through ``LocalSession``, kills
it with SIGKILL while a command sleeps, and watches what is left of the command: its shell,
a background process it started and its foreground child.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tether.tools.sandbox import Sandbox

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc to find the command")

PARENT = r"""
import asyncio, os, sys, time
from tether.tools import LocalSession
from tether.tools._lifeline import lifeline
from tether.tools.sandbox import Sandbox

async def main(work, boxed, steps):
    sandbox = Sandbox.detect() if boxed == "1" else None
    sessions, tasks = [], []
    for step in steps:
        kind, _, arg = step.partition(":")
        if kind == "run":  # in the background, in a session of its own
            session = LocalSession(work, sandbox=sandbox, default_timeout=300)
            sessions.append(session)
            tasks.append(asyncio.create_task(session.run(arg)))
        elif kind == "await":
            await tasks[-1]
        elif kind == "wait":
            while not os.path.exists(os.path.join(work, arg)):
                await asyncio.sleep(0.01)
        elif kind == "kill-watcher":
            # its pid taken once: a command's start that sees it dead starts another at once
            pid = lifeline.pid
            os.kill(pid, 9)
            while os.path.exists(f"/proc/{pid}/status"):
                with open(f"/proc/{pid}/status") as f:
                    if "zombie" in f.read():
                        break
                await asyncio.sleep(0.01)
    with open(os.path.join(work, "ready"), "w") as f:
        f.write(f"{lifeline.pid}\n")
    await asyncio.sleep(300)

if os.environ.get("TETHER_TEST_LOOP") == "uvloop":
    import uvloop
    uvloop.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
else:
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
"""


def read_pid(path: Path) -> int:
    """The pid written on one line to ``path`` (``echo $$ > path``, or a test's own process):
    the file exists before its line is in it, so a reader that only waited for the file may
    find it empty."""
    deadline = time.monotonic() + 10
    while not (text := path.read_text() if path.exists() else "").endswith("\n"):
        assert time.monotonic() < deadline, f"{path.name} holds no pid after 10 s: {text!r}"
        time.sleep(0.005)
    return int(text)


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` runs (a zombie waiting for its reaper does not)."""
    return any(stat[1] == pgid for stat in _stats())


def running(token: str) -> list[int]:
    """Pids of live processes whose command line contains ``token``."""
    out = []
    for pid, _pgid in _stats():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if token in cmdline:
            out.append(pid)
    return out


def _stats() -> list[tuple[int, int]]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X"):
            out.append((int(stat.parent.name), int(fields[2])))
    return out


def parent(work: Path, *steps: str, boxed: bool = False, loop: str = "asyncio") -> subprocess.Popen[bytes]:
    """Start the parent process (on ``loop``: asyncio's or uvloop, which ``tether serve``
    runs on when installed); return once it has done ``steps`` (the commands run)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TETHER_TEST_LOOP": loop}
    proc = subprocess.Popen([sys.executable, "-c", PARENT, str(work), "1" if boxed else "0", *steps], env=env)
    deadline = time.monotonic() + 30
    try:
        while not (work / "ready").exists():
            assert proc.poll() is None, "the parent process failed"
            assert time.monotonic() < deadline, "the parent process did not get ready"
            time.sleep(0.02)
    except AssertionError:  # not left running: its Popen would warn in whichever test collects it
        proc.kill()
        proc.wait()
        raise
    return proc


def kill_and_time(proc: subprocess.Popen[bytes], gone: Callable[[], bool]) -> float:
    """SIGKILL the parent; seconds until ``gone()`` holds (fails past 5 s)."""
    start = time.monotonic()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    while not gone():
        assert time.monotonic() - start < 5, "the command outlived its parent by 5 s"
        time.sleep(0.005)
    return time.monotonic() - start


def cleanup(*pgids: int) -> None:
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_command_and_its_children_die_with_a_parent_killed_9(tmp_path: Path, loop: str) -> None:
    """The command's whole process group goes within a second; its last line never runs.
    Also under uvloop, whose spawn leaves copies of a child's standard streams open in it."""
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    cmd = "echo $$ > pg; sleep 60 & sleep 2; echo late > effect"
    proc = parent(tmp_path, f"run:{cmd}", "wait:pg", loop=loop)
    pgid = read_pid(tmp_path / "pg")
    try:
        assert group_alive(pgid)
        took = kill_and_time(proc, lambda: not group_alive(pgid))
        assert took < 1.0
        time.sleep(2.5)  # past the command's sleep: had its shell lived on, it would write now
        assert not (tmp_path / "effect").exists()
    finally:
        proc.kill()
        proc.wait()
        cleanup(pgid)


def test_what_an_ended_command_left_in_the_background_lives_on(tmp_path: Path) -> None:
    """``nohup server &`` of a command that has ended is not the running command: it stays."""
    server = "nohup sleep 60 > /dev/null 2>&1 & echo $! > server.pid; echo $$ > server.pg"
    proc = parent(tmp_path, f"run:{server}", "await", "run:echo $$ > pg; sleep 60", "wait:pg")
    pgid, server_pgid = read_pid(tmp_path / "pg"), read_pid(tmp_path / "server.pg")
    server_pid = read_pid(tmp_path / "server.pid")
    try:
        kill_and_time(proc, lambda: not group_alive(pgid))
        time.sleep(0.2)
        assert server_pid in {pid for pid, _ in _stats()}
    finally:
        proc.kill()
        proc.wait()
        cleanup(pgid, server_pgid)


def test_a_watcher_killed_is_replaced_and_told_the_running_commands(tmp_path: Path) -> None:
    """The next command starts a new watcher, which also kills the command that ran before."""
    proc = parent(
        tmp_path,
        "run:echo $$ > a.pg; sleep 60",
        "wait:a.pg",
        "kill-watcher",
        "run:echo $$ > b.pg; sleep 60",
        "wait:b.pg",
    )
    a, b = read_pid(tmp_path / "a.pg"), read_pid(tmp_path / "b.pg")
    try:
        assert group_alive(a) and group_alive(b)
        took = kill_and_time(proc, lambda: not group_alive(a) and not group_alive(b))
        assert took < 1.0
    finally:
        proc.kill()
        proc.wait()
        cleanup(a, b)


def test_a_sandboxed_command_dies_with_its_parent(tmp_path: Path) -> None:
    """In the sandbox too (bwrap's own --die-with-parent, and the watcher)."""
    found = Sandbox.detect()
    if found is None:
        pytest.skip("no working bwrap here: install the bubblewrap package")
    found.close()
    token = "59.125"  # a sleep no other process runs
    proc = parent(tmp_path, f"run:touch started; sleep {token}; touch effect", "wait:started", boxed=True)
    try:
        assert running(token)
        took = kill_and_time(proc, lambda: not running(token))
        assert took < 1.0
    finally:
        proc.kill()
        proc.wait()
        for pid in running(token):
            os.kill(pid, signal.SIGKILL)


FORKING = r"""
import asyncio, os, sys, threading
from tether.tools import LocalSession

work = sys.argv[1]

async def start(command, mark):
    task = asyncio.create_task(LocalSession(work).run(command))
    while not os.path.exists(os.path.join(work, mark)):
        await asyncio.sleep(0.01)
    return task

async def in_child():
    await start("echo $$ > b.pg; sleep 60", "b.pg")
    with open(os.path.join(work, "child.pid"), "w") as f:
        f.write(f"{os.getpid()}\n")
    await asyncio.sleep(300)

async def main():
    await start("echo $$ > a.pg; sleep 60", "a.pg")
    if os.fork() == 0:  # a fresh event loop in a thread of the child: the parent's is not its own
        thread = threading.Thread(target=asyncio.run, args=(in_child(),))
        thread.start()
        thread.join()
        os._exit(0)  # never unwind the parent's loop here: it would cancel, and kill, its command
    await asyncio.sleep(300)

asyncio.run(main())
"""


def test_a_forked_child_gets_a_watcher_of_its_own(tmp_path: Path) -> None:
    """After ``fork()`` (no exec) the child's commands die with the child, the parent's with the parent."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", FORKING, str(tmp_path)], env=env)
    deadline = time.monotonic() + 30
    while not (tmp_path / "child.pid").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the parent process failed"
        time.sleep(0.02)
    child = read_pid(tmp_path / "child.pid")
    a, b = read_pid(tmp_path / "a.pg"), read_pid(tmp_path / "b.pg")
    try:
        os.kill(child, signal.SIGKILL)
        deadline = time.monotonic() + 1.0
        while group_alive(b):
            assert time.monotonic() < deadline, "the child's command outlived it by 1 s"
            time.sleep(0.005)
        assert group_alive(a)  # the parent lives: so does its command
        took = kill_and_time(proc, lambda: not group_alive(a))
        assert took < 1.0
    finally:
        proc.kill()
        proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
        cleanup(a, b)


def test_a_gated_command_runs_nothing_when_its_parent_died_before_registering_it(tmp_path: Path) -> None:
    """Under uvloop a command waits until its parent has registered it with the watcher:
    the end of its gate pipe instead (the parent died) means it exits before its first line;
    the gate's line lets it run, with ``/dev/null`` as its standard input."""
    from tether.tools._lifeline import GATED

    script = GATED + "echo ran > mark; cat > seen"
    read, write = os.pipe()
    os.close(write)
    died = subprocess.run(["/bin/sh", "-c", script], stdin=read, cwd=tmp_path, timeout=10)
    os.close(read)
    assert died.returncode == 137 and not (tmp_path / "mark").exists()
    read, write = os.pipe()
    os.write(write, b"\n")
    ran = subprocess.run(["/bin/sh", "-c", script], stdin=read, cwd=tmp_path, timeout=10)
    os.close(read)
    os.close(write)  # (still open: the command must not read it after its gate)
    assert ran.returncode == 0 and (tmp_path / "mark").exists() and (tmp_path / "seen").read_text() == ""
