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


def slow_plan() -> Workflow:
    """Step 'b' writes ``$TETHER_TEST_MARK`` when it starts, then waits until the file
    ``$TETHER_TEST_GO`` exists (a test's signal), or forever when it is unset."""
    import os
    import time
    from pathlib import Path

    def quick(sc):
        return {"messages": [sc.step.id]}

    def waits(sc):
        mark, go = os.environ.get("TETHER_TEST_MARK"), os.environ.get("TETHER_TEST_GO")
        if mark:
            Path(mark).write_text("started")
        while not (go and Path(go).exists()):
            time.sleep(0.05)
        return {"messages": [sc.step.id]}

    return Workflow.plan(
        [Step(id="a", fn=quick), Step(id="b", fn=waits), Step(id="c", fn=quick)], name="slow"
    )


def markup_plan() -> Workflow:
    """A step whose error message looks like rich markup."""

    def broken(sc):
        raise ValueError("closing tag '[/red]' in [bold]user data[/bold]")

    return Workflow.plan([Step(id="render [x]", fn=broken)], name="markup")


def ends_failed() -> Workflow:
    def gives_up(sc):
        sc.finish("FAILED", "cannot be done")

    return Workflow.plan([Step(id="try", fn=gives_up)], name="failed")
