"""kill -9 of a real runner process at every step boundary and mid-step, then resume."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime._flow import STEPS
from tests.stores.conftest import new_id
from tether.state.reserved import runtime_state

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
VOLATILE = {"_tether", "execution_history"}


def run_flow(
    url: str, run_id: str, mode: str, log: Path, crash: str | None = None
) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "tests.runtime._flow", url, run_id, mode, str(log)]
    return subprocess.run(
        [*args, *([crash] if crash else [])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def url(backend: str, store_url: str) -> str:
    if backend == "memory":
        pytest.skip("a memory store does not outlive its process")
    return store_url


def comparable(state: dict) -> dict:
    out = {k: v for k, v in state.items() if k not in VOLATILE}
    out["history"] = [h["node"] for h in state["execution_history"]]
    out["todo"] = [(sid, t["status"]) for sid, t in runtime_state(state)["todo"].items()]
    return out


@pytest.mark.parametrize("when", ["start", "mid", "after"])
async def test_killed_at_every_step_then_resumed_equals_an_uninterrupted_run(url, store, tmp_path, when):
    reference_id, run_id = new_id("ref"), new_id("crash")
    ref = run_flow(url, reference_id, "start", tmp_path / "ref.log")
    assert ref.stdout.strip() == "COMPLETED", ref.stderr

    log = tmp_path / "crash.log"
    done_before_kill: list[set[str]] = []
    mode = "start"
    for step in STEPS:
        out = run_flow(url, run_id, mode, log, f"{step}:{when}")
        assert out.returncode == -9, out.stderr  # it really died by SIGKILL
        cp = await store.load(run_id)
        done_before_kill.append(set(cp.executed_node_ids) if cp else set())
        mode = "resume" if cp else "start"
    final = run_flow(url, run_id, mode, log)
    assert final.stdout.strip() == "COMPLETED", final.stderr

    result = await store.load(run_id)
    expected = await store.load(reference_id)
    assert comparable(result.state) == comparable(expected.state)
    assert result.executed_node_ids == STEPS

    ends = log.read_text().split()
    for step in STEPS:  # a step recorded as done never ran again
        assert ends.count(f"end:{step}") == 1, (step, ends)
    # and what was done before each kill only grew
    assert all(a <= b for a, b in zip(done_before_kill, done_before_kill[1:], strict=False))
