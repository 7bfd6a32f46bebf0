"""Named workflows, resolved on the worker.

A message on the broker names a run, never code: the worker finds the run's workflow by
the name stored in the run (``_workflow``) in its own :class:`Registry`. Entries are
``Workflow`` objects (or functions returning one) given directly or as
``module:attribute`` strings, so a fleet is configured by what it imports, and a
message cannot make a worker run anything it was not told to.

The bundled orchestrator is registered as ``orchestrate-demo``: MAIN decides by rules
and the roles are the offline demo's, on the ``workdir`` the run's input names.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.errors import ConfigError
from tether.runtime import Runner, Workflow
from tether.stores.base import CheckpointStore

__all__ = ["QUEUE_KEY", "WORKFLOW_KEY", "Entry", "Registry", "UnknownWorkflow", "load_target"]

WORKFLOW_KEY = "_workflow"
"""State key naming the registered workflow of a run (written when it is submitted)."""
QUEUE_KEY = "_queue"
"""State key naming the broker queue a submitted run belongs to (the sweeper re-enqueues
it there)."""

RunnerFactory = Callable[[CheckpointStore, Mapping[str, Any]], Runner]
"""Builds the runner of one run from the store and the run's state (its inputs)."""


class UnknownWorkflow(ConfigError):
    """A run names a workflow this process does not have registered."""

    def __init__(self, name: str, known: Iterable[str]) -> None:
        listed = ", ".join(sorted(known)) or "none"
        super().__init__(
            f"no workflow named {name!r} is registered here (registered: {listed}); start the "
            f"worker with `--workflow {name}=module:attribute`"
        )
        self.name = name


@dataclass(frozen=True, slots=True)
class Entry:
    """One registered workflow: how to build a run's runner, and its steps (for the run's
    TODO list before it starts)."""

    name: str
    workflow: Workflow | None = None
    factory: RunnerFactory | None = None
    prepare: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
    """Turns a submission's inputs into the run's initial state (default: as given)."""

    def runner(self, store: CheckpointStore, state: Mapping[str, Any]) -> Runner:
        if self.factory is not None:
            return self.factory(store, state)
        assert self.workflow is not None
        return Runner(self.workflow, store)

    def steps(self) -> list[Any]:
        return list(self.workflow.steps) if self.workflow is not None else []

    def initial_state(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        return self.prepare(inputs) if self.prepare is not None else dict(inputs)


def load_target(target: str) -> Any:
    """``module:attribute`` to the object it names (a workflow, or a function making one)."""
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"{target!r}: give a workflow as module:attribute (e.g. myproject.flows:deploy)")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"{target!r}: cannot import {module!r} ({exc}); check PYTHONPATH") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{target!r}: {module!r} has no attribute {attr!r}") from None
    return obj


def _as_workflow(obj: Any, where: str) -> Workflow:
    if callable(obj) and not isinstance(obj, Workflow):
        obj = obj()
    if not isinstance(obj, Workflow):
        raise ConfigError(f"{where} is a {type(obj).__name__}, not a Workflow (or a function returning one)")
    return obj


class Registry:
    """The workflows a worker (or a submitter) knows by name."""

    def __init__(self, entries: Iterable[Entry | Workflow | str] = (), *, bundled: bool = True) -> None:
        self._entries: dict[str, Entry] = {}
        if bundled:
            self.add_entry(_orchestrate_demo())
        for item in entries:
            self.add(item)

    def add(self, item: Entry | Workflow | str, *, name: str | None = None) -> Entry:
        """Register a workflow, an :class:`Entry`, or ``[NAME=]module:attribute``."""
        if isinstance(item, Entry):
            return self.add_entry(item)
        if isinstance(item, str):
            label, sep, target = item.partition("=")
            if not sep:
                label, target = "", item
            wf = _as_workflow(load_target(target.strip()), repr(target))
            name = name or label.strip() or wf.name
        else:
            wf = item
        return self.add_entry(Entry(name=name or wf.name, workflow=wf))

    def add_entry(self, entry: Entry) -> Entry:
        self._entries[entry.name] = entry
        return entry

    def get(self, name: str) -> Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownWorkflow(name, self._entries) from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries


# == bundled ============================================================================
def _orchestrate_demo() -> Entry:
    """The multi-agent orchestrator with MAIN by rules and the offline demo roles, on the
    ``workdir`` of the run's input (the demo's sample project is written there if absent)."""

    def prepare(inputs: Mapping[str, Any]) -> dict[str, Any]:
        workdir, task = inputs.get("workdir"), inputs.get("task")
        if not isinstance(workdir, str) or not workdir:
            raise ConfigError('orchestrate-demo needs {"workdir": "/path/of/the/project"} in its input')
        from tether.orchestrator.engine import initial_state

        default = "Make the test suite of this project pass (median() of an even count is wrong)."
        return initial_state(str(task or default), workdir=workdir)

    def factory(store: CheckpointStore, state: Mapping[str, Any]) -> Runner:
        from pathlib import Path

        from tether.orchestrator import Orchestrator, ScriptedMain, ScriptedRunner
        from tether.orchestrator import demo as d

        root = Path(str(state.get("workdir") or "."))
        root.mkdir(parents=True, exist_ok=True)
        if not (root / "stats.py").exists():
            d.make_sample_repo(root)
        roles = {
            "TEST": d.run_tests_role,
            "DEV": d.dev_role(),
            "REVIEW": d.review_role,
            "FINISH_REVIEW": d.finish_review_role,
        }
        orch = Orchestrator(root, store, main=ScriptedMain(d.rule_main), runners=ScriptedRunner(roles))
        return orch.runner()

    return Entry(name="orchestrate-demo", factory=factory, prepare=prepare)
