"""Workflows and states the server tests drive."""

from __future__ import annotations

import asyncio
from typing import Any

from tether.context import ContextWindow, Layer, new_item
from tether.runtime import DataError, Phase, Step, StepContext, Workflow
from tether.runtime.context_hooks import WINDOW_KEY

GATE: dict[str, asyncio.Event] = {}
"""Steps named ``wait`` block on GATE[run_id] (tests pause runs mid-flight)."""


def note(name: str) -> Any:
    def fn(sc: StepContext) -> dict[str, Any]:
        return {"messages": [f"{name} done"], f"{name}_output": name}

    return fn


async def wait(sc: StepContext) -> dict[str, Any]:
    gate = GATE.get(sc.run_id)
    if gate is not None:
        await gate.wait()
    return {"messages": ["waited"]}


def fail_fetch(sc: StepContext) -> dict[str, Any]:
    raise DataError("dataset 'test-data' not found")


def plan_flow() -> Workflow:
    """plan → wait → build → ship, in two phases."""
    return Workflow(
        [
            Step(id="plan", fn=note("plan"), phase="prepare"),
            Step(id="wait", fn=wait, phase="prepare"),
            Step(id="build", fn=note("build"), phase="deliver"),
            Step(id="ship", fn=note("ship"), phase="deliver"),
        ],
        name="plan",
        phases=[Phase(id="prepare", name="Prepare"), Phase(id="deliver", name="Deliver")],
    )


def failing_flow() -> Workflow:
    """select → fetch (always fails with a data error) → report."""
    return Workflow(
        [
            Step(id="select", fn=note("select"), name="Select the prompt"),
            Step(id="fetch", fn=fail_fetch, name="Select the dataset"),
            Step(id="report", fn=note("report"), name="Write the report"),
        ],
        name="failing",
    )


def window_near(ratio: float, budget: int = 4_000) -> dict[str, Any]:
    """A context window at about ``ratio`` of ``budget``: goal, TODO, many operations."""
    window = ContextWindow("gpt-4o", budget=budget)
    window.add(new_item("goal", "Deploy the shop service to staging", pinned=True))
    window.add(new_item("todo", "1. build  2. test  3. deploy"))
    n = 0
    while window.usage().ratio < ratio:
        n += 1
        window.add(
            new_item(
                "operation",
                f"operation {n}: ran build step {n}\n"
                + "\n".join(f"warning: unused variable x{i} in module m{n}" for i in range(8)),
                layer=Layer.WORKING,
            )
        )
    return window.to_state()


def context_flow(ratio: float = 0.75) -> Workflow:
    """One step that leaves a context window near ``ratio`` and pauses for review."""

    def fill(sc: StepContext) -> dict[str, Any]:
        return {WINDOW_KEY: window_near(ratio)}

    return Workflow(
        [Step(id="fill", fn=fill, pause_after=True), Step(id="finish", fn=note("finish"))], name="context"
    )
