"""How an agent loop is configured: its limits, budget, prompt, context blocks and where
its trimmed outputs go."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from tether.context.artifacts import ArtifactStore, FileArtifactStore, InMemoryArtifactStore
from tether.context.monitor import Thresholds

__all__ = ["SYSTEM_PROMPT", "LoopConfig", "artifact_store_for"]

logger = logging.getLogger("tether.agent.loop")

SYSTEM_PROMPT = """You are an autonomous DevOps agent working through a shell session.
Answer every turn with ONE JSON object and nothing else:
  {"action": "execute", "command": "<one shell command>", "reasoning": "<why>"}
  {"action": "ask_user", "question": "...", "options": ["..."], "input_type": "choice|text|confirm|secret"}
  {"action": "done", "message": "<what was achieved, with URLs/ports>"}
  {"action": "failed", "message": "<why it cannot be done>"}
  {"action": "read_artifact", "artifact_id": "<id>", "start": 1, "end": 200, "unit": "lines"}
    (reads back the part of a trimmed output you need; unit "lines" or "bytes")
Rules: prefer Docker Compose > Docker > a traditional install; run non-interactive commands
(-y, --no-input); never run destructive commands; start long-running services in the
background and verify them (e.g. curl the health endpoint) before saying done; when a
command fails, read its error and fix the cause instead of repeating it. Secrets the user
gives you are in environment variables named in the conversation: use "$NAME", never the value."""


@dataclass(slots=True, kw_only=True)
class LoopConfig:
    max_iterations: int = 30
    max_invalid_replies: int = 3
    """Invalid replies in a row before the run fails."""
    model_name: str = "gpt-4o"
    """Picks the tokenizer and the default budget."""
    budget: int = 24_000
    """Prompt tokens the window may use."""
    output_tokens: int = 600
    """A command's output above this is trimmed to head + tail; the full text is an artefact."""
    command_timeout: float = 600.0
    system_prompt: str = SYSTEM_PROMPT
    blocks: dict[str, str] = field(default_factory=dict)
    """Session-layer context: repository analysis, host facts, experience, rolling summary."""
    thresholds: Thresholds = field(default_factory=Thresholds)
    """Warn / standard / deep compression points, as fractions of ``budget``."""
    artifacts_dir: str | None = None
    """Where trimmed outputs are kept (a directory per run); default beside the SQLite file."""


def artifact_store_for(config: LoopConfig, store_path: object, run_id: str) -> ArtifactStore:
    """Where a run's trimmed outputs go: ``artifacts_dir``, else beside an SQLite store's
    file, one directory per run; in memory only when nothing says where."""
    base = config.artifacts_dir
    if base is None and isinstance(store_path, str) and store_path != ":memory:":
        base = f"{store_path}.artifacts"
    if base is None:
        logger.warning("no artifacts_dir and no store file: trimmed outputs are kept in memory only")
        return InMemoryArtifactStore()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id) or "run"
    return FileArtifactStore(Path(base) / safe)
