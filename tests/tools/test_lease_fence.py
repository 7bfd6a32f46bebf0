"""A runner's commands stop when its lease runs out unrenewed (tools/_lifeline.py and the
heartbeat sidecar's switch): at most one copy of a step's command runs once the lease moved.

Real runner processes on real stores: one is SIGSTOPped mid-command past its lease (a stopped
process cannot stop its command: its sidecar has the watcher do it), another runner takes
the run over and runs the step again, the stale one is woken; and one holds the GIL in C code
for three leases while its command runs, which must not be killed (its lease is renewed).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.runtime.test_fencing import lease_dead, wait_line
from tests.stores.conftest import new_id, open_test_store, require_url
from tests.tools.test_lifeline import cleanup, group_alive, parent, read_pid, running
from tether.state import RunStatus
from tether.tools._lifeline import FENCE, UNFENCE, WATCHER, WATCHER_NAME
from tether.tools.sandbox import Sandbox

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sidecar renews on Linux only"),
]
ROOT = Path(__file__).resolve().parents[2]
TTL = 2.0
GIL_TTL = 4.0
"""A longer lease where the holder burns a core: on a loaded 2-core host the sidecar itself
may wait a second for the CPU (a real lease is minutes long)."""


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def store(backend, tmp_path):
    async with open_test_store(backend, require_url(backend, tmp_path)) as s:
        yield s


def spawn(
    url: str, run_id: str, mode: str, ttl: float, kind: str, seconds: float, work: Path
) -> subprocess.Popen[str]:
    args = [url, run_id, mode, str(ttl), kind, str(seconds), str(work)]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.tools._stall_flow", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


async def test_a_stopped_holders_command_is_killed_as_its_lease_runs_out(backend, store, tmp_path):
    """SIGSTOP the runner while its command sleeps: the command's group is gone by the time
    the lease runs out (give or take a tick), before another runner can take the run over.
    That runner runs the step (and its command) again and completes the run; the stale one,
    woken, finds its command killed, has its next command refused, and writes nothing."""
    url = require_url(backend, tmp_path)
    run_id = new_id("fence")
    stale = spawn(url, run_id, "start", TTL, "wait", 60, tmp_path)
    pgid = None
    try:
        wait_line(stale, "in:cmd")
        pgid = read_pid(tmp_path / "start.pg")
        os.kill(stale.pid, signal.SIGSTOP)
        stopped_at = time.time()
        while group_alive(pgid):
            assert time.time() - stopped_at < TTL + 5, "a stopped holder's command outlived its lease by 5 s"
            await asyncio.sleep(0.01)
        gone_at = time.time()
        until = (await store.get_run(run_id)).lease_until
        assert until is not None
        late = gone_at - until
        print(f"\n{backend}: lease {TTL}s; command gone {late:+.3f}s after the lease ran out")
        # never after it; before it by at most a renewal's interval (the sidecar counts from its
        # last renewal: a commit since then moved the lease on), its margin and a tick
        assert -(TTL / 3 + 0.4 + 0.5) < late < 0.3, late

        while not await lease_dead(store, run_id):
            assert time.time() - stopped_at < TTL + 5
            await asyncio.sleep(0.05)
        second = spawn(url, run_id, "resume", TTL, "wait", 0.2, tmp_path)
        out, err = second.communicate(timeout=60)
        assert out.split()[-1] == "COMPLETED", err
        after = await store.get_run(run_id)

        os.kill(stale.pid, signal.SIGCONT)
        out, err = stale.communicate(timeout=60)
        assert stale.returncode == 3 and out.split()[-1] == "LEASE_LOST", (out, err)
    finally:
        if stale.poll() is None:
            os.kill(stale.pid, signal.SIGCONT)
            stale.kill()
            stale.communicate()
        if pgid is not None:
            cleanup(pgid)

    assert lines(tmp_path / "effects") == ["resume"]  # the stale command never reached its end
    assert lines(tmp_path / "seconds") == ["resume"]  # nor ran the stale step's next command
    stale_result = json.loads((tmp_path / "start.result").read_text())
    assert stale_result["first"][0] == 128 + signal.SIGKILL
    assert stale_result["second"][0] == "refused" and "lease" in stale_result["second"][1]
    again = await store.get_run(run_id)
    assert (again.version, again.status) == (after.version, RunStatus.COMPLETED)


async def test_a_fence_refuses_only_the_commands_of_runs_whose_lease_was_taken_over(tmp_path):
    """Two runs in one process (a worker's pool), stopped past their leases: both commands
    are killed. Another runner takes over only the first run. Woken, the process has the
    first run's next command refused (it gets LeaseLost), while the second run, whose lease
    it renews again, runs its next command and completes."""
    url = require_url("sqlite", tmp_path)
    run_id = new_id("pair")
    async with open_test_store("sqlite", url) as store:
        stale = spawn(url, run_id, "pair", TTL, "wait", 60, tmp_path)
        pgids = []
        try:
            wait_line(stale, "in:cmd")
            wait_line(stale, "in:cmd")
            pgids = [read_pid(tmp_path / f"{tag}.pg") for tag in ("start", "b")]
            os.kill(stale.pid, signal.SIGSTOP)
            stopped_at = time.time()
            while any(map(group_alive, pgids)):
                assert time.time() - stopped_at < TTL + 5, "a stopped holder's command outlived its lease"
                await asyncio.sleep(0.01)
            while not await lease_dead(store, run_id):
                assert time.time() - stopped_at < TTL + 5
                await asyncio.sleep(0.05)
            second = spawn(url, run_id, "resume", TTL, "wait", 0.2, tmp_path)
            out, err = second.communicate(timeout=60)
            assert out.split()[-1] == "COMPLETED", err
            os.kill(stale.pid, signal.SIGCONT)
            out, err = stale.communicate(timeout=60)
        finally:
            if stale.poll() is None:
                os.kill(stale.pid, signal.SIGCONT)
                stale.kill()
                stale.communicate()
            cleanup(*pgids)
        assert stale.returncode == 0 and out.split()[-2:] == ["LEASE_LOST", "COMPLETED"], (out, err)
        assert (await store.get_run(f"{run_id}-b")).status is RunStatus.COMPLETED
    a = json.loads((tmp_path / "start.result").read_text())
    b = json.loads((tmp_path / "b.result").read_text())
    assert a["first"][0] == b["first"][0] == 128 + signal.SIGKILL
    assert a["second"][0] == "refused"
    assert b["second"][0] == 0  # once its lease was renewed (refused meanwhile, if the sidecar was slower)
    assert sorted(lines(tmp_path / "seconds")) == ["b", "resume"]


async def test_a_command_lives_while_its_runner_holds_the_gil_for_three_leases(tmp_path):
    """The step holds the GIL in C code (no thread of its process runs, nor its event loop)
    while its command sleeps for three leases: the sidecar renews the lease, so the command
    is not killed and the run completes under its first lease."""
    url = require_url("sqlite", tmp_path)
    run_id = new_id("gil")
    async with open_test_store("sqlite", url) as store:
        holder = spawn(url, run_id, "start", GIL_TTL, "gil", 3 * GIL_TTL, tmp_path)
        pgid = None
        try:
            wait_line(holder, "in:cmd")
            pgid = read_pid(tmp_path / "start.pg")
            token = (await store.get_run(run_id)).fence
            while not (tmp_path / "effects").exists():
                # (a command that has just written its effect and ended is not one killed)
                assert group_alive(pgid) or (tmp_path / "effects").exists(), (
                    f"the command of a runner holding the GIL was killed: {holder.communicate()}"
                )
                assert holder.poll() is None
                await asyncio.sleep(0.1)
            out, err = holder.communicate(timeout=60)
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.communicate()
            if pgid is not None:
                cleanup(pgid)
        assert holder.returncode == 0 and out.split()[-1] == "COMPLETED", (out, err)
        info = await store.get_run(run_id)
        assert info.fence == token and info.status is RunStatus.COMPLETED
    result = json.loads((tmp_path / "start.result").read_text())
    assert result["first"][0] == 0 and result["second"][0] == 0
    assert lines(tmp_path / "effects") == ["start"]


def test_the_watcher_fenced_kills_its_commands_and_each_new_one_until_unfenced() -> None:
    """The watcher's signals alone, on groups of real processes."""
    read, write = os.pipe()
    watcher = subprocess.Popen(["/bin/sh", "-c", WATCHER, WATCHER_NAME], stdin=read, start_new_session=True)
    os.close(read)
    started: list[subprocess.Popen[bytes]] = []

    def command() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
        started.append(proc)
        os.write(write, f"+{proc.pid}\n".encode())
        return proc

    try:
        a = command()
        time.sleep(0.1)
        assert a.poll() is None
        watcher.send_signal(FENCE)
        assert a.wait(timeout=2) == -signal.SIGKILL
        b = command()
        assert b.wait(timeout=2) == -signal.SIGKILL  # fenced: killed as it registers
        watcher.send_signal(UNFENCE)
        time.sleep(0.1)
        c = command()
        time.sleep(0.2)
        assert c.poll() is None and watcher.poll() is None  # the signals did not end the watcher
        os.close(write)
        write = -1
        assert c.wait(timeout=2) == -signal.SIGKILL  # and EOF still kills what is left
        watcher.wait(timeout=2)
    finally:
        if write >= 0:
            os.close(write)
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if watcher.poll() is None:
            watcher.kill()
        watcher.wait()


CUT_OFF = r"""
import asyncio, json, os, sys, time
from tether.errors import SessionError
from tether.runtime.heartbeat import start_heartbeat
from tether.stores import create_store
from tether.tools import LocalSession
from tether.tools._lifeline import lifeline

async def main(work, ttl):
    store = create_store("postgresql://tether@127.0.0.1:9/unreachable")  # nothing listens there
    session = LocalSession(work)
    task = asyncio.create_task(session.run("echo $$ > pg; sleep 60"))
    while not os.path.exists(os.path.join(work, "pg")):
        await asyncio.sleep(0.01)
    held = time.time()
    beat = start_heartbeat(store, "cut-off", 1, float(ttl))
    first = await task
    ended = time.time()
    try:
        await session.run("echo late > effect")
        second = "ran"
    except SessionError as exc:
        second = str(exc)
    beat.stop()
    with open(os.path.join(work, "result"), "w") as f:
        json.dump({"fence": lifeline.fence_file, "held": held, "ended": ended, "first": [first.exit_code, first.stderr], "second": second}, f)

asyncio.run(main(*sys.argv[1:]))
"""


def test_a_holder_cut_off_from_its_store_has_its_command_killed_as_its_lease_runs_out(tmp_path: Path) -> None:
    """The process runs (the sidecar does not see it stopped), but no renewal reaches the
    store: the lease runs out all the same, another runner may take the run over, so the
    command is killed and the next one refused."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-c", CUT_OFF, str(tmp_path), str(TTL)],
        env=env,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "result").read_text())
    took = result["ended"] - result["held"]
    print(f"\ncut off from the store: command killed {took:.3f}s into a {TTL}s lease")
    # (its sidecar's start, a Python process, may take a second on a loaded host: that is late
    # against a lease of 2 s, not against one of minutes)
    assert TTL - 0.4 - 0.3 < took < TTL + 0.5, took
    assert result["first"][0] == 128 + signal.SIGKILL and "lease" in result["first"][1]
    assert "refused" in result["second"] and not (tmp_path / "effect").exists()
    assert "not renewed in time" in proc.stderr
    assert not os.path.exists(result["fence"])  # lifted at exit


def test_a_fence_kills_a_sandboxed_command(tmp_path: Path) -> None:
    """The watcher registers a sandboxed command's launcher group: the fence ends it too."""
    found = Sandbox.detect()
    if found is None:
        pytest.skip("no working bwrap here: install the bubblewrap package")
    found.close()
    token = "59.625"  # a sleep no other process runs
    proc = parent(tmp_path, f"run:touch started; sleep {token}; touch effect", "wait:started", boxed=True)
    try:
        assert [pid for pid in running(token) if pid != proc.pid]
        os.kill(read_pid(tmp_path / "ready"), FENCE)  # the parent's watcher
        deadline = time.monotonic() + 2
        while [pid for pid in running(token) if pid != proc.pid]:  # (the token is in its argv too)
            assert time.monotonic() < deadline, "the fenced sandboxed command still runs"
            time.sleep(0.01)
        assert proc.poll() is None  # the parent itself is not touched
    finally:
        proc.kill()
        proc.wait()
        for pid in running(token):
            os.kill(pid, signal.SIGKILL)


def test_fence_files_of_processes_that_are_gone_are_swept(tmp_path: Path) -> None:
    """A sidecar killed with its parent while fenced leaves the parent's fence file: the
    next process that may be fenced removes the files of dead processes, not of live ones."""
    from tether.tools._lifeline import FENCE_PREFIX, sweep_fence_files

    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = tmp_path / f"{FENCE_PREFIX}{gone.pid}-0123456789ab"
    live = tmp_path / f"{FENCE_PREFIX}{os.getpid()}-0123456789ab"
    other = tmp_path / "tether-fenced-notapid"
    for path in (dead, live, other):
        path.write_text("1:run\n")
    assert sweep_fence_files(str(tmp_path)) == 1
    assert not dead.exists() and live.exists() and other.exists()
