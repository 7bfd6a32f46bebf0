"""The role stages and the TEST→DEV fast-fix sub-loop, as steps of the orchestrator.

A role stage builds the role's prompt, runs its runner, writes the report to the
blackboard (``reports/report_{agent}_{N}.md`` and the latest ``report_{agent}.md``), and
routes back to MAIN, or, for a TEST FAIL whose blockers are code problems, into the
sub-loop: ``subloop_dev`` and ``subloop_test`` alternate (at most 3 rounds, 600 s in all,
never nested), each round checkpointed, its state mirrored to ``.tether/subloop_state.json``
and the directory locked by ``.tether/subloop.lock``. Any error inside returns to MAIN.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.context.reports import extract_verdict_fast, validate_report
from tether.errors import SubLoopLocked
from tether.orchestrator.effects import taken_over
from tether.orchestrator.history import add_line, delta, history_of, mark_milestone
from tether.orchestrator.roles import RoleOutput
from tether.orchestrator.subloop import STATE_FILE, SubLoopLock, SubLoopResult, SubLoopState, should_enter
from tether.runtime.report import takeover_note

if TYPE_CHECKING:
    from tether.orchestrator.engine import Orchestrator
    from tether.runtime import StepContext

__all__ = ["run_stage", "subloop_dev_step", "subloop_test_step"]

logger = logging.getLogger("tether.orchestrator")


# == regular stages =============================================================


async def run_stage(orch: Orchestrator, sc: StepContext, role: str) -> dict[str, Any]:
    began = time.perf_counter()
    lock = SubLoopLock(orch.board, owner=sc.run_id)
    if (holder := lock.held_by_other()) is not None:
        raise SubLoopLocked(
            f"{role} cannot run while another run's sub-loop holds {orch.board.root}",
            holder=str(holder.get("owner")),
        )
    iteration = int(sc.get("iteration", 0))
    prompt = orch.role_prompt(sc, role)
    path = orch.board.report_path(role, iteration)
    request = orch.role_request(sc, role, prompt, path, timeout=orch.config.stage_timeout)
    spent = time.perf_counter() - began
    note = takeover_note(sc.state, sc.step.id)  # a person (or a probe) settled a DEV a crash cut
    if note is not None:
        output = taken_over(path, role, iteration, note)
    else:
        output = await _run_role(orch, request, orch.config.stage_timeout)
    began = time.perf_counter()
    update = record_report(orch, sc, role, output, path)
    verdict = update["verdicts"][role]
    state = sc.state.snapshot()
    add = {"test_runs": 1} if role == "TEST" else {}
    nxt, reason = (
        ("finish_check", "FINISH_REVIEW done") if role == "FINISH_REVIEW" else ("main", f"{role} {verdict}")
    )
    if role == "TEST" and orch.config.subloop and verdict == "FAIL":
        enter, why = should_enter(verdict, update["latest"]["TEST"]["blockers"])
        if enter:
            try:
                update |= enter_subloop(orch, sc, iteration, update, why)
                nxt, reason = "subloop_dev", why
                add["subloop_entries"] = 1
            except SubLoopLocked as exc:  # an error on entry: back to MAIN, as any sub-loop error
                logger.warning("orchestrator: sub-loop not entered: %s", exc)
                update["history"] = _line(update, state, f"sub-loop not entered: {exc}")
    update["metrics"] = orch.metrics_update({**state, **update}, **add)
    orch.render(update, state, history=False)
    sc.goto(nxt, reason=reason)
    orch.emit(sc, role, iteration=iteration, verdict=verdict)
    orch.warn(sc, update["metrics"], update)
    orch.overhead.append(spent + time.perf_counter() - began)
    return update


def record_report(
    orch: Orchestrator, sc: StepContext, role: str, output: RoleOutput, path: Path, *, subloop: int = 0
) -> dict[str, Any]:
    """Write the report (standard header checked, defaults added), update the state."""
    iteration = int(sc.get("iteration", 0))
    text = output.report
    if output.report_file:
        text = orch.board.path(output.report_file).read_text(encoding="utf-8", errors="replace")
    problems = validate_report(text)
    for problem in problems:
        logger.warning(
            "orchestrator: %s report of iteration %d: %s; using defaults", role, iteration, problem
        )
    if any("iteration" in p for p in problems):
        text = f"iteration: {iteration}\n{text}"
    orch.board.write(orch.board.relative(path), text)
    if not subloop:
        orch.board.write(f"reports/report_{role.lower()}.md", text)
    summary = orch.summaries().get(path, agent=role, iteration=iteration, subloop=subloop, level=2)
    state = sc.state.snapshot()
    entry = {
        "iteration": iteration,
        "path": orch.board.relative(path),
        "verdict": summary.verdict,
        "blockers": list(summary.blockers),
        "subloop": subloop,
    }
    latest = {role: entry}  # "latest", "report_index", "verdicts": merged per role
    index = {}
    if not subloop:
        index[role] = [*((state.get("report_index") or {}).get(role) or []), [iteration, entry["path"]]][-20:]
    verdicts = {role: summary.verdict}
    blockers = "; ".join(summary.blockers) or "none"
    line = (
        f"{role}{f' (sub-loop round {subloop})' if subloop else ''}: {summary.verdict}, blockers: {blockers}"
    )
    history = add_line(history_of(state), line)
    previous = (state.get("verdicts") or {}).get("TEST")
    latest_extra: dict[str, Any] = {}
    first_pass = role == "TEST" and summary.verdict == "PASS" and previous == "FAIL"
    if first_pass and not state.get("first_pass_marked"):
        history = mark_milestone(history, iteration, "first TEST PASS after a FAIL")
        latest_extra["first_pass_marked"] = True
    return {
        "latest": latest,
        "report_index": index,
        "verdicts": verdicts,
        "history": delta(state, history),
        "last_stage": role,
        "stage_changes": [
            f"iteration {iteration}: {role}{f' #{subloop}' if subloop else ''} -> {summary.verdict}"
        ],
        **latest_extra,
    }


# == the sub-loop ===============================================================


def enter_subloop(
    orch: Orchestrator, sc: StepContext, iteration: int, update: dict[str, Any], reason: str
) -> dict[str, Any]:
    state = sc.state.snapshot()
    if (state.get("subloop") or {}).get("active"):  # never nested
        raise SubLoopLocked("a sub-loop is already active in this run", holder=sc.run_id)
    took_over = SubLoopLock(orch.board, owner=sc.run_id, stale_after=orch.config.subloop_timeout).acquire()
    if took_over:
        logger.warning("orchestrator: took over a stale sub-loop lock in %s", orch.board.root)
    st = SubLoopState(
        active=True,
        iteration=iteration,
        sub_iteration=1,
        test_report=update["latest"]["TEST"]["path"],
        dev_report=((state.get("latest") or {}).get("DEV") or {}).get("path", ""),
        entry_reason=reason,
        started_at=time.time(),
        stage="dev",
    )
    mirror(orch, st)
    logger.info("orchestrator: subloop_enter iter=%d reason=%s", iteration, reason)
    history = _line(update, state, f"sub-loop entered: {reason}")
    return {"subloop": st.to_dict(), "history": history}


def _ref(entry: dict[str, Any] | None, role: str) -> list[tuple[str, int, str, int]]:
    """A report reference (role, iteration, path, sub-loop round) from a ``latest`` entry."""
    if not entry:
        return []
    return [(role, int(entry["iteration"]), str(entry["path"]), int(entry.get("subloop", 0)))]


async def subloop_dev_step(orch: Orchestrator, sc: StepContext) -> dict[str, Any]:
    """Round k's DEV: the full TEST report and the last DEV summary."""
    st = SubLoopState.from_dict(sc.get("subloop"))
    if (left := time_left(orch, st)) <= 0:
        return exit_subloop(orch, sc, st, success=False, condition="timeout")
    k = st.sub_iteration
    latest = sc.get("latest") or {}
    try:
        SubLoopLock(orch.board, owner=sc.run_id, stale_after=orch.config.subloop_timeout).acquire()
        prompt = orch.role_prompt(
            sc,
            "DEV",
            full=_ref(latest.get("TEST"), "TEST"),
            summary_of=_ref(latest.get("DEV"), "DEV"),
            subloop_round=k,
        )
        path = orch.board.report_path("DEV", subloop=k)
        request = orch.role_request(sc, "DEV", prompt, path, subloop_round=k, timeout=left)
        note = takeover_note(sc.state, sc.step.id)
        output = taken_over(path, "DEV", st.iteration, note) if note is not None else None
        update = record_report(
            orch, sc, "DEV", output or await _run_role(orch, request, left), path, subloop=k
        )
    except Exception as exc:  # any error in the sub-loop returns to MAIN
        return exit_subloop(orch, sc, st, success=False, condition=_failure("DEV", k, exc))
    st.dev_report, st.stage = orch.board.relative(path), "test"
    mirror(orch, st)
    update["subloop"] = st.to_dict()
    orch.render(update, sc.state.snapshot(), history=False)
    sc.goto("subloop_test", reason=f"sub-loop round {k}: DEV done")
    orch.emit(sc, "SUBLOOP_DEV", iteration=st.iteration, subloop_round=k, verdict=update["verdicts"]["DEV"])
    return update


