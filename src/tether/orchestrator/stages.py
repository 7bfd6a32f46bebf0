"""The role stages and the TEST→DEV fast-fix sub-loop, as stage functions.

A role stage builds the role's prompt, runs its runner, writes the report to the
blackboard (``reports/report_{agent}_{N}.md`` and the latest ``report_{agent}.md``), and
routes back to MAIN, or, for a TEST FAIL whose blockers are code problems, into the
sub-loop: ``subloop_dev`` and ``subloop_test`` alternate (at most 3 rounds, 600 s in all,
never nested), each round checkpointed, its state mirrored to ``.tether/subloop_state.json``
and the directory locked by ``.tether/subloop.lock``. Any error inside returns to MAIN.

Each function takes a :class:`~tether.orchestrator.stage.StageInput` and the runner of its
role, and returns a :class:`~tether.orchestrator.stage.StageOutcome`; the engine commits it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any

from tether.context.reports import extract_verdict_fast, validate_report
from tether.errors import SubLoopLocked
from tether.orchestrator.blackboard import Blackboard
from tether.orchestrator.config import OrchestratorConfig
from tether.orchestrator.effects import taken_over
from tether.orchestrator.history import add_line, delta, history_of, mark_milestone
from tether.orchestrator.prompts import report_file, report_ref
from tether.orchestrator.roles import RoleOutput, RoleRunner
from tether.orchestrator.stage import (
    REPORTS_KEPT,
    StageInput,
    StageOutcome,
    combine,
    last_stage,
    overlay,
    render_board,
    report_record,
    role_prompt,
    role_request,
    run_role,
    verdicts_of,
)
from tether.orchestrator.subloop import STATE_FILE, SubLoopLock, SubLoopResult, SubLoopState, should_enter

__all__ = ["exit_subloop", "record_report", "role_stage", "subloop_dev", "subloop_test"]

logger = logging.getLogger("tether.orchestrator")


# == regular stages =============================================================


async def role_stage(inp: StageInput, role: str, runner: RoleRunner) -> StageOutcome:
    """TEST, DEV, REVIEW or FINISH_REVIEW: run the role, record its report, route on."""
    holder = SubLoopLock(inp.board, owner=inp.run_id).held_by_other()
    if holder is not None:
        raise SubLoopLocked(
            f"{role} cannot run while another run's sub-loop holds {inp.board.root}",
            holder=str(holder.get("owner")),
        )
    iteration = inp.iteration
    limit = inp.config.stage_timeout
    path = inp.board.report_path(role, iteration)
    waited = 0.0
    if inp.takeover is not None:  # a person (or a probe) settled a DEV a crash cut
        output = taken_over(path, role, iteration, inp.takeover)
    else:
        request = role_request(inp, role, role_prompt(inp, role), path, timeout=limit)
        output, waited = await run_role(runner, request, limit)
    update, entry = record_report(inp, role, output, path)
    verdict = entry["verdict"]
    counters = {"test_runs": 1} if role == "TEST" else {}
    nxt, reason = (
        ("finish_check", "FINISH_REVIEW done") if role == "FINISH_REVIEW" else ("main", f"{role} {verdict}")
    )
    if role == "TEST" and inp.config.subloop and verdict == "FAIL":
        enter, why = should_enter(verdict, entry["blockers"])
        if enter:
            try:
                update |= enter_subloop(inp, update, entry, why)
                nxt, reason = "subloop_dev", why
                counters["subloop_entries"] = 1
            except SubLoopLocked as exc:  # an error on entry: back to MAIN, as any sub-loop error
                logger.warning("orchestrator: sub-loop not entered: %s", exc)
                update["history"] = _line(inp, update, f"sub-loop not entered: {exc}")
    render_board(inp, update, history=False)
    return StageOutcome(
        update=update,
        goto=(nxt, reason),
        events=[{"stage": role, "iteration": iteration, "verdict": verdict}],
        counters=counters,
        waited=waited,
    )


def record_report(
    inp: StageInput, role: str, output: RoleOutput, path: Path, *, subloop: int = 0
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Write the report (standard header checked, defaults added); the state's update and
    the role's new ``latest`` entry."""
    board, state, iteration = inp.board, inp.state, inp.iteration
    text = output.report
    if output.report_file:
        text = board.path(output.report_file).read_text(encoding="utf-8", errors="replace")
    problems = validate_report(text)
    for problem in problems:
        logger.warning(
            "orchestrator: %s report of iteration %d: %s; using defaults", role, iteration, problem
        )
    if any("iteration" in p for p in problems):
        text = f"iteration: {iteration}\n{text}"
    board.write(board.relative(path), text)
    if not subloop:
        board.write(f"reports/report_{role.lower()}.md", text)
    summary = inp.summaries.get(path, agent=role, iteration=iteration, subloop=subloop, level=2)
    rel = board.relative(path)
    entry: dict[str, Any] = {
        "iteration": iteration,
        "verdict": summary.verdict,
        "blockers": list(summary.blockers),
        "subloop": subloop,
    }
    if isinstance(report_ref(role, iteration, rel), list):  # not at its standard path
        entry["path"] = rel
    blockers = "; ".join(summary.blockers) or "none"
    line = (
        f"{role}{f' (sub-loop round {subloop})' if subloop else ''}: {summary.verdict}, blockers: {blockers}"
    )
    history = add_line(history_of(state), line)
    previous = verdicts_of(state).get("TEST")
    extra: dict[str, Any] = {}
    first_pass = role == "TEST" and summary.verdict == "PASS" and previous == "FAIL"
    if first_pass and not state.get("first_pass_marked"):
        history = mark_milestone(history, iteration, "first TEST PASS after a FAIL")
        extra["first_pass_marked"] = True
    if not subloop:
        extra["report_index"] = [role, report_ref(role, iteration, rel)]
    update = {
        "latest": report_record(role, entry),
        "history": delta(state, history),
        "stage_changes": [
            f"iteration {iteration}: {role}{f' #{subloop}' if subloop else ''} -> {summary.verdict}"
        ],
        **extra,
    }
    return update, entry


