"""DEV edits the project: its stages are not idempotent, and a crash inside one is settled
here before anything runs it again.

The ``dev`` and ``subloop_dev`` steps are declared ``idempotent=False``: when the process
dies inside one, resuming pauses the run instead of running DEV a second time over its own
half-made edits. :func:`settle` then probes: DEV's report for that round already on the
blackboard (with the round's ``iteration:`` header) proves the role finished and only the
bookkeeping was cut, so the run continues from that report (a ``takeover`` noted as the
probe's finding). Otherwise the report is amended to name the role and its command, and a
person decides: retry (run DEV again), takeover (they finished the edit by hand; their
note becomes DEV's report) or abort.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tether.orchestrator.blackboard import Blackboard
from tether.orchestrator.roles import RoleOutput, RoleRunner
from tether.runtime import RunResult
from tether.runtime.control import amend_pending_report
from tether.runtime.report import Decision, FailureReport, Suggestion
from tether.state import RunStatus
from tether.state.reserved import runtime_get
from tether.stores.base import CheckpointStore

__all__ = ["SIDE_EFFECT_STEPS", "settle", "taken_over"]

SIDE_EFFECT_STEPS = ("dev", "subloop_dev")


def _for_iteration(path: Path, iteration: int) -> bool:
    try:
        head = path.read_text(encoding="utf-8", errors="replace")[:400]
    except OSError:
        return False
    return f"iteration: {iteration}" in head


def taken_over(path: Path, role: str, iteration: int, note: str) -> RoleOutput:
    """The role's output after a takeover: its report when it was written before the crash,
    else the person's note as the report."""
    if path.exists() and _for_iteration(path, iteration):
        return RoleOutput(report=path.read_text(encoding="utf-8", errors="replace"))
    return RoleOutput(report=f"iteration: {iteration}\n\n# {role} done by a person\n\n{note}\n")


def _where(board: Blackboard, state: dict[str, Any], step: str) -> tuple[str, Path, int]:
    iteration = int(state.get("iteration") or 0)
    if step == "subloop_dev":
        k = int((state.get("subloop") or {}).get("sub_iteration") or 1)
        return f"DEV (sub-loop round {k})", board.report_path("DEV", subloop=k), iteration
    return "DEV", board.report_path("DEV", iteration), iteration


Resume = Callable[[str, str], Awaitable[RunResult]]
"""Continue a run with a decision: ``resume(run_id, decision)``."""


async def settle(
    result: RunResult, *, board: Blackboard, store: CheckpointStore, dev: RoleRunner | None, resume: Resume
) -> RunResult:
    """Probe a DEV stage a crash cut (see the module docstring); ``dev`` is DEV's runner
    (its command names what may have run), ``resume`` continues the run once settled."""
    report = result.report
    if result.status is not RunStatus.PAUSED or report is None:
        return result
    if report.item_id not in SIDE_EFFECT_STEPS or report.error_type != "Interrupted":
        return result
    label, path, iteration = _where(board, result.state, report.item_id)
    if path.exists() and _for_iteration(path, iteration):
        note = f"{label}'s report {board.relative(path)} was on the blackboard: the role had finished"
        await amend_pending_report(store, result.run_id, note=note)
        return await resume(result.run_id, str(Decision.TAKEOVER))
    command = getattr(dev, "command", None) or type(dev).__name__
    fields = {
        "error_type": "SideEffectCut",
        "error": f"{label} of iteration {iteration} may have partly edited the project: the process "
        f"stopped while it ran (`{command}`), and no report of that round is on the blackboard",
        "item_name": f"{label}: `{command}`",
        "options": [str(Decision.RETRY), str(Decision.TAKEOVER), str(Decision.ABORT)],
        "suggestions": [
            Suggestion(label=f"run {label} again over its partial edits", decision=Decision.RETRY).to_dict(),
            Suggestion(
                label="you finished the edit by hand: continue to TEST",
                decision=Decision.TAKEOVER,
                detail="your note becomes DEV's report for this round",
            ).to_dict(),
            Suggestion(label="stop the run", decision=Decision.ABORT).to_dict(),
        ],
    }
    if not await amend_pending_report(store, result.run_id, **fields):
        return result
    cp = await store.load(result.run_id)
    if cp is None:
        return result
    data = runtime_get(cp.state, "pending_decision")
    amended = FailureReport.from_dict(data) if isinstance(data, dict) else report
    return RunResult(
        run_id=result.run_id, status=result.status, version=cp.version, state=cp.state, report=amended
    )
