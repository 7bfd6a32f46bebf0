"""Workflows the CLI tests load by 'module:attribute'."""

from __future__ import annotations

from tether.runtime import Step, Workflow


def flaky_plan() -> Workflow:
    def fetch(sc):
        return {"fetch_output": "ok"}

    def find(sc):
        raise FileNotFoundError("dataset test-data not found")

    def report(sc):
        return {"report_output": "written"}

    return Workflow.plan(
        [
            Step(id="fetch", fn=fetch),
            Step(id="find", name="Find dataset", fn=find),
            Step(id="report", fn=report),
        ],
        name="flaky",
    )