# == the sub-loop ===============================================================


def enter_subloop(
    inp: StageInput, update: dict[str, Any], test: dict[str, Any], reason: str
) -> dict[str, Any]:
    state = inp.state
    if (state.get("subloop") or {}).get("active"):  # never nested
        raise SubLoopLocked("a sub-loop is already active in this run", holder=inp.run_id)
    lock = SubLoopLock(inp.board, owner=inp.run_id, stale_after=inp.config.subloop_timeout)
    if lock.acquire():
        logger.warning("orchestrator: took over a stale sub-loop lock in %s", inp.board.root)
    st = SubLoopState(
        active=True,
        iteration=inp.iteration,
        sub_iteration=1,
        test_report=report_file("TEST", test),
        dev_report=report_file("DEV", dev) if (dev := (state.get("latest") or {}).get("DEV")) else "",
        entry_reason=reason,
        started_at=time.time(),
        stage="dev",
    )
    mirror(inp.board, st)
    logger.info("orchestrator: subloop_enter iter=%d reason=%s", inp.iteration, reason)
    return {"subloop": st.to_dict(), "history": _line(inp, update, f"sub-loop entered: {reason}")}


def _ref(entry: dict[str, Any] | None, role: str) -> list[tuple[str, int, str, int]]:
    """A report reference (role, iteration, path, sub-loop round) from a ``latest`` entry."""
    if not entry:
        return []
    return [(role, int(entry["iteration"]), report_file(role, entry), int(entry.get("subloop", 0)))]


async def subloop_dev(inp: StageInput, runner: RoleRunner) -> StageOutcome:
    """Round k's DEV: the full TEST report and the last DEV summary."""
    st = SubLoopState.from_dict(inp.state.get("subloop"))
    if (left := time_left(inp.config, st)) <= 0:
        return exit_subloop(inp, st, success=False, condition="timeout")
    k = st.sub_iteration
    latest = inp.state.get("latest") or {}
    path = inp.board.report_path("DEV", subloop=k)
    waited = 0.0
    try:
        SubLoopLock(inp.board, owner=inp.run_id, stale_after=inp.config.subloop_timeout).acquire()
        if inp.takeover is not None:
            output = taken_over(path, "DEV", st.iteration, inp.takeover)
        else:
            prompt = role_prompt(
                inp,
                "DEV",
                full=_ref(latest.get("TEST"), "TEST"),
                summary_of=_ref(latest.get("DEV"), "DEV"),
                subloop_round=k,
            )
            request = role_request(inp, "DEV", prompt, path, subloop_round=k, timeout=left)
            output, waited = await run_role(runner, request, left)
        update, entry = record_report(inp, "DEV", output, path, subloop=k)
    except Exception as exc:  # any error in the sub-loop returns to MAIN
        out = exit_subloop(inp, st, success=False, condition=_failure("DEV", k, exc))
        out.waited = waited
        return out
    st.dev_report, st.stage = inp.board.relative(path), "test"
    mirror(inp.board, st)
    update["subloop"] = st.to_dict()
    render_board(inp, update, history=False)
    return StageOutcome(
        update=update,
        goto=("subloop_test", f"sub-loop round {k}: DEV done"),
        events=[
            {
                "stage": "SUBLOOP_DEV",
                "iteration": st.iteration,
                "subloop_round": k,
                "verdict": entry["verdict"],
            }
        ],
        waited=waited,
    )


