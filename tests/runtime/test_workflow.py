"""Workflow definitions: dependencies, phases, plans, bad definitions."""

from __future__ import annotations

import pytest

from tether.errors import ConfigError
from tether.runtime import Step, Workflow


def noop(sc):
    return None


def test_plan_chains_steps_and_next_step_follows_dependencies():
    wf = Workflow.plan([Step(id=s, fn=noop, phase="p1" if s < "c" else "p2") for s in "abcd"])
    assert [s.deps for s in wf.steps] == [(), ("a",), ("b",), ("c",)]
    assert wf.next_step(set()).id == "a"
    assert wf.next_step({"a", "b"}).id == "c"
    assert wf.next_step({"a"}, {"b"}).id == "c"  # skipped counts as settled
    assert wf.next_step(set("abcd")) is None
    assert [p.id for p in wf.phases] == ["p1", "p2"]
    assert wf.position("c") == (3, 4)


def test_dag_order():
    wf = Workflow(
        [
            Step(id="deploy", fn=noop, deps=("build", "config")),
            Step(id="build", fn=noop, deps=("fetch",)),
            Step(id="config", fn=noop),
            Step(id="fetch", fn=noop),
        ]
    )
    order, done = [], set()
    while (step := wf.next_step(done)) is not None:
        order.append(step.id)
        done.add(step.id)
    assert order == ["config", "fetch", "build", "deploy"]


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([Step(id="a", fn=noop), Step(id="a", fn=noop)], "duplicate step id 'a'"),
        ([Step(id="a", fn=noop, deps=("zz",))], "unknown step 'zz'"),
        ([Step(id="a", fn=noop, deps=("b",)), Step(id="b", fn=noop, deps=("a",))], "cycle: a -> b -> a"),
        ([Step(id="", fn=noop)], "non-empty id"),
    ],
)
def test_bad_workflows_are_config_errors(steps, message):
    with pytest.raises(ConfigError, match=message):
        Workflow(steps)


def test_replace_remaining_keeps_settled_steps():
    wf = Workflow.plan([Step(id=s, fn=noop) for s in "abc"])
    new = wf.replace_remaining({"a"}, [Step(id="x", fn=noop), Step(id="y", fn=noop, deps=("x",))])
    assert [s.id for s in new.steps] == ["a", "x", "y"]
    assert new.next_step({"a"}).id == "x"
