"""The context window lives in the run's state: phase compression after a phase, resume intact."""

from __future__ import annotations

from tests.stores.conftest import new_id
from tether.context import ContextWindow, new_item
from tether.runtime import Runner, Step, Workflow
from tether.runtime.context_hooks import load_window, phase_compression, save_window
from tether.state import ExecutionContext, RunStatus


def op_step(step_id: str, phase: str):
    def fn(sc):
        window = load_window(sc.state)
        for i in range(5):
            window.add(
                new_item(
                    "operation", f"{step_id} op {i}: " + "ran a command with long output " * 20, phase=phase
                )
            )
        return {"context_window": window.to_state()}

    return Step(id=step_id, fn=fn, phase=phase)


async def test_finished_phases_are_folded_and_the_window_survives_resume(store):
    window = ContextWindow("gpt-4o", budget=50_000)
    window.add(new_item("goal", "deploy the app to staging", pinned=True))
    wf = Workflow.plan([op_step("a", "prepare"), op_step("b", "prepare"), op_step("c", "ship")])
    sizes = []
    hook = phase_compression()

    def measuring(phase, ctx):
        sizes.append(load_window(ctx).usage().tokens)
        return hook(phase, ctx)

    run_id = new_id()
    seed = ExecutionContext(run_id)
    save_window(seed, window)
    result = await Runner(wf, store, on_phase_complete=measuring).start(run_id, seed.snapshot())
    assert result.status is RunStatus.COMPLETED
    final = ContextWindow.from_state(result.state["context_window"])
    assert final.usage().tokens < sizes[-1]  # phase compression made it smaller
    texts = [item.content for item in final.items()]
    assert "deploy the app to staging" in texts  # the pinned goal is untouched
    assert not any(t.startswith("a op") for t in texts)  # prepare's operations were folded
    stored = await store.load(run_id)
    assert ContextWindow.from_state(stored.state["context_window"]).to_state() == final.to_state()


async def test_a_phase_with_a_non_compressible_step_is_left_whole(store):
    window = ContextWindow("gpt-4o", budget=50_000)
    wf = Workflow.plan([op_step("a", "keep"), op_step("b", "other")])
    wf = Workflow.plan([Step(id="a", fn=wf["a"].fn, phase="keep", compressible=False), wf["b"]])
    seed = ExecutionContext(new_id())
    save_window(seed, window)
    result = await Runner(wf, store, on_phase_complete=phase_compression(workflow=wf)).start(
        seed.run_id, seed.snapshot()
    )
    texts = [item.content for item in ContextWindow.from_state(result.state["context_window"]).items()]
    assert any(t.startswith("a op") for t in texts)  # kept verbatim
    assert not any(t.startswith("b op") for t in texts)  # folded