async def subloop_test(inp: StageInput, runner: RoleRunner) -> StageOutcome:
    """Round k's TEST: the full DEV report and the last TEST summary; PASS, the round
    limit or the timeout end the sub-loop, else round k + 1."""
    st = SubLoopState.from_dict(inp.state.get("subloop"))
    if (left := time_left(inp.config, st)) <= 0:
        return exit_subloop(inp, st, success=False, condition="timeout")
    k = st.sub_iteration
    latest = inp.state.get("latest") or {}
    path = inp.board.report_path("TEST", subloop=k)
    waited = 0.0
    try:
        prompt = role_prompt(
            inp,
            "TEST",
            full=_ref(latest.get("DEV"), "DEV"),
            summary_of=_ref(latest.get("TEST"), "TEST"),
            subloop_round=k,
        )
        request = role_request(inp, "TEST", prompt, path, subloop_round=k, timeout=left)
        output, waited = await run_role(runner, request, left)
        update, _ = record_report(inp, "TEST", output, path, subloop=k)
    except Exception as exc:
        out = exit_subloop(inp, st, success=False, condition=_failure("TEST", k, exc))
        out.waited = waited
        return out
    st.test_report = inp.board.relative(path)
    verdict = extract_verdict_fast(path)
    event = {"stage": "SUBLOOP_TEST", "iteration": st.iteration, "subloop_round": k, "verdict": verdict}
    end = ""
    if verdict == "PASS":
        end = "TEST PASS"
    elif k >= inp.config.subloop_max_iterations:
        end = f"{k} rounds without a PASS"
    elif time_left(inp.config, st) <= 0:
        end = "timeout"
    if end:  # the exit reads this round's report from the state as the update leaves it
        view = dataclasses.replace(inp, state=overlay(inp.state, update))
        out = exit_subloop(view, st, success=verdict == "PASS", condition=end, reported=True)
        out.update = combine(inp.state, update, out.update)
        out.events.insert(0, event)
        out.waited = waited
        return out
    st.sub_iteration, st.stage = k + 1, "dev"
    mirror(inp.board, st)
    render_board(inp, update, history=False)
    return StageOutcome(
        update={**update, "subloop": st.to_dict()},
        goto=("subloop_dev", f"sub-loop round {k}: TEST {verdict}"),
        events=[event],
        waited=waited,
    )


def exit_subloop(
    inp: StageInput, st: SubLoopState, *, success: bool, condition: str, reported: bool = False
) -> StageOutcome:
    """Copy the final reports to the standard paths, note the result in the history,
    remove the round files, the state file and the lock; back to MAIN. ``reported``: the
    step exiting wrote its report (else the last stage stays the one before it)."""
    board, state = inp.board, inp.state
    k = st.sub_iteration
    latest = dict(state.get("latest") or {})
    index = dict(state.get("report_index") or {})
    for role, rel in (("DEV", st.dev_report), ("TEST", st.test_report)):
        if "_subloop_" not in rel or not board.exists(rel):
            continue
        kept = f"reports/report_{role.lower()}_{st.iteration}_final.md"
        board.copy(rel, kept)
        board.copy(rel, f"reports/report_{role.lower()}.md")
        latest[role] = {**(latest.get(role) or {}), "path": kept, "subloop": 0}
        index[role] = [*(index.get(role) or []), report_ref(role, st.iteration, kept)][-REPORTS_KEPT:]
    verdict = verdicts_of(state).get("TEST", "UNKNOWN")
    result = SubLoopResult(success=success, final_test_verdict=str(verdict), iterations=k)
    line = f"sub-loop: {k} round(s), success={str(success).lower()}, exit: {condition}, final TEST: {verdict}"
    for n in range(1, k + 1):
        board.remove(f"reports/report_dev_subloop_{n}.md")
        board.remove(f"reports/report_test_subloop_{n}.md")
    board.remove(STATE_FILE)
    SubLoopLock(board, owner=inp.run_id).release()
    st.active, st.exit_condition = False, condition
    logger.info(
        "orchestrator: subloop_exit iter=%d sub_iter=%d success=%s", st.iteration, k, str(success).lower()
    )
    update: dict[str, Any] = {
        "latest": latest,
        "report_index": index,
        "history": _line(inp, {}, line),
        "subloop": st.to_dict(),
        "subloop_result": result.to_dict(),
        "stage_changes": [f"iteration {st.iteration}: sub-loop exit ({condition})"],
    }
    if not reported:  # what the runtime's history says ran last is not the stage to name
        update["last_stage"] = last_stage(state)
    render_board(inp, update)
    event = {
        "stage": "SUBLOOP_EXIT",
        "iteration": st.iteration,
        "subloop_round": k,
        "success": success,
        "condition": condition,
    }
    return StageOutcome(
        update=update,
        goto=("main", f"sub-loop exit: {condition}"),
        events=[event],
        counters={"subloop_successes": int(success)},
    )


def time_left(config: OrchestratorConfig, st: SubLoopState) -> float:
    return config.subloop_timeout - (time.time() - st.started_at)


def mirror(board: Blackboard, st: SubLoopState) -> None:
    board.write(STATE_FILE, json.dumps(st.to_dict(), ensure_ascii=False, indent=1))


def _failure(role: str, k: int, exc: Exception) -> str:
    if isinstance(exc, TimeoutError):
        return f"timeout in {role} round {k}"
    return f"error in {role} round {k}: {exc!r}"[:300]


def _line(inp: StageInput, update: dict[str, Any], line: str) -> Any:
    """The history entries changed by the pending ``update`` plus ``line``."""
    return delta(inp.state, add_line(history_of(inp.state, update), line))
