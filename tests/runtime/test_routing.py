"""Dynamic routing: goto, loops with bounds, decisions in the checkpoint, resume after kill -9."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.stores.conftest import new_id
from tether.errors import ConfigError
from tether.runtime import Runner, Step, StepContext, Workflow
from tether.runtime.workflow import LoopLimitExceeded
from tether.state import ExecutionContext, RunStatus
from tether.state.reserved import runtime_state
from tether.stores import create_store

ROOT = Path(__file__).resolve().parents[2]


def counter_loop(rounds: int, *, max_visits: int | None = None, max_routed: int = 10_000) -> Workflow:
    """check -> work -> check ... until ``rounds`` works, then ``done``."""

    def check(sc: StepContext) -> dict:
        n = int(sc.get("n", 0))
        if n < rounds:
            sc.goto("work", reason=f"n={n}")
        else:
            sc.goto("done", reason="enough")
        return {"trail": [*sc.get("trail", []), "check"]}

    def work(sc: StepContext) -> dict:
        sc.goto("check")
        return {"n": int(sc.get("n", 0)) + 1, "trail": [*sc.get("trail", []), "work"]}

    def done(sc: StepContext) -> dict:
        return {"trail": [*sc.get("trail", []), "done"]}

    return Workflow(
        [
            Step(id="check", fn=check),
            Step(id="work", fn=work, max_visits=max_visits),
            Step(id="done", fn=done),
        ],
        max_routed=max_routed,
    )


async def test_a_step_loops_back_and_every_decision_is_in_the_checkpoint(tmp_path):
    """check/work alternate three times, then done; the route log holds each goto."""
    store = create_store(f"sqlite:///{tmp_path}/t.db")
    await store.setup()
    result = await Runner(counter_loop(3), store).start("loop")
    assert result.status is RunStatus.COMPLETED
    assert result.state["trail"] == ["check", "work"] * 3 + ["check", "done"]
    cp = await store.load("loop")
    routes = [e["detail"] for e in runtime_state(cp.state)["event_log"] if e["kind"] == "route"]
    assert [r["to"] for r in routes] == [["work"], ["check"]] * 3 + [["done"]]
    assert routes[0]["reason"] == "n=0"
    assert runtime_state(cp.state)["route"]["visits"] == {"work": 3, "check": 3, "done": 1}
    assert runtime_state(cp.state)["route"]["pending"] == []
    history = [h["node"] for h in cp.state["execution_history"]]
    assert history == ["check", "work"] * 3 + ["check", "done"]
    await store.aclose()


async def test_goto_with_several_steps_runs_them_in_order(tmp_path):
    """goto("b", "c") queues both, ahead of what was queued before."""
    seen: list[str] = []

    def mk(name: str, *then: str):
        def fn(sc: StepContext) -> None:
            seen.append(name)
            if then:
                sc.goto(*then)

        return fn

    wf = Workflow(
        [Step(id="a", fn=mk("a", "c", "b")), Step(id="b", fn=mk("b")), Step(id="c", fn=mk("c", "d"))]
    )
    wf = Workflow([*wf.steps, Step(id="d", fn=mk("d"))])
    store = create_store(f"memory://{tmp_path}")
    result = await Runner(wf, store).start("set")
    assert result.status is RunStatus.COMPLETED
    assert seen == ["a", "c", "d", "b"]


@pytest.mark.parametrize(("kwargs", "limit"), [({"max_visits": 2}, 2), ({"max_routed": 5}, 5)])
async def test_a_loop_past_its_bound_fails_the_step_with_a_report(tmp_path, kwargs, limit):
    """The step whose goto passes a bound fails as LOGIC; the run pauses with a report."""
    store = create_store(f"memory://{tmp_path}")
    result = await Runner(counter_loop(10, **kwargs), store).start("bounded")
    assert result.status is RunStatus.PAUSED
    assert result.report is not None
    assert result.report.error_type == LoopLimitExceeded.__name__
    assert str(limit) in result.report.error
    assert str(result.report.kind) == "logic"
    assert result.state["n"] <= limit  # the over-limit goto was rolled back with its step


async def test_goto_an_unknown_step_names_the_known_ones(tmp_path):
    """A typo in a target is a clear error, not a silent end of the run."""

    def bad(sc: StepContext) -> None:
        sc.goto("nope")

    errors: list[BaseException] = []
    wf = Workflow([Step(id="a", fn=bad, on_error=lambda e, sc: errors.append(e) or {"x": 1})])
    await Runner(wf, create_store(f"memory://{tmp_path}")).start("typo")
    assert isinstance(errors[0], ConfigError)
    assert "no such step" in str(errors[0]) and "steps: a" in str(errors[0])
    with pytest.raises(ConfigError):
        StepContext(run_id="r", step=wf["a"], state=ExecutionContext("r")).goto()


def run_loop(
    url: str, run_id: str, mode: str, log: Path, crash_at: int = 0, flags: str = ""
) -> subprocess.CompletedProcess[str]:
    args = [
        sys.executable,
        "-m",
        "tests.runtime._loop_flow",
        url,
        run_id,
        mode,
        str(log),
        str(crash_at),
        flags,
    ]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("crash_at", [1, 3])
async def test_kill_9_inside_a_routed_step_resumes_on_the_same_path(tmp_path, crash_at):
    """The random choice made before the crash is kept: the killed step runs again, once."""
    url = f"sqlite:///{tmp_path}/loop.db"
    log = tmp_path / "side_effects.log"
    run_id = new_id("loop")
    killed = run_loop(url, run_id, "start", log, crash_at)
    assert killed.returncode == -9, killed.stderr
    before = log.read_text().split()
    chosen = [line.split(":")[2] for line in before if line.startswith("decide:")]
    final = run_loop(url, run_id, "resume", log)
    assert final.stdout.strip() == "COMPLETED", final.stderr
    lines = log.read_text().split()
    decisions = [line.split(":")[2] for line in lines if line.startswith("decide:")]
    assert decisions[: len(chosen)] == chosen  # no decision was taken again
    ends = [line for line in lines if line.startswith("end:")]
    assert [e.split(":")[2] for e in ends] == ["1", "2", "3", "4"]  # each round finished once
    assert [e.split(":")[1] for e in ends] == decisions[:4]  # on the path the decisions chose
    assert lines.count(f"start:{chosen[-1]}:{crash_at}") == 2  # the killed step ran again
    store = create_store(url)
    cp = await store.load(run_id)
    assert cp is not None and cp.state["path"] == decisions[:4]
    await store.aclose()


def test_the_routing_snippet_in_the_runtime_docs_runs_as_shown():
    import re

    page = (ROOT / "docs" / "runtime.md").read_text()
    section = page.split("## Dynamic routing", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out = subprocess.run(
        [sys.executable, "-c", snippet], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        "COMPLETED ['check', 'retry', 'check', 'retry', 'check', 'retry', 'check', 'done']"
    )


async def test_a_non_idempotent_routed_step_killed_inside_pauses_and_stays_queued(tmp_path):
    """The runner's side-effect guard and routing agree: after kill -9 the run pauses with
    the interrupted step still first in the queue; a retry decision runs it and goes on."""
    url = f"sqlite:///{tmp_path}/loop.db"
    log = tmp_path / "side_effects.log"
    run_id = new_id("nonidem")
    killed = run_loop(url, run_id, "start", log, 2, "nonidem")
    assert killed.returncode == -9, killed.stderr
    paused = run_loop(url, run_id, "resume", log, 0, "nonidem")
    assert paused.stdout.strip() == "PAUSED", paused.stderr
    store = create_store(url)
    cp = await store.load(run_id)
    chosen = [line.split(":")[2] for line in log.read_text().split() if line.startswith("decide:")]
    assert cp is not None and runtime_state(cp.state)["route"]["pending"][0] == chosen[1]
    assert runtime_state(cp.state)["failure_report"]["error_type"] == "Interrupted"
    done = run_loop(url, run_id, "resume", log, 0, "nonidem,retry")
    assert done.stdout.strip() == "COMPLETED", done.stderr
    cp = await store.load(run_id)
    assert cp is not None and cp.state["work_done"] == 4
    await store.aclose()
