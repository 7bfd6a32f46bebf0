"""Seed 000's plan orchestrator: a plan of steps, each run by the agent loop with the
rolling :class:`ExecutionSummary` in its prompt and finished by a validated ``step_done``.

The plan is a runtime workflow (one runtime step per plan step) and each plan step is
a nested agent run (``<run_id>.<step index>``), so both levels checkpoint, resume and
report failures the same way. A plan step whose agent fails raises :class:`DataError`,
which the runtime rolls back and reports (retry / skip / abort).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tether.agent.loop import AgentLoop, LoopConfig
from tether.context.distill import step_outputs_from_commands
from tether.context.summaries import SummaryManager
from tether.runtime import DataError, Event, Runner, RunResult, Step, StepContext, Workflow
from tether.state import RunStatus
from tether.stores.base import CheckpointStore

__all__ = ["PlanOrchestrator", "PlanStep"]

STEP_DONE_RULE = """When this step's goal is met, answer:
  {"action": "step_done", "message": "<one line>", "outputs": {"summary": "<one sentence, required>",
   "environment_changes": {}, "new_configurations": {}, "artifacts": [], "services_started": [],
   "custom_data": {}, "issues_resolved": []}}
Use {"action": "failed", "message": "..."} only if the step cannot be done."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanStep:
    name: str
    goal: str
    category: str = "general"
    success_criteria: str = ""


@dataclass(slots=True, kw_only=True)
class PlanOrchestrator:
    """Runs a plan; ``loop_factory`` builds the agent loop of each step (model, session…)."""

    store: CheckpointStore
    loop_factory: Callable[[LoopConfig], AgentLoop]
    steps: list[PlanStep]
    project_name: str = ""
    deploy_dir: str = ""
    strategy: str = ""
    base_config: LoopConfig = field(default_factory=LoopConfig)
    on_event: Callable[[Event], None] | None = None

    def workflow(self) -> Workflow:
        return Workflow.plan(
            [
                Step(id=f"step-{i}", name=s.name, fn=self._make(i, s), phase=s.category)
                for i, s in enumerate(self.steps, 1)
            ],
            name="plan",
        )

    async def start(self, run_id: str) -> RunResult:
        manager = SummaryManager(self.project_name, self.deploy_dir, self.strategy)
        inputs = {"execution_summary": manager.to_state(), "structured_outputs": {}}
        return await Runner(self.workflow(), self.store, on_event=self.on_event).start(run_id, inputs)

    async def resume(self, run_id: str, *, decision: str | None = None) -> RunResult:
        return await Runner(self.workflow(), self.store, on_event=self.on_event).resume(
            run_id, decision=decision
        )

    def _make(self, index: int, plan_step: PlanStep) -> Callable[[StepContext], Any]:
        async def run_step(sc: StepContext) -> Mapping[str, Any]:
            manager = SummaryManager.from_state(sc.get("execution_summary") or {})
            goal = plan_step.goal + (
                f"\nSuccess criteria: {plan_step.success_criteria}" if plan_step.success_criteria else ""
            )
            blocks = {**self.base_config.blocks, "execution_summary": manager.get_prompt_context()}
            config = replace(
                self.base_config,
                blocks=blocks,
                system_prompt=self.base_config.system_prompt + "\n" + STEP_DONE_RULE,
            )
            loop = self.loop_factory(config)
            nested = f"{sc.run_id}.{index}"
            info = await self.store.get_run(nested)
            if info is None:
                result = await loop.start(nested, goal)
            elif info.status is RunStatus.COMPLETED:
                cp = await self.store.load(nested)
                assert cp is not None
                result = RunResult(run_id=nested, status=info.status, version=cp.version, state=cp.state)
            else:
                result = await loop.resume(nested)
            if result.status is not RunStatus.COMPLETED:
                raise DataError(
                    f"plan step {plan_step.name!r} did not complete ({result.status}): "
                    f"{result.state.get('final_output') or 'no message'}"
                )
            outputs = result.state.get("step_outputs")
            if not outputs:  # no step_done outputs: read them from what the step's commands did
                outputs = step_outputs_from_commands(
                    result.state.get("command_history") or [],
                    summary=str(result.state.get("final_output") or ""),
                ).to_dict()
            manager.merge_step_outputs(plan_step.name, plan_step.category, outputs)
            return {
                "execution_summary": manager.to_state(),
                "structured_outputs": {**(sc.get("structured_outputs") or {}), plan_step.name: outputs or {}},
            }

        return run_step
