"""What an agent loop keeps per run while this process drives it.

A run's compression policy lives as long as the loop, because its usage monitor remembers
which thresholds were already crossed (a warning is given once, not at every call); a run's
artefact store holds the outputs that trimming took out of the prompt, so a later
``read_artifact`` action finds them.
"""

from __future__ import annotations

from tether.agent.config import LoopConfig, artifact_store_for
from tether.context.artifacts import ArtifactStore
from tether.context.policy import ContextPolicy
from tether.stores.base import CheckpointStore

__all__ = ["RunResources"]


class RunResources:
    """Per run: its :class:`ContextPolicy` and its :class:`ArtifactStore` (one given at
    construction serves every run)."""

    def __init__(self, config: LoopConfig, store: CheckpointStore, artifacts: ArtifactStore | None) -> None:
        self.config = config
        self.store = store
        self.shared_artifacts = artifacts
        self._artifacts: dict[str, ArtifactStore] = {}
        self._policies: dict[str, ContextPolicy] = {}

    def policy(self, run_id: str) -> ContextPolicy:
        if run_id not in self._policies:
            self._policies[run_id] = ContextPolicy(
                thresholds=self.config.thresholds,
                archive=self.artifacts(run_id),
                phase_compression=self.config.phase_compression,
                checkpoint_compression=self.config.checkpoint_compression,
            )
        return self._policies[run_id]

    def artifacts(self, run_id: str) -> ArtifactStore:
        if self.shared_artifacts is not None:
            return self.shared_artifacts
        if run_id not in self._artifacts:  # kept: an in-memory one lives as long as the loop
            self._artifacts[run_id] = artifact_store_for(self.config, self.store, run_id)
        return self._artifacts[run_id]
