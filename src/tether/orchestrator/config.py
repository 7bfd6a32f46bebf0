"""The orchestrator's configuration (a frozen value the engine and every stage read)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.errors import ConfigError
from tether.orchestrator.prompts import PromptConfig

__all__ = ["OrchestratorConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class OrchestratorConfig:
    max_iterations: int = 30
    """MAIN rounds; one more ends the run FAILED with a report."""
    stall_rounds: int = 3
    """MAIN rounds without dev_plan progress (or with the same failing TEST) before a re-plan."""
    subloop: bool = True
    subloop_max_iterations: int = 3
    subloop_timeout: float = 600.0
    stage_timeout: float | None = None
    """Seconds one role may take outside the sub-loop (None: the runner's own limit)."""
    prompts: PromptConfig = field(default_factory=PromptConfig)
    acceptance: tuple[str, ...] = ()
    """Acceptance criteria, summarised in FINISH_CHECK."""
    checkpoint_compression: bool = True
    """After each stage's checkpoint, compress what precedes it in the context window the
    run's state keeps (``context_window``), when that gains enough."""

    def __post_init__(self) -> None:
        if self.max_iterations < 1 or self.subloop_max_iterations < 1 or self.stall_rounds < 1:
            raise ConfigError("max_iterations, subloop_max_iterations and stall_rounds must be >= 1")