async def subloop_test_step(orch: Orchestrator, sc: StepContext) -> dict[str, Any]:
    """Round k's TEST: the full DEV report and the last TEST summary; PASS, the round
    limit or the timeout end the sub-loop, else round k + 1."""
    st = SubLoopState.from_dict(sc.get("subloop"))
    if (left := time_left(orch, st)) <= 0:
        return exit_subloop(orch, sc, st, success=False, condition="timeout")
    k = st.sub_iteration
    latest = sc.get("latest") or {}
    try:
        prompt = orch.role_prompt(
            sc,
            "TEST",
            full=_ref(latest.get("DEV"), "DEV"),
            summary_of=_ref(latest.get("TEST"), "TEST"),
            subloop_round=k,
        )
        path = orch.board.report_path("TEST", subloop=k)
        request = orch.role_request(sc, "TEST", prompt, path, subloop_round=k, timeout=left)
        update = record_report(orch, sc, "TEST", await _run_role(orch, request, left), path, subloop=k)
    except Exception as exc:
        return exit_subloop(orch, sc, st, success=False, condition=_failure("TEST", k, exc))
    st.test_report = orch.board.relative(path)
    verdict = extract_verdict_fast(path)
    sc.state.merge(update)  # the exit below reads this round's report from the state
    orch.emit(sc, "SUBLOOP_TEST", iteration=st.iteration, subloop_round=k, verdict=verdict)
    if verdict == "PASS":
        return exit_subloop(orch, sc, st, success=True, condition="TEST PASS")
    if k >= orch.config.subloop_max_iterations:
        return exit_subloop(orch, sc, st, success=False, condition=f"{k} rounds without a PASS")
    if time_left(orch, st) <= 0:
        return exit_subloop(orch, sc, st, success=False, condition="timeout")
    st.sub_iteration, st.stage = k + 1, "dev"
    mirror(orch, st)
    orch.render({}, sc.state.snapshot(), history=False)
    sc.goto("subloop_dev", reason=f"sub-loop round {k}: TEST {verdict}")
    return {"subloop": st.to_dict()}


