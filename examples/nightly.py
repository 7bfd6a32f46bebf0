"""A two-step workflow whose second step asks for a review: `tether run examples.nightly:nightly`
ends PAUSED (exit code 4); a script reads that code to decide what to do next."""

from __future__ import annotations

from tether.runtime import Step, StepContext, Workflow


def collect(sc: StepContext) -> dict[str, int]:
    return {"rows": 42}


def publish(sc: StepContext) -> None:
    sc.pause("check the numbers before they go out")


def nightly() -> Workflow:
    return Workflow.plan([Step(id="collect", fn=collect), Step(id="publish", fn=publish)], name="nightly")
