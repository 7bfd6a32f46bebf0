"""Report summaries for the orchestrator: extraction, a cache on disk, layered injection.

The cache lives at ``.tether/cache/report_summaries.json`` in the working directory, keyed
``{agent}_{iteration}`` (``{agent}_{iteration}_subloop_{k}`` for sub-loop rounds), and an
entry is reused only while its file's mtime and size are unchanged, so a restarted
orchestrator does not re-read reports it already summarised. Every extraction logs
``orchestrator: summary_extract agent=… level=… cache_hit=…``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from tether.context.reports import (
    ReportSummary,
    format_report,
    read_report_summary,
    validate_report,
)
from tether.orchestrator.blackboard import Blackboard

__all__ = ["SummaryStore", "inject_report"]

logger = logging.getLogger("tether.orchestrator")

CACHE_FILE = ".tether/cache/report_summaries.json"


class SummaryStore:
    """Summaries of one working directory's reports, cached on disk by mtime."""

    def __init__(self, board: Blackboard) -> None:
        self.board = board
        self.hits = 0
        self.misses = 0
        self.failures = 0
        """Reports whose standard header was incomplete (no iteration or no verdict)."""
        self.extractions = 0
        self._entries: dict[str, dict[str, Any]] = {}
        self._dirty = 0
        raw = board.read(CACHE_FILE)
        if raw:
            try:
                loaded = json.loads(raw)
                self._entries = loaded if isinstance(loaded, dict) else {}
            except ValueError:
                logger.warning("orchestrator: summary cache %s unreadable; starting empty", CACHE_FILE)

    @staticmethod
    def key(agent: str, iteration: int, subloop: int = 0) -> str:
        base = f"{agent.upper()}_{iteration}"
        return f"{base}_subloop_{subloop}" if subloop else base

    def get(
        self, path: Path, *, agent: str, iteration: int, subloop: int = 0, level: int = 2
    ) -> ReportSummary:
        """The summary of ``path`` (a cache hit when its mtime and size are unchanged)."""
        key = self.key(agent, iteration, subloop)
        self.extractions += 1
        try:
            st = os.stat(path)
            stamp = [st.st_mtime_ns, st.st_size]
        except OSError:
            stamp = [-1, -1]
        entry = self._entries.get(key)
        hit = entry is not None and entry.get("stamp") == stamp and entry.get("path") == str(path)
        if hit:
            assert entry is not None
            self.hits += 1
            summary = ReportSummary.from_dict(entry["summary"])
        else:
            self.misses += 1
            summary = read_report_summary(path, agent=agent.upper())
            if summary.verdict == "UNKNOWN" or not summary.iteration:
                self.failures += 1
            self._entries[key] = {"path": str(path), "stamp": stamp, "summary": summary.to_dict()}
            self._dirty += 1
        logger.info(
            "orchestrator: summary_extract agent=%s level=%d cache_hit=%s",
            agent.upper(),
            level,
            str(hit).lower(),
        )
        return summary

    def batch(self, items: list[tuple[Path, str, int]]) -> list[ReportSummary]:
        """Summaries of many reports at once (start-up and the benchmark)."""
        return [self.get(path, agent=agent, iteration=it) for path, agent, it in items]

    def flush(self, *, every: int = 1) -> None:
        """Persist the cache (atomically) once ``every`` new summaries are waiting: losing a
        few on a crash only costs re-reading those reports."""
        if self._dirty >= every:
            self.board.write(CACHE_FILE, json.dumps(self._entries, ensure_ascii=False))
            self._dirty = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 1.0


def inject_report(
    store: SummaryStore, path: Path, *, agent: str, iteration: int, level: int, subloop: int = 0
) -> str:
    """A report rendered for a prompt at ``level`` (1 summary, 2 summary + key parts, 3 full).

    A missing report gives a one-line placeholder; a summary that cannot be made falls
    back to level 1 of what could be read (extraction itself never raises).
    """
    if not path.is_file():
        return f"[{agent.upper()}] no report yet"
    if level == 3:
        text = path.read_text(encoding="utf-8", errors="replace")
        return f"[{agent.upper()} #{iteration} full report: {store.board.relative(path)}]\n{text.rstrip()}"
    summary = store.get(path, agent=agent, iteration=iteration, subloop=subloop, level=level)
    return format_report(summary, level)


def report_problems(text: str) -> list[str]:
    """The standard header's missing parts (logged as warnings by the caller)."""
    return validate_report(text)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
