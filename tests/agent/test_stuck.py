"""Stuck detection: each pattern found within its threshold by the pure detector and by a
real agent loop (scripted model, real commands, real store), never on healthy runs; the
escalation reminder -> re-plan -> pause with a report; retry and takeover after it; and a
subscriber that raises never failing a step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.agent.stuck_runs import execute, healthy_run, stuck_run
from tether.agent import AgentLoop, CallbackInteractionHandler, LoopConfig
from tether.agent.stuck import Observation, StuckConfig, error_signature, observe, outcome_key
from tether.agent.watch import AgentStuck, todo_done
from tether.errors import ConfigError
from tether.models import ScriptedModel
from tether.runtime.control import amend_pending_report
from tether.runtime.failures import FailureKind
from tether.runtime.report import Decision
from tether.state import RunStatus
from tether.stores import open_store
from tether.tools import LocalSession


@pytest.fixture
async def store(tmp_path):
    async with open_store(f"sqlite:///{tmp_path}/stuck.db") as s:
        yield s


def obs(i: int, action: str, outcome: str = "ok", error: str | None = None, progress: int = 0) -> Observation:
    return Observation(
        iteration=i, action=action, outcome=outcome_key(outcome), error=error, progress=progress, shown=action
    )


def feed(observations: list[Observation], config: StuckConfig | None = None) -> list[tuple[int, str, str]]:
    state: dict[str, Any] | None = None
    found = []
    for i, o in enumerate(observations):
        state, event = observe(state, observations[: i + 1], config or StuckConfig())
        if event is not None:
            found.append((o.iteration, event.pattern, event.level))
    return found


# == the pure detector ==========================================================
def test_repeat_is_found_at_the_third_time_and_escalates():
    found = feed([obs(i, "execute:cat x", "no such file", "exit 1: no such file") for i in range(1, 6)])
    assert found == [(3, "repeat", "remind"), (4, "repeat", "replan"), (5, "repeat", "pause")]


def test_polling_needs_more_repeats_than_a_plain_command():
    poll = [
        obs(i, "execute:sleep 1; curl -f localhost:8000", "refused", "exit 7: refused") for i in range(1, 6)
    ]
    assert feed(poll) == []
    assert feed([*poll, obs(6, "execute:sleep 1; curl -f localhost:8000", "refused", "exit 7: refused")])[
        0
    ] == (
        6,
        "repeat",
        "remind",
    )


def test_cycles_of_period_two_and_three():
    two = [obs(i, f"execute:{'ab'[i % 2]}", f"out {'ab'[i % 2]}") for i in range(1, 7)]
    assert feed(two)[0] == (6, "cycle", "remind")
    three = [obs(i, f"execute:{'abc'[i % 3]}", f"out {'abc'[i % 3]}") for i in range(1, 10)]
    assert feed(three)[0] == (9, "cycle", "remind")
    # the same commands with outcomes that change: work being done, not a cycle
    moving = [obs(i, f"execute:{'ab'[i % 2]}", f"out {i}") for i in range(1, 10)]
    assert feed(moving) == []


def test_same_error_after_different_fixes():
    err = error_signature(1, "ModuleNotFoundError: No module named 'yaml'")
    seq = []
    for k in range(3):
        seq.append(obs(2 * k + 1, f"execute:fix {k}", f"fixed {k}"))
        seq.append(obs(2 * k + 2, "execute:python app.py", f"trace {k}", err))
    assert feed(seq) == [(6, "same_error", "remind")]
    # two failures then a fix that works: healthy
    assert feed(seq[:4] + [obs(5, "execute:fix 9", "fixed 9"), obs(6, "execute:python app.py", "ok")]) == []


def test_error_signatures_mask_numbers_and_ids():
    a = error_signature(1, "Error: port 8001 in use (pid 4242) at 2026-01-01T10:00:00Z")
    b = error_signature(1, "Error: port 8002 in use (pid 990) at 2026-01-02T11:00:01Z")
    assert a == b and a.startswith("exit 1:")
    assert error_signature(1, "x") != error_signature(2, "x")
    assert outcome_key("took 0.51s at 10:00:01") == outcome_key("took 0.73s at 10:00:09")


def test_no_progress_and_todo_progress_resets_it():
    seq = [obs(i, f"execute:{'abcd'[i % 4]}", f"o {'abcd'[i % 4]}") for i in range(1, 14)]
    assert feed(seq)[0] == (10, "no_progress", "remind")
    with_todo = [
        obs(o.iteration, o.action, f"o {'abcd'[o.iteration % 4]}", progress=o.iteration // 3) for o in seq
    ]
    assert feed(with_todo) == []
    assert todo_done({"todo": [{"status": "done"}, {"status": "pending"}, {"status": "COMPLETED"}]}) == 2


def test_strikes_are_forgotten_after_clean_iterations():
    seq = [obs(i, "execute:same", "same") for i in range(1, 4)]
    seq += [obs(i, f"execute:new {i}", f"new {i}") for i in range(4, 7)]
    seq += [obs(i, "execute:other", "other") for i in range(7, 10)]
    assert feed(seq) == [(3, "repeat", "remind"), (9, "repeat", "remind")]


def test_thresholds_are_checked_and_can_be_turned_off():
    with pytest.raises(ConfigError, match="repeat"):
        StuckConfig(repeat=1)
    off = StuckConfig(repeat=0, cycle_repeats=0, same_error=0, no_progress=0)
    assert feed([obs(i, "execute:x", "x", "exit 1: x") for i in range(1, 12)], off) == []
    assert feed([obs(i, "execute:x", "x") for i in range(1, 12)], StuckConfig(enabled=False)) == []


# == a real loop ================================================================
async def run_script(store, tmp_path: Path, script, *, run_id: str, **kw: Any):
    events: list[Any] = []
    model = ScriptedModel(script)
    async with LocalSession(cwd=tmp_path) as session:
        loop = AgentLoop(
            model,
            session,
            store,
            config=LoopConfig(max_iterations=len(script) + 2),
            on_event=events.append,
            **kw,
        )
        result = await loop.start(run_id, "get the service running")
    return result, events, model


@pytest.mark.parametrize(
    ("pattern", "first", "kind"),
    [
        ("repeat", 5, "repeat"),
        ("cycle2", 8, "cycle"),
        ("cycle3", 11, "cycle"),
        ("same_error", 8, "same_error"),
        ("no_progress", 12, "no_progress"),
    ],
)
async def test_each_pattern_in_a_real_loop(store, tmp_path, pattern, first, kind):
    """After 2 healthy iterations, each pattern is found where its threshold says, escalates,
    and pauses the run with a LOGIC failure report naming what repeated."""
    result, events, model = await run_script(store, tmp_path, stuck_run(pattern), run_id=f"stuck-{pattern}")
    found = [e.detail for e in events if e.kind == "stuck_detected"]
    assert found[0]["iteration"] == first and found[0]["pattern"] == kind, found
    assert [f["level"] for f in found] == ["remind", "replan", "pause"]
    assert result.status is RunStatus.PAUSED
    report = result.report
    assert report is not None and report.kind is FailureKind.LOGIC and report.error_type == "AgentStuck"
    assert found[0]["evidence"]["actions"][0] in report.error or kind == "no_progress"
    assert [s.decision for s in report.suggestions] == [Decision.RETRY, Decision.TAKEOVER, Decision.ABORT]
    # the model was told: the reminder was in its prompt after the first detection
    prompt = json.dumps(model.calls[first])  # the call after the detecting iteration
    assert "You seem stuck" in prompt
    # the detection is in the run's event log, with its evidence
    log = result.state["_tether"]["event_log"]
    assert any(e["kind"] == "stuck_detected" and e["detail"]["pattern"] == kind for e in log)


async def test_healthy_runs_are_never_flagged(store, tmp_path):
    """20 healthy runs of 16 iterations (failures fixed, polling, edit/test loops, an error
    seen twice): no detection, every run completes."""
    flagged = []
    for seed in range(20):
        work = tmp_path / f"w{seed}"
        work.mkdir()
        result, events, _ = await run_script(store, work, healthy_run(seed), run_id=f"healthy-{seed}")
        assert result.status is RunStatus.COMPLETED, (seed, result.report and result.report.render())
        flagged += [(seed, e.detail["pattern"]) for e in events if e.kind == "stuck_detected"]
    assert flagged == []


async def test_retry_after_the_pause_continues_and_a_new_loop_pauses_again(store, tmp_path):
    script = stuck_run("repeat", length=7)
    result, _, _ = await run_script(store, tmp_path, script, run_id="stuck-retry")
    assert result.status is RunStatus.PAUSED
    # a person lets it try again: the model now does something else and finishes
    model = ScriptedModel([execute("echo a different approach"), {"action": "done", "message": "fixed"}])
    async with LocalSession(cwd=tmp_path) as session:
        loop = AgentLoop(model, session, store, config=LoopConfig(max_iterations=20))
        resumed = await loop.runner().resume("stuck-retry", decision="retry")
    assert resumed.status is RunStatus.COMPLETED, resumed.report and resumed.report.render()
    assert "A person reviewed why you were stuck" in json.dumps(model.calls[0])
    kinds = [e["kind"] for e in resumed.state["_tether"]["event_log"]]
    assert "decision" in kinds


async def test_takeover_after_the_pause_puts_the_note_in_the_prompt(store, tmp_path):
    result, _, _ = await run_script(store, tmp_path, stuck_run("repeat", length=7), run_id="stuck-takeover")
    assert result.status is RunStatus.PAUSED
    assert await amend_pending_report(store, "stuck-takeover", note="I created missing.conf by hand")
    model = ScriptedModel([execute("cat missing.conf || true"), {"action": "done", "message": "done"}])
    async with LocalSession(cwd=tmp_path) as session:
        loop = AgentLoop(model, session, store, config=LoopConfig(max_iterations=20))
        resumed = await loop.runner().resume("stuck-takeover", decision="takeover")
    assert resumed.status is RunStatus.COMPLETED
    assert "I created missing.conf by hand" in json.dumps(model.calls[0])
    history = resumed.state["execution_history"]
    assert any(
        h.get("status") == "takeover" and h.get("note") == "I created missing.conf by hand" for h in history
    )
    log = resumed.state["_tether"]["event_log"]
    assert any(
        e["kind"] == "takeover" and e["detail"]["note"] == "I created missing.conf by hand" for e in log
    )


async def test_second_strike_asks_the_user_when_someone_can_answer(store, tmp_path):
    asked: list[str] = []

    def answer(request):
        asked.append(request.question)
        return "use the packaged config in ./conf instead"

    handler = CallbackInteractionHandler(answer)
    script = [*stuck_run("repeat", length=6), execute("echo ok"), {"action": "done", "message": "ok"}]
    model = ScriptedModel(script)
    async with LocalSession(cwd=tmp_path) as session:
        loop = AgentLoop(model, session, store, config=LoopConfig(max_iterations=20), interaction=handler)
        result = await loop.start("stuck-ask", "start it")
    assert len(asked) == 1 and "seems stuck" in asked[0]
    assert "use the packaged config" in json.dumps(model.calls[-1])
    assert result.status is RunStatus.COMPLETED  # it changed course after the answer


async def test_a_subscriber_that_raises_never_fails_a_step(store, tmp_path):
    def broken(event):
        if event.kind in ("command", "command_result", "stuck_detected", "step_started"):
            raise RuntimeError("progress view crashed")

    model = ScriptedModel([execute("echo hi"), {"action": "done", "message": "ok"}])
    async with LocalSession(cwd=tmp_path) as session:
        loop = AgentLoop(model, session, store, on_event=broken)
        result = await loop.start("broken-subscriber", "say hi")
    assert result.status is RunStatus.COMPLETED


def test_agent_stuck_is_a_logic_failure_with_suggestions():
    exc = AgentStuck({"message": "stuck", "pattern": "repeat"})
    from tether.runtime.failures import classify

    assert classify(exc) is FailureKind.LOGIC and str(exc) == "stuck"


# == failure reports for every FAILED end, and errors classified by type first ==
async def test_malformed_replies_until_the_end_leave_a_failure_report(store, tmp_path):
    """A server answering ``content: null`` (an empty reply) every time: the run ends FAILED
    with a DATA report saying the model's replies were invalid."""
    model = ScriptedModel(["", "", ""])
    async with LocalSession(cwd=tmp_path) as session:
        loop = AgentLoop(model, session, store, config=LoopConfig(max_iterations=10))
        result = await loop.start("malformed", "deploy it")
    assert result.status is RunStatus.FAILED
    assert result.report is not None and result.report.kind is FailureKind.DATA
    assert "invalid replies" in result.report.error and result.report.options == []
    stored = result.state["_tether"]["failure_report"]
    assert stored["error_type"] == "GaveUp" and "invalid replies" in stored["error"]


async def test_the_iteration_limit_leaves_a_logic_failure_report(store, tmp_path):
    model = ScriptedModel([execute(f"echo step {i}") for i in range(3)])
    async with LocalSession(cwd=tmp_path) as session:
        loop = AgentLoop(model, session, store, config=LoopConfig(max_iterations=3))
        result = await loop.start("limit", "deploy it")
    assert result.status is RunStatus.FAILED
    assert result.report is not None and result.report.kind is FailureKind.LOGIC
    assert "stopped after 3 iterations" in result.report.render()


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (ValueError("field 'port' not allowed by the schema"), FailureKind.DATA),
        (KeyError("access forbidden"), FailureKind.DATA),
        (RuntimeError("403 Forbidden"), FailureKind.PERMISSION),
        (RuntimeError("not allowed to write /etc"), FailureKind.PERMISSION),
        (PermissionError("denied"), FailureKind.PERMISSION),
    ],
)
def test_errors_are_classified_by_type_first_and_words_last(exc, kind):
    from tether.runtime.failures import classify

    assert classify(exc) is kind
