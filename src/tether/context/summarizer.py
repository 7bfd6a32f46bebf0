"""Summarisers: turn what a compressor folds away into the summary template.

The structured summariser is deterministic and offline, so compression is reproducible
and testable; the LLM summariser writes better prose when a model is configured and falls
back to the structured text whenever the model fails or answers nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

logger = logging.getLogger(__name__)

__all__ = [
    "AsyncSummarizer",
    "CompletionModel",
    "LLMSummarizer",
    "StructuredSummarizer",
    "SummaryRequest",
    "Summarizer",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryRequest:
    """Everything a summary is written from; the six sections of the template."""

    level: str
    """``standard``, ``deep``, ``phase`` or ``checkpoint``."""
    goal: str = ""
    completed: tuple[str, ...] = ()
    """One line per folded operation, oldest first (earlier summaries' lines included)."""
    current_state: tuple[str, ...] = ()
    decisions: tuple[str, ...] = ()
    next_step: str = ""
    constraints: tuple[str, ...] = ()
    configurations: tuple[str, ...] = ()
    """``KEY=value`` of configurations whose operation lines were re-summarised away."""
    history: tuple[str, ...] = ()
    """Paragraphs that re-summarise the oldest completed work, oldest first."""
    resolved: tuple[str, ...] = ()
    """Errors met and what fixed them, oldest first."""
    phases: tuple[str, ...] = ()
    """One line per finished phase (``✅ phase 1 – title (5 items): artefacts …``)."""
    in_progress: str = ""
    """The phase under way (``⏳ phase 3 – title: in progress``)."""
    superseded: tuple[str, ...] = ()
    """Decisions replaced and constraints lifted since: ``old → now: new``, one line each."""
    details: tuple[str, ...] = ()
    """Full text of what is being folded; only a model-backed summariser reads it."""
    phase: str | None = None
    status: str = ""
    artifacts: tuple[str, ...] = ()
    archive_id: str | None = None
    """Where the full pre-compression history was written, if anywhere."""
    max_tokens: int = 0
    """A soft cap for model-written summaries; 0 for none."""


@runtime_checkable
class Summarizer(Protocol):
    """Writes the summary text for a compression, synchronously."""

    def summarize(self, request: SummaryRequest) -> str: ...


@runtime_checkable
class AsyncSummarizer(Protocol):
    """Writes the summary text for a compression by awaiting something (a model)."""

    async def summarize(self, request: SummaryRequest) -> str: ...


def bullet(line: str) -> str:
    """A line of a summary section as the structured summary writes it."""
    return f"- {line}"


def _bullets(lines: Sequence[str], empty: str = "- (none)") -> list[str]:
    return [bullet(line) for line in lines] if lines else [empty]


class StructuredSummarizer:
    """The summary template filled from the request, byte for byte reproducible (no model)."""

    def summarize(self, request: SummaryRequest) -> str:
        if request.level == "phase":
            return self._phase(request)
        where = f"; full history in artefact {request.archive_id}" if request.archive_id else ""
        lines = [
            f"Context summary ({request.level} compression{where})",
            "[Goal]",
            request.goal or "(not recorded)",
            "[Completed work]",
            *_bullets(
                [
                    *request.phases,
                    *request.history,
                    *([request.in_progress] if request.in_progress else []),
                    *request.completed,
                ]
            ),
            "[Current state]",
            *_bullets(request.current_state),
            "[Key decisions]",
            *_bullets(request.decisions),
            *(["[Superseded]", *_bullets(request.superseded)] if request.superseded else []),
            *(["[Resolved issues]", *_bullets(request.resolved)] if request.resolved else []),
            *(["[Configurations]", *_bullets(request.configurations)] if request.configurations else []),
            *(["[Artefacts]", *_bullets(request.artifacts)] if request.artifacts else []),
            "[Next step]",
            request.next_step or "(not recorded)",
            "[Constraints]",
            *_bullets(request.constraints),
        ]
        return "\n".join(lines)

    @staticmethod
    def _phase(request: SummaryRequest) -> str:
        """``✅ phase 2 – title (14 items): artefacts …; config …; fixed …`` on one line."""
        mark = "✅" if (request.status or "done") == "done" else "⏳"
        title = f" – {request.goal}" if request.goal else ""
        count = request.current_state[0] if request.current_state else f"{len(request.completed)} items"
        parts = []
        if request.artifacts:
            parts.append("artefacts " + ", ".join(request.artifacts))
        if request.configurations:
            parts.append("config " + ", ".join(request.configurations))
        if request.resolved:
            parts.append("fixed " + "; ".join(request.resolved))
        if not parts and request.completed:
            parts.append("; ".join(request.completed[-3:]))
        return f"{mark} phase {request.phase}{title} ({count})" + (f": {'; '.join(parts)}" if parts else "")


class CompletionModel(Protocol):
    """Anything that answers chat messages; tether's ``ChatModel`` adapters fit."""

    async def complete(self, messages: list[dict[str, Any]]) -> str: ...


_INSTRUCTIONS = (
    "You compress the working memory of a long-running agent. Rewrite the material below "
    "into exactly these sections, in this order, each heading on its own line: "
    "[Goal], [Completed work], [Current state], [Key decisions], [Next step], [Constraints]. "
    "Keep every identifier, number, path, id and decision verbatim. Use one line per "
    "completed operation. Do not invent anything."
)


class LLMSummarizer:
    """A model-written summary, with the structured one as the floor.

    Never raises: a failing or empty model answer logs a warning and returns the
    structured summary, because compression must not take down the run it protects.
    """

    def __init__(
        self,
        model: CompletionModel,
        *,
        fallback: Summarizer | None = None,
        max_detail_chars: int = 24_000,
    ) -> None:
        self.model = model
        self.fallback = fallback or StructuredSummarizer()
        self.max_detail_chars = max_detail_chars

    def messages(self, request: SummaryRequest) -> list[dict[str, Any]]:
        """The prompt sent to the model (public so it can be inspected and tested)."""
        draft = self.fallback.summarize(request)
        details = "\n---\n".join(request.details)
        if len(details) > self.max_detail_chars:
            details = details[-self.max_detail_chars :]
        limit = f" Stay under {request.max_tokens} tokens." if request.max_tokens else ""
        return [
            {"role": "system", "content": _INSTRUCTIONS + limit},
            {
                "role": "user",
                "content": f"Structured draft:\n{draft}\n\nFull material being folded:\n{details}",
            },
        ]

    async def summarize(self, request: SummaryRequest) -> str:
        try:
            text = await self.model.complete(self.messages(request))
        except Exception as exc:  # any model failure degrades to the structured summary
            logger.warning("LLM summariser failed (%s); using the structured summary", exc)
            return self.fallback.summarize(request)
        if not isinstance(text, str) or not text.strip():
            logger.warning("LLM summariser returned nothing; using the structured summary")
            return self.fallback.summarize(request)
        return text.strip()
