"""Report summaries and injection levels.

Agents write markdown reports; the orchestrator's prompt cannot carry them all in full.
A :class:`ReportSummary` is read from the first lines of a report (verdict from the first
10, everything else from the first 50), cached by file mtime, and injected at level 1
(≤ 10 lines), 2 (≤ 50 lines) or 3 (full), downgraded to 1 when the prompt passes 80% of
its limit. Extraction never raises: a missing, empty or garbled report gives an
``UNKNOWN`` summary and a logged warning.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

logger = logging.getLogger(__name__)

__all__ = [
    "LEVEL_LINE_LIMITS",
    "ReportCache",
    "ReportSummary",
    "Verdict",
    "choose_level",
    "extract_details",
    "extract_report_summary",
    "extract_verdict_fast",
    "format_report",
    "read_report_summary",
    "validate_report",
]

Verdict = Literal["PASS", "FAIL", "BLOCKED", "UNKNOWN"]
VERDICT_LINES = 10
SUMMARY_LINES = 50
EVIDENCE_CHARS = 200
LEVEL_LINE_LIMITS: Mapping[int, int | None] = {1: 10, 2: 50, 3: None}

_ITERATION = re.compile(r"(?im)^[ \t>*#-]*(?:iteration|迭代|轮次)\s*[:：]?[ \t]*#?(\d+)")
_VERDICT = re.compile(
    r"(?i)(?:结论|verdict|result|status|结果)\s*\**[ \t]*[:：][ \t]*\**\s*(PASS|FAIL|BLOCKED)\b"
)
_BARE_VERDICT = re.compile(r"\b(PASS|FAIL|BLOCKED)\b")
_BLOCKERS = re.compile(r"(?im)^[ \t>*-]*(?:阻塞|blockers?)\s*\**[ \t]*[:：][ \t]*(.*)$")
_AGENT = re.compile(r"(?im)^[ \t>*-]*(?:agent|代理)[ \t]*[:：][ \t]*([A-Za-z_]+)")
_TIMESTAMP = re.compile(r"(?im)^[ \t>*-]*(?:timestamp|time|时间)[ \t]*[:：][ \t]*(\S.*)$")
_EVIDENCE = re.compile(r"(?im)^[ \t>*-]*(?:证据|evidence)\s*\**[ \t]*[:：][ \t]*(\S.*)$")
_HEADING = re.compile(r"^\s*#{1,6}\s*(.+?)\s*$")
_CHANGES_HEADINGS = ("改了哪里", "关键变更", "key changes", "changes", "变更")
_EVIDENCE_HEADINGS = ("证据", "evidence")
_BLOCKER_HEADINGS = ("阻塞", "blockers", "blocker")
_NONE_WORDS = frozenset({"", "无", "none", "n/a", "na", "-", "—", "nothing", "null"})
_SPLIT = re.compile(r"\s*[;；,，]\s*")
_FILE_AGENT = re.compile(r"report_([a-z_]+?)(?:_subloop)?(?:_\d+)?\.md$", re.I)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportSummary:
    """One agent's report of an iteration, summarised, plus where it came from."""

    iteration: int = 0
    agent: str = ""
    verdict: Verdict = "UNKNOWN"
    blockers: tuple[str, ...] = ()
    key_changes: tuple[str, ...] = ()
    evidence: str = ""
    """Under 200 characters."""
    timestamp: str = ""
    path: str = ""
    details: tuple[str, ...] = ()
    """What matters for this kind of report (see :func:`extract_details`), one per line."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "iteration": self.iteration,
            "agent": self.agent,
            "verdict": self.verdict,
            "blockers": list(self.blockers),
            "key_changes": list(self.key_changes),
            "evidence": self.evidence,
            "timestamp": self.timestamp,
            "path": self.path,
            "details": list(self.details),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReportSummary:
        verdict = str(data.get("verdict", "UNKNOWN")).upper()
        return cls(
            iteration=int(data.get("iteration") or 0),
            agent=str(data.get("agent", "")),
            verdict=verdict if verdict in ("PASS", "FAIL", "BLOCKED") else "UNKNOWN",  # type: ignore[arg-type]
            blockers=tuple(str(b) for b in data.get("blockers") or ()),
            key_changes=tuple(str(c) for c in data.get("key_changes") or ()),
            evidence=str(data.get("evidence", ""))[: EVIDENCE_CHARS - 1],
            timestamp=str(data.get("timestamp", "")),
            path=str(data.get("path", "")),
            details=tuple(str(d) for d in data.get("details") or ()),
        )


def _section(lines: list[str], names: tuple[str, ...]) -> list[str]:
    """Bullet/text lines under the first heading whose title contains one of ``names``."""
    body: list[str] = []
    inside = False
    for line in lines:
        heading = _HEADING.match(line)
        if heading:
            if inside:
                break
            title = heading.group(1).lower()
            inside = any(n in title for n in names)
            continue
        if inside and line.strip():
            body.append(re.sub(r"^\s*(?:[-*+]|\d+[.)])\s*", "", line).strip())
    return body


def _items(text: str) -> tuple[str, ...]:
    parts = [p.strip(" *`") for p in _SPLIT.split(text.strip())]
    return tuple(p for p in parts if p.lower() not in _NONE_WORDS)


def extract_report_summary(
    text: str,
    *,
    agent: str = "",
    iteration: int | None = None,
    timestamp: str = "",
    path: str = "",
) -> ReportSummary:
    """Summarise report text; the verdict only from the first 10 lines, the rest from 50."""
    lines = text.splitlines()[:SUMMARY_LINES]
    head = "\n".join(lines[:VERDICT_LINES])
    body = "\n".join(lines)
    verdict: Verdict = "UNKNOWN"
    if match := _VERDICT.search(head):
        verdict = cast(Verdict, match.group(1).upper())
    else:
        bare = {m.upper() for m in _BARE_VERDICT.findall(head)}
        if len(bare) == 1:
            verdict = cast(Verdict, bare.pop())
    if iteration is None:
        found = _ITERATION.search(body)
        iteration = int(found.group(1)) if found else 0
    if not agent and (found_agent := _AGENT.search(body)):
        agent = found_agent.group(1).upper()
    if not timestamp and (found_time := _TIMESTAMP.search(body)):
        timestamp = found_time.group(1).strip()
    blockers: tuple[str, ...] = ()
    if found_blockers := _BLOCKERS.search(body):
        blockers = _items(found_blockers.group(1))
    if not blockers:
        blockers = tuple(b for b in _section(lines, _BLOCKER_HEADINGS) if b.lower() not in _NONE_WORDS)
    key_changes = tuple(_section(lines, _CHANGES_HEADINGS)[:10])
    evidence = ""
    if found_evidence := _EVIDENCE.search(body):
        evidence = found_evidence.group(1).strip()
    else:
        evidence = " ".join(_section(lines, _EVIDENCE_HEADINGS))
    if len(evidence) >= EVIDENCE_CHARS:
        evidence = evidence[: EVIDENCE_CHARS - 2].rstrip() + "…"
    if verdict == "UNKNOWN":
        logger.warning("report %s: no PASS/FAIL/BLOCKED verdict in its first lines", path or "?")
    if not iteration:
        logger.warning("report %s: no 'iteration:' line; using iteration 0", path or "?")
    return ReportSummary(
        details=extract_details(lines, agent),
        iteration=iteration,
        agent=agent,
        verdict=verdict,
        blockers=blockers,
        key_changes=key_changes,
        evidence=evidence,
        timestamp=timestamp,
        path=path,
    )


_TEST_COMMAND = re.compile(r"(?im)^[ \t>*-]*(?:命令|测试命令|command)\s*[:：][ \t]*`?([^`\n]+)`?")
_SHELL_LINE = re.compile(r"(?m)^\s*\$\s+(\S.*)$")
_FAILED_CASE = re.compile(r"(?m)^(?:FAILED|ERROR)\s+(\S+)")
_COVERAGE = re.compile(r"(?im)(?:覆盖率|coverage)\s*[:：]?\s*(\d{1,3}(?:\.\d+)?%)|^TOTAL\s.*?(\d{1,3}%)\s*$")
_SELF_TEST = re.compile(r"(?im)^[ \t>*-]*(?:自测结果|自测|self[- ]test)\s*[:：][ \t]*(\S.*)$")
_VERIFICATION = re.compile(r"(?im)^[ \t>*-]*(?:验证方式|验证|verification)\s*[:：][ \t]*(\S.*)$")
_PRIORITY = re.compile(r"(?i)\bP[01]\b")
_FILE_LINE = re.compile(r"(?im)^[ \t>*-]*(?:修改文件|文件|files?(?: changed)?)\s*[:：][ \t]*(\S.*)$")


def _bullets(lines: list[str], names: tuple[str, ...]) -> list[str]:
    """The bullet items directly under the first heading titled with one of ``names``."""
    items: list[str] = []
    inside = False
    for line in lines:
        if heading := _HEADING.match(line):
            if inside:
                break
            inside = any(n in heading.group(1).lower() for n in names)
        elif inside and (m := re.match(r"^\s*(?:[-*+]|\d+[.)])\s+(.*\S)", line)):
            items.append(m.group(1).strip(" `"))
        elif inside and items and line.strip():
            break
    return items


def extract_details(lines: list[str], agent: str) -> tuple[str, ...]:
    """The per-type part of a summary: TEST → command, failing cases, coverage; DEV → files
    changed, self-test result; REVIEW → evidence sources, verification; FINISH_REVIEW →
    its P0/P1 issues. Pure and tolerant: what is not found is left out."""
    text = "\n".join(lines)
    kind = agent.upper()
    out: list[str] = []
    if kind == "TEST":
        if m := _TEST_COMMAND.search(text) or _SHELL_LINE.search(text):
            out.append(f"command: {m.group(1).strip()}")
        failing = _FAILED_CASE.findall(text) or _bullets(lines, ("失败用例", "failing", "failures"))
        if failing:
            out.append("failing: " + "; ".join(dict.fromkeys(failing[:8])))
        if m := _COVERAGE.search(text):
            out.append(f"coverage: {m.group(1) or m.group(2)}")
    elif kind == "DEV":
        files = _bullets(lines, ("修改文件", "files changed", "files"))
        if not files and (m := _FILE_LINE.search(text)):
            files = list(_items(m.group(1)))
        if files:
            out.append("files: " + "; ".join(files[:10]))
        if m := _SELF_TEST.search(text):
            out.append(f"self-test: {m.group(1).strip()}")
    elif kind == "REVIEW":
        sources = _bullets(lines, ("证据来源", "evidence sources", "sources"))
        if sources:
            out.append("evidence sources: " + "; ".join(sources[:5]))
        if m := _VERIFICATION.search(text):
            out.append(f"verification: {m.group(1).strip()}")
    elif kind == "FINISH_REVIEW":
        issues = [ln.strip(" -*\t") for ln in lines if _PRIORITY.search(ln) and not _HEADING.match(ln)]
        out.append("issues: " + ("; ".join(issues[:10]) if issues else "no P0/P1 issues"))
    return tuple(line[:300] for line in out)


def extract_verdict_fast(path: str | os.PathLike[str], max_lines: int = VERDICT_LINES) -> Verdict:
    """The verdict from the first ``max_lines`` lines only (the sub-loop's quick check):
    a report of thousands of lines costs ten line reads. Never raises."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = "".join(itertools.islice(f, max_lines))
    except OSError:
        return "UNKNOWN"
    if match := _VERDICT.search(head):
        return cast(Verdict, match.group(1).upper())
    bare = {m.upper() for m in _BARE_VERDICT.findall(head)}
    return cast(Verdict, bare.pop()) if len(bare) == 1 else "UNKNOWN"


def validate_report(text: str) -> list[str]:
    """What the standard header lacks: an ``iteration:`` line, a verdict line in the first
    10 lines (``结论：PASS|FAIL|BLOCKED`` or ``verdict: …``). Empty when the report is valid."""
    lines = text.splitlines()
    problems: list[str] = []
    if not _ITERATION.search("\n".join(lines[:SUMMARY_LINES])):
        problems.append("no 'iteration: N' line")
    if not _VERDICT.search("\n".join(lines[:VERDICT_LINES])):
        problems.append("no verdict line ('结论：PASS|FAIL|BLOCKED' or 'verdict: ...') in the first 10 lines")
    return problems


def _agent_from_path(path: Path) -> str:
    match = _FILE_AGENT.search(path.name)
    return match.group(1).upper() if match else ""


def read_report_summary(path: str | os.PathLike[str], *, agent: str = "") -> ReportSummary:
    """Read only the first 50 lines of a report file; never raises."""
    p = Path(path)
    try:
        with p.open(encoding="utf-8", errors="replace") as f:
            text = "".join(itertools.islice(f, SUMMARY_LINES))
        mtime = p.stat().st_mtime
    except OSError as exc:
        logger.warning("report %s unreadable (%s); using an empty summary", p, exc)
        return ReportSummary(agent=agent or _agent_from_path(p), path=str(p))
    stamp = datetime.fromtimestamp(mtime, UTC).isoformat(timespec="seconds")
    summary = extract_report_summary(text, agent=agent or _agent_from_path(p), path=str(p), timestamp="")
    if not summary.timestamp:
        summary = ReportSummary(**{**_fields(summary), "timestamp": stamp})
    return summary


def _fields(summary: ReportSummary) -> dict[str, Any]:
    return {name: getattr(summary, name) for name in ReportSummary.__dataclass_fields__}


class ReportCache:
    """Summaries keyed by path, re-read only when the file's mtime or size changes."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[int, int, ReportSummary]] = {}
        self.hits = 0
        self.misses = 0

    def get(self, path: str | os.PathLike[str], *, agent: str = "") -> ReportSummary:
        key = os.fspath(path)
        try:
            st = os.stat(key)
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = (-1, -1)
        entry = self._entries.get(key)
        if entry is not None and entry[:2] == stamp:
            self.hits += 1
            return entry[2]
        self.misses += 1
        summary = read_report_summary(key, agent=agent)
        self._entries[key] = (*stamp, summary)
        return summary

    def batch(self, paths: Iterable[str | os.PathLike[str]]) -> list[ReportSummary]:
        """Summaries of many reports (the orchestrator's start-up pass)."""
        return [self.get(p) for p in paths]

    def to_dict(self) -> dict[str, Any]:
        """JSON-like form, for ``.tether/cache/report_summaries.json``."""
        return {k: [m, s, v.to_dict()] for k, (m, s, v) in self._entries.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReportCache:
        cache = cls()
        for key, (mtime, size, summary) in data.items():
            cache._entries[key] = (int(mtime), int(size), ReportSummary.from_dict(summary))
        return cache


def choose_level(requested: int, *, prompt_tokens: int, limit: int, threshold: float = 0.8) -> int:
    """Level 1 once the prompt passes ``threshold`` of its limit, else what was asked."""
    if requested not in LEVEL_LINE_LIMITS:
        raise ValueError(f"report level must be 1, 2 or 3, not {requested}")
    if limit > 0 and prompt_tokens > threshold * limit and requested != 1:
        logger.info("prompt at %d/%d tokens: report level %d -> 1", prompt_tokens, limit, requested)
        return 1
    return requested


def format_report(summary: ReportSummary, level: int, *, full_text: str | None = None) -> str:
    """Render a report for injection: 1 ≤ 10 lines, 2 ≤ 50 lines, 3 the full text."""
    if level == 3 and full_text is not None:
        return full_text
    head = f"[{summary.agent or 'REPORT'} #{summary.iteration}] verdict: {summary.verdict}"
    lines = [head]
    blockers = list(summary.blockers) or ["none"]
    if level == 1:
        lines.append("blockers: " + "; ".join(blockers))
        if summary.key_changes:
            lines.append("key changes: " + "; ".join(summary.key_changes[:3]))
        lines += list(summary.details[:2])
    else:
        lines += ["blockers:", *(f"- {b}" for b in blockers)]
        if summary.key_changes:
            lines += ["key changes:", *(f"- {c}" for c in summary.key_changes)]
        lines += list(summary.details)
        if summary.evidence:
            lines.append(f"evidence: {summary.evidence}")
        if summary.path:
            lines.append(f"full report: {summary.path}")
    limit = LEVEL_LINE_LIMITS.get(level) or LEVEL_LINE_LIMITS[2]
    assert limit is not None
    clipped = [line[:300] for line in lines][:limit]
    return "\n".join(clipped)
