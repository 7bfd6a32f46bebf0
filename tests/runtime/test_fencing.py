"""Leases with fencing tokens, with real runner processes on real stores: a holder that
stalled past its lease writes nothing once another runner took the run over, and
heartbeats keep a run's lease alive through steps far longer than the lease."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.runtime._lease_flow import STEPS
from tests.stores.conftest import BACKENDS, new_id, open_test_store, require_url
from tether.errors import RunInProgress
from tether.runtime import Runner
from tether.runtime.lease import lease_is_dead
from tether.state import RunStatus
from tether.state.reserved import runtime_get

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
TTL = 2.0
HEARTBEAT_TTL = 4.0
"""A longer lease where the holder burns a core: on a loaded 2-core host the sidecar itself
may wait a second for the CPU (a real lease is minutes long)."""


OUT_OF_PROCESS = [b for b in BACKENDS if b != "memory"]


@pytest.fixture(params=OUT_OF_PROCESS)
def backend(request: pytest.FixtureRequest) -> str:
    """Every backend another process can open (the stores' own list)."""
    return str(request.param)


@pytest.fixture
async def store(backend, tmp_path):
    async with open_test_store(backend, require_url(backend, tmp_path)) as s:
        yield s


def spawn(
    url: str, run_id: str, mode: str, kind: str, seconds: float, log: Path, ttl: float = TTL
) -> subprocess.Popen[str]:
    args = [url, run_id, mode, str(ttl), kind, str(seconds), str(log)]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.runtime._lease_flow", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_line(proc: subprocess.Popen[str], want: str) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == want, (line, proc.stderr.read() if proc.stderr and proc.poll() is not None else "")


async def lease_dead(store, run_id: str) -> bool:
    info = await store.get_run(run_id)
    cp = await store.load(run_id)
    return lease_is_dead(runtime_get(cp.state, "lease"), until=info.lease_until)


async def test_a_stalled_holder_writes_nothing_after_another_runner_took_over(backend, store, tmp_path):
    """SIGSTOP a runner mid-step past its lease, let a second runner take the run over and
    complete it, SIGCONT: the stale one gets LeaseLost and the run is exactly as the
    second runner left it (versions, status, history)."""
    url = require_url(backend, tmp_path)
    run_id, log = new_id("stale"), tmp_path / "steps.log"
    stale = spawn(url, run_id, "start", "await", 2 * TTL, log)
    try:
        wait_line(stale, "in:long")
        os.kill(stale.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        assert not await lease_dead(store, run_id)  # stopped, but its lease has not run out yet
        while not await lease_dead(store, run_id):  # no heartbeat for a stopped holder
            assert time.monotonic() - stopped_at < TTL + 5, "a SIGSTOPped holder's lease never expired"
            await asyncio.sleep(0.1)
        held = (await store.get_run(run_id)).fence

        second = spawn(url, run_id, "resume", "none", 0, log)
        out, err = second.communicate(timeout=60)
        assert out.split()[-1] == "COMPLETED", err
        after = await store.get_run(run_id)
        history = [h.version for h in await store.history(run_id)]
        final = await store.load(run_id)
        assert after.status is RunStatus.COMPLETED and after.fence > held

        os.kill(stale.pid, signal.SIGCONT)
        out, err = stale.communicate(timeout=60)
        assert stale.returncode == 3, (out, err)
        assert out.split()[-2:] == [str(held), str(after.fence)]
    finally:
        if stale.poll() is None:
            os.kill(stale.pid, signal.SIGCONT)
            stale.kill()
            stale.communicate()

    again = await store.get_run(run_id)
    assert (again.version, again.status, again.fence) == (after.version, RunStatus.COMPLETED, after.fence)
    assert [h.version for h in await store.history(run_id)] == history
    assert (await store.load(run_id)).state == final.state
    events = runtime_get(final.state, "event_log")
    unconfirmed = [e for e in events if e["kind"] == "side_effects_unconfirmed"]
    assert [(e["step"], e["detail"]["token"]) for e in unconfirmed] == [("long", held)]
    assert final.executed_node_ids == STEPS
    ends = log.read_text().split()
    assert ends.count("end:long") == 2  # both ran the step: only the second one's counts


HEARTBEAT_CASES = [("sqlite", "sleep")] + [
    (b, "gil" if i % 2 == 0 else "sleep") for i, b in enumerate(OUT_OF_PROCESS)
]
"""Each way of starving the process on the embedded default, then one per other backend,
alternating: the sidecar renews through the backend's own lease write, which does not
depend on how the step starves the process (each such case runs a 12-second step)."""


@pytest.mark.parametrize(("backend", "kind"), HEARTBEAT_CASES, indirect=["backend"])
async def test_heartbeats_keep_a_step_three_times_the_lease_alive(backend, store, tmp_path, kind):
    """A step 3x longer than the lease that blocks the event loop (time.sleep) or holds the
    GIL in C code: the sidecar renews the lease, no one may take the run over, and it
    completes under its first token."""
    url = require_url(backend, tmp_path)
    run_id, log = new_id(kind), tmp_path / "steps.log"
    ttl = HEARTBEAT_TTL
    holder = spawn(url, run_id, "start", kind, 3 * ttl, log, ttl)
    try:
        wait_line(holder, "in:long")
        token = (await store.get_run(run_id)).fence
        began = time.monotonic()
        checks = 0
        while holder.poll() is None and time.monotonic() - began < 3 * ttl - 0.5:
            await asyncio.sleep(0.25)
            if holder.poll() is not None or "end:long" in log.read_text():
                break  # (a finished run has released its lease)
            if await lease_dead(store, run_id):
                assert "end:long" in log.read_text(), (
                    f"lease dead {time.monotonic() - began:.1f}s into the step"
                )
                break
            checks += 1
            if checks == 16:  # well past the lease: another runner is still refused
                with pytest.raises(RunInProgress):
                    await Runner(_never(), store, lease_ttl=ttl, heartbeat=False).resume(run_id)
        out, err = holder.communicate(timeout=60)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.communicate()
    assert holder.returncode == 0 and out.split()[-1] == "COMPLETED", (out, err)
    assert checks >= 16
    info = await store.get_run(run_id)
    assert info.fence == token and info.status is RunStatus.COMPLETED and info.lease_until is None
    steps = log.read_text().split()
    assert steps.count("end:long") == 1
    lasted = next(float(s.split(":")[1]) for s in steps if s.startswith("lasted:"))
    assert lasted >= 3 * ttl - 0.2, lasted


def _never():
    from tether.runtime import Step, Workflow

    def fail(_sc):
        raise AssertionError("a refused runner ran a step")

    return Workflow.plan([Step(id=s, fn=fail) for s in STEPS])
