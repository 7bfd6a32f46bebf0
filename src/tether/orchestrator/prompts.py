"""Prompts: MAIN's (layered), each role's (with the other roles' recent reports), FINISH_CHECK's.

Sizes are bytes of UTF-8 text, as the limits are (a 200 KB MAIN prompt raises a warning).
MAIN gets reports at level 2 (summary and key parts) and drops to level 1 when the prompt
would pass 80% of its limit; FINISH_CHECK and the sub-loop get full reports (level 3).
Every prompt built logs ``orchestrator: prompt_size stage=… size=… level=…``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tether.context.history import build_history_window, parse_history
from tether.context.tokens import HeuristicTokenizer
from tether.orchestrator.blackboard import Blackboard
from tether.orchestrator.summaries import SummaryStore, inject_report
from tether.runtime.failures import DataError

__all__ = [
    "ROLE_INSTRUCTIONS",
    "FinishCheckPrompt",
    "PromptConfig",
    "PromptOverLimit",
    "build_finish_check_prompt",
    "build_main_prompt",
    "build_role_prompt",
    "plan_counts",
    "render_plan",
    "report_file",
    "report_ref",
]

logger = logging.getLogger("tether.orchestrator")

ROLE_INSTRUCTIONS: Mapping[str, str] = {
    "TEST": "You are TEST. Run the project's tests, report the command, failing cases and coverage.",
    "DEV": "You are DEV. Change the code to make the plan's tasks and the failing tests pass; list "
    "the files you changed and your self-test result.",
    "REVIEW": "You are REVIEW. Check the change against the task with evidence (sources, how you verified).",
    "FINISH_REVIEW": "You are FINISH_REVIEW. Decide whether the work is complete; list P0/P1 issues left.",
}
REPORT_HEADER = (
    "Start your report with these lines:\n"
    "iteration: {iteration}\n结论：PASS|FAIL|BLOCKED\n阻塞：<blockers, or 无>"
)
LOOKBACK_SOURCES: Mapping[str, tuple[str, ...]] = {
    "DEV": ("TEST",),
    "TEST": ("DEV",),
    "REVIEW": ("TEST", "DEV"),
    "FINISH_REVIEW": ("TEST", "DEV", "REVIEW"),
}
"""Whose recent reports each role sees (the seed: DEV ← TEST, TEST ← DEV, REVIEW ← both)."""
_TOKENS = HeuristicTokenizer()


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptConfig:
    max_prompt_bytes: int = 150_000
    """MAIN's prompt limit; past 80% of it reports drop to level 1."""
    level: int = 2
    """MAIN's default report level."""
    downgrade_ratio: float = 0.8
    lookback: int = 1
    """How many recent reports of each source a role sees."""
    history_last_n: int = 5
    history_min_recent: int = 2
    history_max_tokens: int = 4_000
    include_milestones: bool = True
    finish_check_max_bytes: int = 150_000


class PromptOverLimit(DataError):
    """MAIN's prompt does not fit its limit even at its smallest: the run pauses with a
    report saying what to shorten or which limit to raise."""


def render_plan(plan: Sequence[Mapping[str, Any]]) -> str:
    if not plan:
        return "(no tasks yet)"
    return "\n".join(f"- [{t.get('status', 'TODO')}] {t.get('id', '?')}: {t.get('title', '')}" for t in plan)


