"""The bundled deploy agent resumed mid-script on another worker.

A scripted model sends a script of shell commands; each appends its number to
``starts.log`` when it starts and to ``done.log`` when it has done its work, and carries
a probe (``grep -qsx N done.log``) that tells a resume whether its effect is in place. The
worker executing the run is killed -9 while one command sleeps: with that command (its
own process group: a lost host or a killed container takes both), or alone (then the
command dies with its worker: tools/_lifeline.py). Another worker resumes the run: the
commands that completed are not run again, the cut one is probed, found not done and run
once more, and the run ends COMPLETED in the state a single-process run of the same
script ends in.
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
from tether.state import RunStatus
from tether.state.reserved import runtime_get
from tether.stores import CheckpointStore
from tether.workers import Registry, RunExecutor, store_pending, submit

pytestmark = pytest.mark.slow

CUT = 3
"""The command the worker is killed in."""
N = 5
"""Commands in the script."""
HOLD = "hold"
"""While this file is in the deploy directory, a command sleeps as many seconds as it says."""
ORPHAN_SLEEP = 4
"""How long the cut command sleeps when its worker alone is killed."""


def command(k: int) -> dict[str, Any]:
    """Script step ``k``: its start (with the worker's pid and its own), its work, its end."""
    return {
        "action": "execute",
        "command": f'echo "{k} $PPID $$" >> starts.log && sleep "$(cat {HOLD}-{k} 2>/dev/null || echo 0)" '
        f"&& echo {k} >> done.log",
        "probe": f"grep -qsx {k} done.log || exit 1",
        "reasoning": f"script step {k}",
    }


def inputs(repo: Path) -> dict[str, Any]:
    replies = [command(k) for k in range(1, N + 1)] + [{"action": "done", "message": "deployed"}]
    return {"repo": str(repo), "model": {"provider": "scripted", "replies": replies}, "safety": "trusted"}


def project(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "requirements.txt").write_text("flask\n")
    (root / "app.py").write_text("print('hi')\n")
    return root


def marks(path: Path) -> list[int]:
    return [int(line.split()[0]) for line in path.read_text().splitlines()] if path.exists() else []


def outcome(state: dict[str, Any]) -> dict[str, Any]:
    """What a deploy run did, without when, where and by which process."""
    return {
        "commands": [
            (c["iteration"], c["command"], c["exit_code"], c["success"]) for c in state["command_history"]
        ],
        "actions": [(a["iteration"], a["action"], a.get("message")) for a in state.get("actions", [])],
        "steps": [(h["node"], h["status"]) for h in state["execution_history"]],
        "final_output": state.get("final_output"),
        "iteration": state.get("iteration"),
        "inflight": state.get("inflight"),
        "prompts": len(state.get("prompt_log", [])),
    }


async def ended(store: CheckpointStore, run_id: str, timeout: float = 120) -> dict[str, Any]:
    """The run's state once COMPLETED; fails at once when it ends otherwise, or stays PAUSED
    (it passes through PAUSED on its way: the resume stops at the cut command, then probes
    it, and continues)."""
    deadline, paused_since = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        info = await store.get_run(run_id)
        status = info.status if info is not None else None
        if status in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.PAUSED):
            cp = await store.load(run_id)
            assert cp is not None
            if status is RunStatus.COMPLETED:
                return cp.state
            paused_since = paused_since or time.monotonic()
            if status is RunStatus.FAILED or time.monotonic() - paused_since > 10:
                raise AssertionError(f"run {status}: {runtime_get(cp.state, 'pending_decision')}")
        else:
            paused_since = None
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {run_id} not ended after {timeout}s")


async def single_process(store: CheckpointStore, repo: Path) -> dict[str, Any]:
    """The same script run in this process without Celery (nothing holds a command)."""
    registry = Registry()
    rid = await store_pending(store, "deploy", inputs(repo), registry=registry)
    out = await RunExecutor(store, registry).execute(rid)
    assert (out.action, out.status) == ("executed", "COMPLETED"), out
    cp = await store.load(rid)
    assert cp is not None
    return cp.state


def alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (a zombie waiting for a reaper does not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


@pytest.mark.parametrize("kill", ["worker and command", "worker"])
async def test_a_deploy_killed_mid_script_resumes_on_another_worker(
    kill: str, fleet_factory: Any, dispatchers: Any, tmp_path: Path, queue: str
) -> None:
    """``worker``: only the worker is killed; the command it ran (in a process group of its
    own) dies with it within a second, before the other worker runs it again, and its
    effect never lands: it would have slept ``ORPHAN_SLEEP`` seconds, then written its
    mark, and the test waits past that."""
    store_at, broker_at = store_url("postgresql"), broker_url("amqp")
    repo = project(tmp_path / f"svc-{uuid.uuid4().hex[:6]}")
    starts, done = repo / "starts.log", repo / "done.log"
    (repo / f"{HOLD}-{CUT}").write_text(str(ORPHAN_SLEEP) if kill == "worker" else "30")
    async with opened(store_at) as store:
        fleet = fleet_factory(store_at, broker_at)
        fleet.start(2, "--lease", "3", "--sweep-interval", "0.5", "--sweep-grace", "1")
        run_id = await submit(store, dispatchers(broker_at), "deploy", inputs(repo))
        deadline = time.monotonic() + 90
        while CUT not in marks(starts):
            assert time.monotonic() < deadline, fleet.logs()[-3000:]
            await asyncio.sleep(0.05)
        cut_started = time.monotonic()
        line = starts.read_text().splitlines()[-1].split()
        worker, shell = int(line[1]), int(line[2])
        assert worker in {p.pid for p in fleet.procs}
        killed_at = time.monotonic()
        os.kill(worker, signal.SIGKILL)
        if kill == "worker and command":
            os.killpg(shell, signal.SIGKILL)
        while alive(shell):  # the worker alone: its command goes with it
            assert time.monotonic() - killed_at < 1.0, "the command outlived its worker by 1 s"
            await asyncio.sleep(0.005)
        assert marks(starts).count(CUT) == 1  # gone before the command's second start
        killed = next(p for p in fleet.procs if p.pid == worker)
        killed.wait()
        (repo / f"{HOLD}-{CUT}").unlink()  # the command run again does not wait
        try:
            state = await ended(store, run_id)
        finally:
            if alive(shell):
                os.killpg(shell, signal.SIGKILL)
        if kill == "worker":  # past the time the killed start would have written its mark
            await asyncio.sleep(max(0.0, cut_started + ORPHAN_SLEEP + 1 - time.monotonic()))
        # the completed commands ran once; the cut one once more; none after it twice
        assert marks(starts) == [1, 2, CUT, CUT, 4, 5]
        assert marks(done) == [1, 2, CUT, 4, 5]
        resumed = [ln.split() for ln in starts.read_text().splitlines()][CUT:]
        assert all(int(pid) != worker for _k, pid, _sh in resumed)  # on the other worker
        kinds = [e["kind"] for e in runtime_get(state, "event_log", [])]
        assert kinds.count("side_effect_cut") == 1  # the cut is on record
        other = project(tmp_path / "reference")
        reference = await single_process(store, other)
        assert outcome(state) == outcome(reference)
        assert marks(done) == marks(other / "done.log")
        assert runtime_get(state, "lease") is None
