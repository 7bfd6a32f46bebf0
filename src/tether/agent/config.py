"""How an agent loop is configured: its limits, budget, prompt, context blocks and where
its trimmed outputs go."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from tether.context.artifacts import ArtifactStore, FileArtifactStore, InMemoryArtifactStore
from tether.context.monitor import Thresholds
from tether.state import ReducerRegistry, default_registry
from tether.stores.base import CheckpointStore

__all__ = [
    "APPENDED",
    "SYSTEM_PROMPT",
    "LoopConfig",
    "artifact_root",
    "artifact_store_for",
    "delete_artifacts",
    "loop_reducers",
    "sweep_artifacts",
]

logger = logging.getLogger("tether.agent.loop")

APPENDED = ("command_history", "user_interactions", "actions", "context_log", "prompt_log", "stuck_log")
"""The loop's state keys that only ever grow: each checkpoint stores what a step appended."""


def loop_reducers() -> ReducerRegistry:
    """The reducers of an agent loop's state (the defaults, :data:`APPENDED` keys appending):
    every runner of a loop's workflow must use them, or a resumed run would replace lists."""
    reducers = default_registry()
    for key in APPENDED:
        reducers.register(key, "append")
    return reducers


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
    phase_compression: bool = True
    """Fold a plan phase into one line once its TODO item is done (see docs/context.md)."""
    checkpoint_compression: bool = True
    """Compress what precedes a checkpoint an orchestrator reports as passed."""
    artifacts_dir: str | None = None
    """Where trimmed outputs are kept (a directory per run); default: see ``artifact_root``."""

    def __post_init__(self) -> None:  # a wrong type fails here, naming the field, not mid-run
        from tether.validation import check_fields

        check_fields(
            self,
            positive=("max_iterations", "max_invalid_replies", "budget", "output_tokens", "command_timeout"),
        )


def artifact_root(store: object) -> Path | None:
    """The directory a store's runs keep their artefacts in, one sub-directory per run.

    Beside an SQLite store's file (``<db>.artifacts``); for a server store, under the user's
    data directory (``$XDG_DATA_HOME``, else ``~/.local/share``) in
    ``tether/artifacts/<hash of the store's URL without credentials>``, so that every
    process on this host opening the same database finds a run's artefacts after a crash,
    and no password ends up in a path. None for a store kept in memory (its runs go with
    the process too) or one not opened from a URL."""
    path = getattr(store, "path", None)
    if isinstance(path, str):
        return None if path == ":memory:" else Path(f"{path}.artifacts")
    url = getattr(store, "public_url", None)
    if not isinstance(url, str) or url.startswith("memory:"):
        return None
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "tether" / "artifacts" / hashlib.sha256(url.encode()).hexdigest()[:24]


def _run_dir(base: str | os.PathLike[str], run_id: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id) or "run"
    return Path(base) / safe


def artifact_store_for(config: LoopConfig, store: object, run_id: str) -> ArtifactStore:
    """Where a run's trimmed outputs go: ``artifacts_dir``, else :func:`artifact_root`, one
    directory per run; in memory only when neither says where."""
    base: str | Path | None = config.artifacts_dir
    if base is None:
        base = artifact_root(store)
    if base is None:
        logger.warning("no artifacts_dir and no durable store: trimmed outputs are kept in memory only")
        return InMemoryArtifactStore()
    return FileArtifactStore(_run_dir(base, run_id))


def delete_artifacts(store: object, run_id: str, artifacts_dir: str | None = None) -> bool:
    """Remove a run's artefacts from where :func:`artifact_store_for` put them (call it
    when the run is deleted); True when there were some."""
    base: str | Path | None = artifacts_dir if artifacts_dir is not None else artifact_root(store)
    if base is None:
        return False
    target = _run_dir(base, run_id)
    if not target.is_dir():
        return False
    shutil.rmtree(target, ignore_errors=True)
    return True


_SWEEP_PAGE = 500


async def sweep_artifacts(
    store: CheckpointStore, *, idle: float = 3600.0, artifacts_dir: str | None = None
) -> int:
    """Remove the artefact directories of runs the store no longer holds (runs that expired,
    were purged, or were deleted by a process that did not remove their files); returns how
    many went. A directory is kept while any stored run maps to it, and while anything in it
    changed within ``idle`` seconds: a run that is writing its first artefacts is not yet
    visible to every listing, and its files must not go from under it."""
    base = Path(artifacts_dir) if artifacts_dir is not None else artifact_root(store)
    if base is None or not base.is_dir():
        return 0
    horizon = time.time() - idle
    candidates = [d for d in base.iterdir() if d.is_dir() and _last_change(d) < horizon]
    if not candidates:
        return 0
    live: set[str] = set()
    offset = 0
    while True:
        page = await store.list_runs(limit=_SWEEP_PAGE, offset=offset)
        live.update(_run_dir(base, r.run_id).name for r in page)
        if len(page) < _SWEEP_PAGE:
            break
        offset += len(page)
    removed = 0
    for d in candidates:
        # a listing paged by update time can miss a run updated meanwhile: ask for it too
        if d.name in live or await store.get_run(d.name) is not None:
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed += not d.exists()
    return removed


def _last_change(directory: Path) -> float:
    """The newest modification time of a directory or anything in it."""
    newest = directory.stat().st_mtime
    for path in directory.rglob("*"):
        try:
            newest = max(newest, path.stat().st_mtime)
        except FileNotFoundError:
            continue
    return newest
