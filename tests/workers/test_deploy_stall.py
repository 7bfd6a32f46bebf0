"""The bundled deploy agent's worker stopped (SIGSTOP) mid-command past its lease.

As in test_deploy_resume, a scripted model sends five shell commands, each marking its
start and its end. The worker executing the run is SIGSTOPped while the third command
sleeps: a stopped process cannot stop its command, so its heartbeat sidecar has the
worker's command watcher kill it as the lease runs out (``runtime/_heartbeat_sidecar.py``,
``tools/_lifeline.py``), before another worker may take the run over and run that command
again. The other worker resumes and completes the run; the stopped one, woken, writes
nothing, and the cut command's effect never lands.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.workers.conftest import broker_url, opened, store_url
from tests.workers.test_deploy_resume import (
    CUT,
    HOLD,
    alive,
    ended,
    inputs,
    marks,
    outcome,
    project,
    single_process,
)
from tether.state.reserved import runtime_get
from tether.workers import submit

pytestmark = pytest.mark.slow

LEASE = 3.0


async def test_a_stopped_workers_command_is_killed_before_another_worker_runs_it_again(
    fleet_factory: Any, dispatchers: Any, tmp_path: Path, queue: str
) -> None:
    store_at, broker_at = store_url("postgresql"), broker_url("amqp")
    repo = project(tmp_path / f"svc-{uuid.uuid4().hex[:6]}")
    starts, done = repo / "starts.log", repo / "done.log"
    (repo / f"{HOLD}-{CUT}").write_text("30")
    async with opened(store_at) as store:
        fleet = fleet_factory(store_at, broker_at)
        fleet.start(2, "--lease", str(LEASE), "--sweep-interval", "0.5", "--sweep-grace", "1")
        run_id = await submit(store, dispatchers(broker_at), "deploy", inputs(repo))
        deadline = time.monotonic() + 90
        while CUT not in marks(starts):
            assert time.monotonic() < deadline, fleet.logs()[-3000:]
            await asyncio.sleep(0.05)
        line = starts.read_text().splitlines()[-1].split()
        worker, shell = int(line[1]), int(line[2])
        stopped = next(p for p in fleet.procs if p.pid == worker)
        os.kill(worker, signal.SIGSTOP)
        stopped_at = time.time()
        try:
            while alive(shell):
                assert time.time() - stopped_at < LEASE + 2, "a stopped worker's command outlived its lease"
                await asyncio.sleep(0.01)
            gone_at = time.time()
            info = await store.get_run(run_id)
            assert info is not None and info.lease_until is not None
            print(
                f"\ncommand gone {gone_at - info.lease_until:+.3f}s after the lease ran out (lease {LEASE}s)"
            )
            assert gone_at < info.lease_until + 0.5
            assert marks(starts).count(CUT) == 1  # gone before the command's second start
            (repo / f"{HOLD}-{CUT}").unlink()  # the command run again does not wait
            state = await ended(store, run_id)
            final = await store.get_run(run_id)
        finally:
            os.kill(worker, signal.SIGCONT)
            if alive(shell):
                os.killpg(shell, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while "lost its lease" not in Path(stopped.log).read_text(errors="replace"):  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, "the woken worker never noticed"
            await asyncio.sleep(0.1)
        after = await store.get_run(run_id)
        assert final is not None and after is not None
        assert (after.version, after.status) == (final.version, final.status)  # it wrote nothing
        assert marks(starts) == [1, 2, CUT, CUT, 4, 5]  # the stopped worker ran no command after
        assert marks(done) == [1, 2, CUT, 4, 5]  # and the cut command's end never ran
        resumed = [ln.split() for ln in starts.read_text().splitlines()][CUT:]
        assert all(int(pid) != worker for _k, pid, _sh in resumed)
        kinds = [e["kind"] for e in runtime_get(state, "event_log", [])]
        assert kinds.count("side_effect_cut") == 1
        other = project(tmp_path / "reference")
        reference = await single_process(store, other)
        assert outcome(state) == outcome(reference)
        assert runtime_get(state, "lease") is None
