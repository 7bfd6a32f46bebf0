"""The ``read_artifact`` action: a slice of a trimmed output read back from the run's store."""

from __future__ import annotations

from tether.agent.actions import AgentAction
from tether.agent.decide import artifact_slice
from tether.context import ContextItem, ContextWindow, InMemoryArtifactStore, new_item
from tether.context.artifacts import ArtifactNotFound, ArtifactStore
from tether.context.trim import trim_output

__all__ = ["read_artifact"]


def read_artifact(
    store: ArtifactStore, window: ContextWindow, n: int, action: AgentAction, limit: int
) -> ContextItem:
    """A slice of a stored output, by lines or bytes, trimmed like any output (to ``limit``
    tokens); an unknown id is said so, for the model to correct."""
    aid = action.artifact_id or ""
    try:
        part, where = artifact_slice(store.get(aid), action)
    except ArtifactNotFound:
        body = f"no artifact {aid!r} for this run"
    else:
        scratch = InMemoryArtifactStore()
        preview = trim_output(part, max_tokens=limit, tokenizer=window.tokenizer, store=scratch).text
        body = f"artifact {aid}, {where}:\n{preview}"
    return new_item("tool_result", body, id=f"result-{n}", tool_call_id=f"it{n}")
