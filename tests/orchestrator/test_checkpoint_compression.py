"""Checkpoint compression in both orchestrators: after a stage's (or a plan step's)
checkpoint, what precedes it in the run's context window is compressed; configurable."""

from __future__ import annotations

import pytest

from tether.agent import PlanOrchestrator, PlanStep, StepResult
from tether.context import ContextWindow
from tether.context.items import new_item
from tether.orchestrator import MainDecision, Orchestrator, OrchestratorConfig, ScriptedMain, ScriptedRunner
from tether.orchestrator.demo import finish_review_role
from tether.state import RunStatus


def busy_window() -> ContextWindow:
    """Thirty commands and their outputs, at about half of the window's budget."""
    window = ContextWindow("gpt-4o", budget=40_000)
    for k in range(30):
        args = {"command": f"make target-{k}"}
        window.add(
            new_item("tool_call", "", tool_call_id=f"c{k}", metadata={"name": "sh", "arguments": args})
        )
        window.add(new_item("tool_result", f"step {k} built artefact-{k}.tar\n" * 40, tool_call_id=f"c{k}"))
    window.budget = round(window.usage().tokens / 0.5)
    return window


def ask_then_finish(request):
    if request.mode == "finish_check":
        return MainDecision(next_agent="FINISH", reason="accepted")
    if request.iteration == 1:
        return MainDecision(next_agent="USER", reason="which port?", question="Which port?")
    return MainDecision(next_agent="FINISH", reason="done")


@pytest.mark.parametrize("enabled", [True, False])
async def test_an_orchestration_compresses_its_window_once_a_stage_checkpoint_passes(repo, store, enabled):
    events = []
    orch = Orchestrator(
        repo,
        store,
        main=ScriptedMain(ask_then_finish),
        runners=ScriptedRunner({"FINISH_REVIEW": finish_review_role}),
        config=OrchestratorConfig(checkpoint_compression=enabled),
        on_event=events.append,
    )
    run_id = f"cc-{enabled}"
    paused = await orch.start(run_id, "deploy it")
    assert paused.status is RunStatus.PAUSED
    window = busy_window()
    before = window.usage().tokens
    await store.update_state(run_id, {"context_window": window.to_state()})
    done = await orch.answer(run_id, "8080")
    assert done.status is RunStatus.COMPLETED
    after = ContextWindow.from_state(done.state["context_window"]).usage().tokens
    compressed = [e for e in events if e.kind == "context_compressed"]
    if enabled:
        assert after < before
        assert compressed and compressed[0].detail["level"] == "checkpoint"
        assert compressed[0].detail["reason"].startswith(f"checkpoint {run_id}@")
    else:
        assert after == before and compressed == []


@pytest.mark.parametrize("enabled", [True, False])
async def test_a_plan_compresses_its_window_once_a_step_checkpoint_passes(store, tmp_path, enabled):
    calls = {"n": 0}

    async def flaky(ctx):
        calls["n"] += 1
        if calls["n"] == 1:
            return StepResult.failed("the database is not up yet")
        return StepResult.succeeded({"ok": True})

    plan = PlanOrchestrator(
        store=store,
        steps=[PlanStep(name="migrate", goal="run the migrations"), PlanStep(name="start", goal="start it")],
        step_executor=flaky,
        log_dir=None,
        checkpoint_compression=enabled,
    )
    run_id = f"pc-{enabled}"
    paused = await plan.start(run_id)
    assert paused.status is RunStatus.PAUSED
    window = busy_window()
    before = window.usage().tokens
    await store.update_state(run_id, {"context_window": window.to_state()})
    done = await plan.resume(run_id, decision="retry")
    assert done.status is RunStatus.COMPLETED
    after = ContextWindow.from_state(done.state["context_window"]).usage().tokens
    assert (after < before) if enabled else (after == before)