def exit_subloop(
    orch: Orchestrator, sc: StepContext, st: SubLoopState, *, success: bool, condition: str
) -> dict[str, Any]:
    """Copy the final reports to the standard paths, note the result in the history,
    remove the round files, the state file and the lock; back to MAIN."""
    state = sc.state.snapshot()
    k = st.sub_iteration
    latest = dict(state.get("latest") or {})
    index = dict(state.get("report_index") or {})
    for role, rel in (("DEV", st.dev_report), ("TEST", st.test_report)):
        if "_subloop_" not in rel or not orch.board.exists(rel):
            continue
        kept = f"reports/report_{role.lower()}_{st.iteration}_final.md"
        orch.board.copy(rel, kept)
        orch.board.copy(rel, f"reports/report_{role.lower()}.md")
        latest[role] = {**(latest.get(role) or {}), "path": kept, "subloop": 0}
        index[role] = [*(index.get(role) or []), [st.iteration, kept]][-20:]
    verdict = (state.get("verdicts") or {}).get("TEST", "UNKNOWN")
    result = SubLoopResult(success=success, final_test_verdict=str(verdict), iterations=k)
    line = f"sub-loop: {k} round(s), success={str(success).lower()}, exit: {condition}, final TEST: {verdict}"
    history = _line({}, state, line)
    for n in range(1, k + 1):
        orch.board.remove(f"reports/report_dev_subloop_{n}.md")
        orch.board.remove(f"reports/report_test_subloop_{n}.md")
    orch.board.remove(STATE_FILE)
    SubLoopLock(orch.board, owner=sc.run_id).release()
    st.active, st.exit_condition = False, condition
    logger.info(
        "orchestrator: subloop_exit iter=%d sub_iter=%d success=%s", st.iteration, k, str(success).lower()
    )
    update: dict[str, Any] = {
        "latest": latest,
        "report_index": index,
        "history": history,
        "subloop": st.to_dict(),
        "subloop_result": result.to_dict(),
        "stage_changes": [f"iteration {st.iteration}: sub-loop exit ({condition})"],
    }
    update["metrics"] = orch.metrics_update({**state, **update}, subloop_successes=int(success))
    orch.render(update, state)
    sc.goto("main", reason=f"sub-loop exit: {condition}")
    orch.emit(
        sc, "SUBLOOP_EXIT", iteration=st.iteration, subloop_round=k, success=success, condition=condition
    )
    orch.warn(sc, update["metrics"], update)
    return update


def time_left(orch: Orchestrator, st: SubLoopState) -> float:
    return orch.config.subloop_timeout - (time.time() - st.started_at)


def mirror(orch: Orchestrator, st: SubLoopState) -> None:
    orch.board.write(STATE_FILE, json.dumps(st.to_dict(), ensure_ascii=False, indent=1))


async def _run_role(orch: Orchestrator, request: Any, limit: float | None) -> RoleOutput:
    runner = orch.runner_for(request.role)
    if limit is None:
        return await runner.run(request)
    try:
        return await asyncio.wait_for(runner.run(request), limit)
    except TimeoutError as exc:
        raise TimeoutError(f"{request.role} took longer than {limit:.0f}s") from exc


def _failure(role: str, k: int, exc: Exception) -> str:
    if isinstance(exc, TimeoutError):
        return f"timeout in {role} round {k}"
    return f"error in {role} round {k}: {exc!r}"[:300]


def _line(update: dict[str, Any], state: dict[str, Any], line: str) -> dict[str, Any]:
    """The history entries changed by the pending ``update`` plus ``line``."""
    return delta(state, add_line(history_of(state, update), line))
