"""Named workflows, resolved on the worker.

A message on the broker names a run, never code: the worker finds the run's workflow by
the name stored in the run (``_workflow``) in its own :class:`Registry`. Entries are
``Workflow`` objects (or functions returning one) given directly or as
``module:attribute`` strings, so a fleet is configured by what it imports, and a
message cannot make a worker run anything it was not told to.

The bundled agents are registered too (see :mod:`tether.workers.bundled`): ``deploy``
(the deployment agent), ``plan`` (the plan orchestrator), ``orchestrate`` (the multi-agent
orchestrator) and ``orchestrate-demo`` (the same, offline, with the demo's roles). Their
input names the model; a real one is built by the registry's ``model`` factory.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.errors import ConfigError
from tether.runtime import Runner, RunResult, Workflow
from tether.stores.base import CheckpointStore

__all__ = ["QUEUE_KEY", "WORKFLOW_KEY", "Entry", "Registry", "UnknownWorkflow", "load_target"]

WORKFLOW_KEY = "_workflow"
"""State key naming the registered workflow of a run (written when it is submitted)."""
QUEUE_KEY = "_queue"
"""State key naming the broker queue a submitted run belongs to (the sweeper re-enqueues
it there)."""

RunnerFactory = Callable[[CheckpointStore, Mapping[str, Any]], Runner]
"""Builds the runner of one run from the store and the run's state (its inputs)."""

Settle = Callable[[CheckpointStore, Mapping[str, Any], Runner, RunResult], Awaitable[RunResult]]
"""Looks at where a run stopped on a worker and may continue it with the runner (store,
the run's state at the message, the runner that executed it, its result)."""


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
    settle: Settle | None = None
    """What the workflow's own resume does after the runner's (the deploy agent probes a
    command a crash cut, and continues the run when the probe tells whether it ran)."""

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

    def __init__(
        self,
        entries: Iterable[Entry | Workflow | str] = (),
        *,
        bundled: bool = True,
        model: Callable[[Mapping[str, Any]], Any] | None = None,
    ) -> None:
        """``model`` builds the chat model of a bundled agent's run from its ``model`` input
        (``provider``, ``model``, ``endpoint``…); without it those runs need a scripted model."""
        self._entries: dict[str, Entry] = {}
        if bundled:
            from tether.workers.bundled import bundled_entries

            for entry in bundled_entries(model):
                self.add_entry(entry)
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
