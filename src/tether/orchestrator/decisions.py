"""MAIN's stages: MAIN deciding the next agent, FINISH_CHECK, the user's answer, and the
iteration limit; plus the stall check and the plan update (pure).

Like the role stages, each takes a :class:`~tether.orchestrator.stage.StageInput` (and MAIN's
policy) and returns a :class:`~tether.orchestrator.stage.StageOutcome`.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Mapping
from typing import Any

from tether.orchestrator.history import add_history, add_line, delta, history_of, mark_milestone
from tether.orchestrator.prompts import (
    build_finish_check_prompt,
    build_main_prompt,
    plan_counts,
    render_plan,
)
from tether.orchestrator.roles import MainDecision, MainPolicy, MainRequest
from tether.orchestrator.stage import StageInput, StageOutcome, last_stage, render_board, verdicts_of

__all__ = [
    "STAGE_STEPS",
    "apply_plan",
    "finish_check_stage",
    "main_stage",
    "stall_check",
    "stall_of",
    "user_stage",
]

logger = logging.getLogger("tether.orchestrator")

STAGE_STEPS = {"TEST": "test", "DEV": "dev", "REVIEW": "review", "FINISH": "finish_review", "USER": "user"}


async def _decide(main: MainPolicy, request: MainRequest) -> tuple[MainDecision, int | None, float]:
    """MAIN's decision, the replies it read for it (None: a policy that does not count them)
    and the seconds it took."""
    before = getattr(main, "replies", None)
    began = time.perf_counter()
    decision = await main.decide(request)
    waited = time.perf_counter() - began
    now = getattr(main, "replies", None)
    spent = now - before if isinstance(now, int) and isinstance(before, int) else None
    return decision, spent, waited


def _replies(state: Mapping[str, Any], spent: int | None) -> int:
    """MAIN replies the run has read, this decision's included (1 for a policy that does
    not count them): a resumed scripted MAIN skips these."""
    return int(state.get("main_replies") or 0) + (1 if spent is None else spent)


async def main_stage(inp: StageInput, main: MainPolicy) -> StageOutcome:
    """MAIN reads the plan, the latest reports and the history, and picks the next agent."""
    cfg = inp.config
    iteration = inp.iteration + 1
    update: dict[str, Any] = {"iteration": iteration}
    if iteration > cfg.max_iterations:
        return give_up(inp, iteration, update)
    state = {**inp.state, "iteration": iteration}
    render_board(inp, {}, state=state)  # the history as the stages since the last MAIN left it
    replan, stall = stall_check(state, cfg.stall_rounds)
    update["stall"] = stall
    prompt, level = build_main_prompt(inp.summaries, state, cfg.prompts, replan=replan)
    size = len(prompt.encode())
    request = MainRequest(
        mode="main",
        iteration=iteration,
        prompt=prompt,
        task=str(state["task"]),
        verdicts=verdicts_of(state),
        dev_plan=list(state.get("dev_plan") or []),
        replan=bool(replan),
        last_stage=last_stage(state),
    )
    decision, spent, waited = await _decide(main, request)
    plan, changed = apply_plan(state.get("dev_plan") or [], decision.dev_plan)
    title, milestone = decision.next_agent, ""
    if decision.next_agent == "FINISH":
        attempts = int(state.get("finish_attempts", 0)) + 1
        update["finish_attempts"] = attempts
        milestone = f"FINISH attempt #{attempts}"
    elif changed > 5:
        milestone = f"dev_plan: {changed} task statuses changed"
    lines = [
        f"next_agent: {decision.next_agent}",
        f"reason: {decision.reason}",
        f"dev_plan: {plan_counts(plan)}",
    ]
    if replan:
        lines.append(f"re-plan requested: {replan}")
    history = delta(state, add_history(history_of(state), iteration, title, lines, milestone))
    update |= {
        "main_replies": _replies(state, spent),
        "dev_plan": plan,
        "history": history,
        "stage_changes": [f"iteration {iteration}: MAIN -> {decision.next_agent} ({decision.reason[:120]})"],
    }
    if plan == (state.get("dev_plan") or []) and "dev_plan" in state:
        del update["dev_plan"]  # unchanged: rewriting it every round only stores it again
    if decision.next_agent == "USER":
        update["pending_question"] = decision.question or decision.reason
    render_board(inp, update, history=False, state=state)
    event = {"stage": "MAIN", "iteration": iteration, "next": decision.next_agent}
    return StageOutcome(
        update=update,
        goto=(STAGE_STEPS[decision.next_agent], decision.reason[:200]),
        events=[{**event, "prompt_size": size, "level": level}],
        counters={},
        main_prompt=(size, level),
        waited=waited,
    )


def stall_check(state: Mapping[str, Any], stall_rounds: int) -> tuple[str, list[Any]]:
    """A re-plan instruction when the plan made no progress for ``stall_rounds`` MAIN
    rounds, or the same failing TEST verdict repeated that often; and the new stall state
    (see :func:`stall_of`)."""
    stall = stall_of(state.get("stall"))
    done = sum(1 for t in state.get("dev_plan") or [] if t.get("status") == "DONE")
    first = int(state.get("iteration", 1)) <= 1  # the first round has nothing to compare with
    progressed = done > int(stall.get("done", 0))
    stall["rounds"] = 0 if progressed or first else int(stall.get("rounds", 0)) + 1
    stall["done"] = max(done, int(stall.get("done", 0)))
    test = (state.get("latest") or {}).get("TEST") or {}
    failing = verdicts_of(state).get("TEST") == "FAIL"
    sig = failure_sig("|".join(sorted(test.get("blockers") or ["?"]))) if failing else 0
    repeats = int(stall.get("repeats", 0))
    stall["repeats"] = (repeats + 1 if sig == stall.get("fail_sig") else 1) if sig else 0
    stall["fail_sig"] = sig
    reasons = []
    if stall["rounds"] >= stall_rounds:
        reasons.append(f"no dev_plan progress for {stall['rounds']} MAIN rounds")
    if int(stall.get("repeats", 0)) >= stall_rounds:
        reasons.append(f"the same TEST failure {stall['repeats']} times in a row")
    if not reasons:
        return "", _stall_value(stall)
    stall["rounds"], stall["repeats"] = 0, 0
    text = (
        "; ".join(reasons) + ". Re-plan: question the approach, split or re-order the tasks, "
        "update dev_plan, and choose a different next step than before."
    )
    logger.warning("orchestrator: stall iter=%s %s", state.get("iteration"), "; ".join(reasons))
    return text, _stall_value(stall)


STALL_FIELDS = ("done", "fail_sig", "rounds", "repeats")
"""The stall state as the run keeps it, ``[done, fail_sig, rounds, repeats]``: a short list
rewritten each round rather than the fields by name; ``fail_sig`` is the
:func:`failure_sig` of the failing TEST's blockers (0: TEST is not failing), not the
blockers again."""


def failure_sig(blockers: str) -> int:
    """A failure's signature: enough to tell the same failure again (a run from before
    kept the text itself, which this turns into the same number)."""
    return zlib.crc32(blockers.encode()) if blockers else 0


def stall_of(value: Any) -> dict[str, Any]:
    """The stall state as a dict, from the list the run keeps (or the dict of a run from before)."""
    if isinstance(value, list) and len(value) == len(STALL_FIELDS):
        return dict(zip(STALL_FIELDS, value, strict=True))
    stall = dict(value) if isinstance(value, Mapping) else {}
    if isinstance(stall.get("fail_sig"), str):
        stall["fail_sig"] = failure_sig(stall["fail_sig"])
    return stall


def _stall_value(stall: Mapping[str, Any]) -> list[Any]:
    return [
        int(stall.get("done", 0)),
        int(stall.get("fail_sig") or 0),
        int(stall["rounds"]),
        int(stall["repeats"]),
    ]


def give_up(inp: StageInput, iteration: int, update: dict[str, Any]) -> StageOutcome:
    """The iteration limit: a final report on the blackboard, the run FAILED."""
    state, limit = inp.state, inp.config.max_iterations
    plan = state.get("dev_plan") or []
    text = "\n".join(
        [
            "# Orchestrator stopped: iteration limit",
            f"iteration: {iteration - 1}",
            "结论：BLOCKED",
            f"阻塞：reached max_iterations={limit} without FINISH",
            "",
            f"## Task\n{state.get('task', '')}",
            f"## dev_plan ({plan_counts(plan)})\n{render_plan(plan)}",
            "## Latest verdicts\n" + "\n".join(f"- {k}: {v}" for k, v in verdicts_of(state).items()),
            "## Stage changes\n" + "\n".join(state.get("stage_changes") or []),
        ]
    )
    path = inp.board.write("reports/report_orchestrator.md", text + "\n")
    render_board(inp, {}, final=True)
    logger.warning("orchestrator: iteration limit %d reached; run FAILED", limit)
    rel = inp.board.relative(path)
    return StageOutcome(
        update={**update, "iteration": iteration - 1, "final_report": rel},
        finish=("FAILED", f"iteration limit {limit} reached; see {rel}"),
    )


async def finish_check_stage(inp: StageInput, main: MainPolicy) -> StageOutcome:
    """FINISH_CHECK: MAIN reads the full reports and accepts FINISH or sends the run back."""
    state = inp.state
    fc = build_finish_check_prompt(inp.summaries, state, inp.config.prompts, acceptance=inp.config.acceptance)
    request = MainRequest(
        mode="finish_check",
        iteration=inp.iteration,
        prompt=fc.text,
        task=str(state["task"]),
        verdicts=verdicts_of(state),
        dev_plan=list(state.get("dev_plan") or []),
        last_stage="FINISH_REVIEW",
    )
    decision, spent, waited = await _decide(main, request)
    accepted = decision.next_agent == "FINISH"
    line = (
        f"FINISH_CHECK: {'accepted' if accepted else 'rejected -> ' + decision.next_agent} "
        f"({decision.reason}); prompt {fc.size} bytes"
        + (f", downgraded: {', '.join(fc.downgraded)}" if fc.downgraded else "")
    )
    update: dict[str, Any] = {
        "history": delta(state, add_line(history_of(state), line)),
        "finish_check": {"size": fc.size, "downgraded": list(fc.downgraded), "accepted": accepted},
        "stage_changes": [f"iteration {inp.iteration}: FINISH_CHECK -> {decision.next_agent}"],
        "main_replies": _replies(state, spent),
    }
    render_board(inp, update, final=accepted)
    out = StageOutcome(
        update=update,
        events=[
            {
                "stage": "FINISH_CHECK",
                "iteration": inp.iteration,
                "accepted": accepted,
                "prompt_size": fc.size,
                "level": 3,
            }
        ],
        waited=waited,
    )
    if accepted:
        update["final_output"] = decision.reason or "finished"
        out.finish = ("COMPLETED", decision.reason or "finished")
    else:
        out.goto = ("main", f"FINISH rejected: {decision.reason[:150]}")
    return out


async def user_stage(inp: StageInput) -> StageOutcome:
    """Pause for the user's answer to MAIN's question; with the answer, back to MAIN."""
    state = inp.state
    answer = state.get("user_answer")
    question = str(state.get("pending_question") or "MAIN needs a decision")
    if answer is None:
        return StageOutcome(
            update={},
            goto=("user", "waiting for the user's answer"),
            pause=f"question for the user: {question}",
            events=[{"stage": "USER", "iteration": inp.iteration, "question": question}],
        )
    history = mark_milestone(history_of(state), inp.iteration, f"user decision - {str(answer)[:80]}")
    update: dict[str, Any] = {
        "history": delta(state, add_line(history, f"user answered: {answer}")),
        "user_answer": None,
        "pending_question": None,
        "user_decisions": [*(state.get("user_decisions") or []), {"question": question, "answer": answer}],
    }
    render_board(inp, update)
    return StageOutcome(update=update, goto=("main", "user answered"))


# == plan (pure) ================================================================
def apply_plan(
    plan: list[dict[str, Any]], updates: list[dict[str, Any]] | None
) -> tuple[list[dict[str, Any]], int]:
    """The plan with ``updates`` applied by task id, and how many task statuses changed."""
    if not updates:
        return [dict(t) for t in plan], 0
    by_id = {str(t.get("id")): dict(t) for t in plan}
    order = [str(t.get("id")) for t in plan]
    changed = 0
    for u in updates:
        tid = str(u.get("id") or f"t{len(order) + 1}")
        old = by_id.get(tid)
        status = str(u.get("status", old.get("status", "TODO") if old else "TODO")).upper()
        if old is None:
            order.append(tid)
            by_id[tid] = {"id": tid, "title": str(u.get("title", "")), "status": status}
            changed += 1
            continue
        if old.get("status") != status:
            changed += 1
        by_id[tid] = {**old, **{k: v for k, v in u.items() if k in ("title",)}, "status": status}
    return [by_id[t] for t in order], changed