def plan_counts(plan: Sequence[Mapping[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for task in plan:
        status = str(task.get("status", "TODO"))
        counts[status] = counts.get(status, 0) + 1
    body = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no tasks"
    return f"{len(plan)} tasks: {body}"


def _reports(
    store: SummaryStore,
    latest: Mapping[str, Any],
    level: int,
    roles: Sequence[str] = ("TEST", "DEV", "REVIEW"),
) -> str:
    parts = []
    for role in roles:
        entry = latest.get(role)
        if not entry:
            parts.append(f"### {role}\n[{role}] no report yet")
            continue
        path = store.board.path(report_file(role, entry))
        text = inject_report(store, path, agent=role, iteration=int(entry["iteration"]), level=level)
        parts.append(f"### {role}\n{text}")
    return "\n\n".join(parts)


def history_text(board: Blackboard, config: PromptConfig, *, full: bool = False) -> str:
    raw = board.read("project_history.md")
    if full or not raw.strip():
        return raw.strip() or "(empty)"
    window = build_history_window(
        parse_history(raw),
        tokenizer=_TOKENS,
        max_tokens=config.history_max_tokens,
        last_n=config.history_last_n,
        min_recent=config.history_min_recent,
        include_milestones=config.include_milestones,
    )
    return window.text or "(empty)"


def build_main_prompt(
    store: SummaryStore,
    state: Mapping[str, Any],
    config: PromptConfig,
    *,
    level: int | None = None,
    replan: str = "",
) -> tuple[str, int]:
    """MAIN's prompt and the level used. ``level=None``: the configured level, dropped to 1
    past 80% of the limit, then the smallest history window (the last entry, no milestones)
    past the limit itself; still over it, :class:`PromptOverLimit` (a DATA failure: the run
    pauses with a report). Level 3 is full injection (every report whole, all history)."""
    requested = config.level if level is None else level
    history_config = config

    def build(lvl: int) -> str:
        iteration = int(state.get("iteration", 0))
        plan = state.get("dev_plan") or []
        sections = [
            f"# MAIN, iteration {iteration}",
            f"## Task\n{state.get('task', '')}",
            f"## dev_plan ({plan_counts(plan)})\n{render_plan(plan)}",
            f"## Latest reports (level {lvl})\n" + _reports(store, state.get("latest") or {}, lvl),
            "## Project history\n" + history_text(store.board, history_config, full=lvl == 3),
        ]
        if replan:
            sections.append(f"## RE-PLAN REQUIRED\n{replan}")
        sections.append(
            "## Decide\nChoose the next agent (TEST, DEV, REVIEW, FINISH or USER), give the reason "
            "and any dev_plan updates."
        )
        return "\n\n".join(sections)

    prompt = build(requested)
    used = requested
    limit = config.max_prompt_bytes
    if level is None and requested != 1 and len(prompt.encode()) > config.downgrade_ratio * limit:
        logger.info(
            "orchestrator: prompt over %d%% of %d bytes at level %d; using level 1",
            int(config.downgrade_ratio * 100),
            limit,
            requested,
        )
        prompt, used = build(1), 1
    if level is None and len(prompt.encode()) > limit:
        history_config = replace(
            config, history_last_n=1, history_min_recent=1, history_max_tokens=300, include_milestones=False
        )
        prompt, used = build(1), 1
        logger.warning("orchestrator: MAIN prompt over %d bytes: history cut to its last entry", limit)
        if len(prompt.encode()) > limit:
            raise PromptOverLimit(
                f"MAIN's prompt is {len(prompt.encode())} bytes, over its limit of {limit} even with "
                "every report at level 1 and the history cut to its last entry: the task or the "
                "dev_plan is too large. Raise the limit (TETHER_ORCH_MAX_PROMPT_BYTES or --max-prompt-bytes) "
                "or shorten the task and the dev_plan, then retry"
            )
    logger.info("orchestrator: prompt_size stage=MAIN size=%d level=%d", len(prompt.encode()), used)
    return prompt, used


def report_ref(agent: str, iteration: int, path: str) -> int | list[Any]:
    """A ``report_index`` item: the iteration alone for a report at its standard path
    (``reports/report_{agent}_{N}.md``), else ``[iteration, path]``: the index grows by one
    small item a stage instead of a path the checkpoints would each store again."""
    return iteration if path == f"reports/report_{agent.lower()}_{iteration}.md" else [iteration, path]


def report_file(agent: str, entry: Mapping[str, Any]) -> str:
    """The path of a ``latest`` entry's report: the entry names it only when it is not the
    standard ``reports/report_{agent}_{N}.md`` (a sub-loop round's, a kept final), so a
    stage's checkpoint holds the iteration that changed, not a path that follows from it."""
    path = entry.get("path")
    return str(path) if path else f"reports/report_{agent.lower()}_{int(entry.get('iteration') or 0)}.md"


def recent_reports(state: Mapping[str, Any], agent: str, lookback: int) -> list[tuple[int, str]]:
    """The last ``lookback`` (iteration, path) reports of ``agent`` (oldest first)."""
    index = (state.get("report_index") or {}).get(agent) or []
    if lookback <= 0:
        return []
    return [
        (int(x), f"reports/report_{agent.lower()}_{x}.md") if isinstance(x, int) else (int(x[0]), str(x[1]))
        for x in index[-lookback:]
    ]


def build_role_prompt(
    store: SummaryStore,
    state: Mapping[str, Any],
    config: PromptConfig,
    *,
    role: str,
    iteration: int,
    instruction: str = "",
    full: Sequence[tuple[str, int, str, int]] = (),
    summary_of: Sequence[tuple[str, int, str, int]] = (),
    subloop_round: int = 0,
) -> str:
    """A role's prompt: its instructions, the task, the plan, what it should know of others.

    Outside the sub-loop, the recent reports of the role's sources (``LOOKBACK_SOURCES``) at
    level 2. In the sub-loop, ``full`` reports (level 3) and ``summary_of`` (level 2).
    """
    level = 3 if subloop_round else 2
    parts = [
        ROLE_INSTRUCTIONS.get(role, f"You are {role}."),
        f"## Task\n{state.get('task', '')}",
        f"## dev_plan\n{render_plan(state.get('dev_plan') or [])}",
    ]
    context: list[str] = []
    if subloop_round:
        parts.append(
            f"## Fast-fix loop, round {subloop_round}\nThis is a TEST→DEV fast-fix loop: the goal is to "
            "make the failing tests below pass, nothing else."
        )
        for agent, it, path, _ in full:
            context.append(inject_report(store, store.board.path(path), agent=agent, iteration=it, level=3))
        for agent, it, path, sub in summary_of:
            context.append(
                inject_report(store, store.board.path(path), agent=agent, iteration=it, level=2, subloop=sub)
            )
    else:
        for source in LOOKBACK_SOURCES.get(role, ()):
            for it, path in recent_reports(state, source, config.lookback):
                context.append(
                    inject_report(store, store.board.path(path), agent=source, iteration=it, level=2)
                )
    if context:
        parts.append("## Recent related reports (for reference)\n" + "\n\n".join(context))
    if instruction:
        parts.append(f"## MAIN's instruction\n{instruction}")
    parts.append(REPORT_HEADER.format(iteration=iteration))
    prompt = "\n\n".join(parts)
    logger.info("orchestrator: prompt_size stage=%s size=%d level=%d", role, len(prompt.encode()), level)
    return prompt


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishCheckPrompt:
    text: str
    size: int
    downgraded: tuple[str, ...]
    """Reports reduced to their summary to fit (REVIEW first, then DEV)."""


def build_finish_check_prompt(
    store: SummaryStore, state: Mapping[str, Any], config: PromptConfig, *, acceptance: Sequence[str] = ()
) -> FinishCheckPrompt:
    """Full TEST/DEV/REVIEW/FINISH_REVIEW reports, plan counts, acceptance scope, stage changes.

    Over ``finish_check_max_bytes`` REVIEW drops to its summary, then DEV; TEST and
    FINISH_REVIEW always stay whole. The size and each downgrade are logged.
    """
    latest = state.get("latest") or {}
    levels = {"TEST": 3, "DEV": 3, "REVIEW": 3, "FINISH_REVIEW": 3}
    changes = state.get("stage_changes") or []

    def build() -> str:
        blocks = [
            f"# FINISH_CHECK, iteration {state.get('iteration', 0)}",
            f"## Task\n{state.get('task', '')}",
        ]
        for role in ("TEST", "DEV", "REVIEW", "FINISH_REVIEW"):
            blocks.append(
                f"## {role} report\n" + _reports(store, latest, levels[role], roles=(role,)).split("\n", 1)[1]
            )
        plan = state.get("dev_plan") or []
        blocks.append(f"## dev_plan\n{plan_counts(plan)}")
        scope = (
            f"{len(acceptance)} acceptance criteria: " + "; ".join(a[:80] for a in acceptance)
            if acceptance
            else "none given"
        )
        blocks.append(f"## Acceptance scope\n{scope}")
        blocks.append("## Stage changes\n" + ("\n".join(str(c) for c in changes) or "(none)"))
        blocks.append(
            "## Decide\nAnswer FINISH only if the work is complete and verified; else name the next agent."
        )
        return "\n\n".join(blocks)

    text = build()
    downgraded: list[str] = []
    for role in ("REVIEW", "DEV"):
        size = len(text.encode())
        if size <= config.finish_check_max_bytes:
            break
        levels[role] = 2
        text = build()
        downgraded.append(role)
        logger.info(
            "orchestrator: finish_check_downgrade report=%s size_before=%d size_after=%d",
            role,
            size,
            len(text.encode()),
        )
    size = len(text.encode())
    if size > config.finish_check_max_bytes:
        logger.warning(
            "orchestrator: FINISH_CHECK prompt still %d bytes (> %d) with TEST and FINISH_REVIEW whole",
            size,
            config.finish_check_max_bytes,
        )
    logger.info("orchestrator: prompt_size stage=FINISH_CHECK size=%d level=3", size)
    return FinishCheckPrompt(text=text, size=size, downgraded=tuple(downgraded))


def latest_entry(iteration: int, path: Path, board: Blackboard) -> dict[str, Any]:
    return {"iteration": iteration, "path": board.relative(path)}
