"""Workflows: steps with dependencies, grouped in phases.

A step is a plain Python callable, sync or async, that receives a
:class:`StepContext` and returns a state update (a mapping merged through the
reducers) or None. Steps must be idempotent or register compensations: a step that
was running when its process died runs again on resume.

Dynamic routing: by default steps run in declaration order as their dependencies allow
(a DAG). A step may instead choose what runs next with ``StepContext.goto(...)``, one
step or several (run in the order given), including steps that already ran: loops.
Routing state lives in the runtime's part of the run's state (its ``route``: the queue of
chosen steps and a visit count per step) and every decision is appended to the run's event log, both written
with the step's own checkpoint, so a resumed run continues on the same path. A step writes
what it changed in the route (the entry it leaves, the steps it chose), not the route. Loops are
bounded per step (``Step.max_visits``) and per run (``Workflow.max_routed``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.errors import ConfigError
from tether.runtime.events import Event
from tether.runtime.failures import LogicError
from tether.state.reserved import ROUTE, runtime_get, runtime_update

if TYPE_CHECKING:
    from tether.state import ExecutionContext

__all__ = [
    "Compensation",
    "LoopLimitExceeded",
    "Phase",
    "RetryPolicy",
    "Step",
    "StepContext",
    "StepFn",
    "Workflow",
]

StepFn = Callable[["StepContext"], Mapping[str, Any] | None | Awaitable[Mapping[str, Any] | None]]
ErrorHandler = Callable[[BaseException, "StepContext"], Mapping[str, Any] | None]


class LoopLimitExceeded(LogicError):
    """A step routed past a loop bound (a step's ``max_visits`` or the run's ``max_routed``).

    A LOGIC failure: the run is rolled back to before the routing step and re-planned or
    reported, instead of looping for ever.
    """

    def __init__(self, message: str, *, step: str, limit: int) -> None:
        super().__init__(message)
        self.step = step
        self.limit = limit


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Retries of TRANSIENT failures: exponential backoff with jitter."""

    attempts: int = 3
    """Total tries, the first included."""
    initial: float = 0.5
    maximum: float = 10.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigError("RetryPolicy.attempts must be >= 1")


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One node of a workflow (one TODO item)."""

    id: str
    fn: StepFn
    name: str = ""
    deps: tuple[str, ...] = ()
    phase: str = "main"
    compressible: bool = True
    """False: its outputs are pinned in the context window."""
    retry: RetryPolicy | None = None
    timeout: float | None = None
    """Seconds the whole step may take (per attempt)."""
    idle_timeout: float | None = None
    """Seconds without ``StepContext.heartbeat()`` before the step is cancelled."""
    on_error: ErrorHandler | None = None
    """May turn a failure into a state update (returning None re-raises)."""
    pause_after: bool = False
    """Pause the run for a human once this step is done."""
    idempotent: bool = True
    """False: running it twice does harm (a payment, an e-mail). Its start is checkpointed
    first, and on resume after a crash inside it the run pauses with a report (retry,
    skip or inspect) instead of running it again."""
    max_visits: int | None = None
    """How many times ``goto`` may send the run to this step (None: only the run's bound)."""

    @property
    def title(self) -> str:
        return self.name or self.id


@dataclass(frozen=True, slots=True, kw_only=True)
class Phase:
    id: str
    name: str = ""


@dataclass(slots=True)
class Compensation:
    """An action that undoes part of a step, run in reverse order on rollback."""

    description: str
    fn: Callable[[], Any]
    kind: str = "undo_create"
    """undo_create | restore_modified | restore_deleted | restore_ui."""


@dataclass(slots=True)
class StepContext:
    """What a running step sees and can ask for."""

    run_id: str
    step: Step
    state: ExecutionContext
    attempt: int = 1
    compensations: list[Compensation] = field(default_factory=list)
    pause_requested: str | None = None
    finish_requested: tuple[str, str] | None = None
    last_heartbeat: float = field(default_factory=time.monotonic)
    workflow: Workflow | None = None
    """The workflow being run: ``goto`` checks targets and loop bounds against it."""
    _from_queue: bool = field(default=False, init=False, repr=False)
    _inserted: int = field(default=0, init=False, repr=False)
    _route: dict[str, Any] | None = field(default=None, init=False, repr=False)
    """The route as this step's ``goto`` calls left it, written once when it is done."""
    _events: list[dict[str, Any]] = field(default_factory=list, init=False, repr=False)
    """The route events of those calls, appended to the event log with the route."""
    _routed_in: int = field(default=0, init=False, repr=False)
    """The attempt those calls were made in: a failed attempt's choices are dropped."""

    def __post_init__(self) -> None:
        self._from_queue = self._queued_first()

    def _queued_first(self) -> bool:
        """Whether this step runs because it heads the routing queue (skipped ones aside)."""
        route = runtime_get(self.state, ROUTE)
        if not isinstance(route, dict):
            return False
        todo = runtime_get(self.state, "todo", {})
        for target in route.get("pending") or ():
            if (todo.get(target) or {}).get("status") != "skipped":
                return bool(target == self.step.id)
        return False

    def leave_route(self) -> None:
        """Called by the runner when the step is done: a step that ran from the routing
        queue leaves it in the same checkpoint that records it done, so a crash anywhere
        inside the step (or between its attempts) finds it still queued and runs it again.
        The steps this step's ``goto`` calls chose are written here too, with it: one route
        write a step, as a routing step ``[left, *chosen]`` (see
        :func:`~tether.state.reserved.route_step`), not the whole route."""
        self._forget_failed_attempts()
        chosen = (self._route or {}).get("pending", [])[: self._inserted]
        self._route, self._inserted = None, 0
        route = runtime_get(self.state, ROUTE)
        left = -1
        if self._from_queue:
            self._from_queue = False
            pending = (route.get("pending") or ()) if isinstance(route, dict) else ()
            # its entry: the first one in the queue as it was before this step's goto calls
            left = next((i for i, target in enumerate(pending) if target == self.step.id), -1)
        if not chosen and left < 0:
            return
        step = [left, *chosen]
        events: dict[str, Any] = {"event_log": self._events} if self._events else {}
        self._events = []
        # one write a step: the goto events, their targets and this step's leaving together
        self.state.merge(runtime_update(**events, route=step))

    def _forget_failed_attempts(self) -> None:
        """Drop what ``goto`` calls of an earlier attempt chose: that attempt failed."""
        if self._routed_in != self.attempt:
            self._route, self._inserted, self._events = None, 0, []
            self._routed_in = self.attempt

    def goto(self, *targets: str, reason: str = "") -> None:
        """Choose the step(s) that run next, in the order given, before any already queued.

        Targets may have run before (a loop). Raises ConfigError for an unknown step and
        :class:`LoopLimitExceeded` past a step's ``max_visits`` or the run's ``max_routed``.
        """
        if not targets:
            raise ConfigError("goto() needs at least one step id")
        self._forget_failed_attempts()
        route = dict(self._route if self._route is not None else runtime_get(self.state, ROUTE, {}))
        visits = dict(route.get("visits") or {})
        # the steps routed so far: the visits' sum (a route written before kept it as "total")
        total = int(route.get("total", sum(int(v) for v in visits.values()))) + len(targets)
        wf = self.workflow
        for target in targets:
            visits[target] = int(visits.get(target, 0)) + 1
            if wf is None:
                continue
            step = wf.get(target)
            if step is None:
                known = ", ".join(s.id for s in wf.steps)
                raise ConfigError(f"goto({target!r}) from {self.step.id!r}: no such step (steps: {known})")
            if step.max_visits is not None and visits[target] > step.max_visits:
                raise LoopLimitExceeded(
                    f"step {target!r} would run {visits[target]} times, over its max_visits="
                    f"{step.max_visits}; raise the bound or change the routing",
                    step=target,
                    limit=step.max_visits,
                )
        if wf is not None and total > wf.max_routed:
            raise LoopLimitExceeded(
                f"run {self.run_id!r} would route {total} steps, over the workflow's "
                f"max_routed={wf.max_routed}",
                step=self.step.id,
                limit=wf.max_routed,
            )
        pending = [*targets, *(route.get("pending") or [])]
        self._inserted += len(targets)
        detail = {"from": self.step.id, "to": list(targets), "reason": reason, "total": total}
        event = Event(kind="route", run_id=self.run_id, step=self.step.id, detail=detail)
        # (no "total": the visits' sum, which every checkpoint would rewrite) The route and the
        # event are kept here until the step is done (leave_route), and written with it.
        self._route = {"pending": pending, "visits": visits}
        self._events.append(event.to_dict())

    def get(self, key: str, default: Any = None) -> Any:
        return self.state.get(key, default)

    def heartbeat(self) -> None:
        """Tell the runner the step is alive (resets ``idle_timeout``)."""
        self.last_heartbeat = time.monotonic()

    def compensate(self, description: str, fn: Callable[[], Any], *, kind: str = "undo_create") -> None:
        """Register how to undo something this step did, should the step fail later."""
        self.compensations.append(Compensation(description, fn, kind))

    def pause(self, reason: str) -> None:
        """Ask for a human review once this step is done."""
        self.pause_requested = reason

    def finish(self, status: str = "COMPLETED", message: str = "") -> None:
        """End the run after this step (an agent said done or failed): the steps left
        are marked skipped and the run ends COMPLETED or FAILED."""
        if status not in ("COMPLETED", "FAILED"):
            raise ConfigError("finish() status must be COMPLETED or FAILED")
        self.finish_requested = (status, message)


class Workflow:
    """Steps with dependencies; ``Workflow.plan(...)`` for a plain ordered list."""

    def __init__(
        self,
        steps: Iterable[Step],
        *,
        name: str = "workflow",
        phases: Sequence[Phase] = (),
        max_routed: int = 10_000,
    ) -> None:
        if max_routed < 1:
            raise ConfigError("Workflow max_routed must be >= 1")
        self.name = name
        self.max_routed = max_routed
        """How many ``goto`` targets one run may queue in total (the bound on all loops)."""
        self.steps: list[Step] = list(steps)
        self._by_id: dict[str, Step] = {}
        self._phase_cache: dict[str, list[Step]] | None = None
        for step in self.steps:
            if not step.id:
                raise ConfigError("every step needs a non-empty id")
            if step.id in self._by_id:
                raise ConfigError(f"duplicate step id {step.id!r}")
            self._by_id[step.id] = step
        for step in self.steps:
            for dep in step.deps:
                if dep not in self._by_id:
                    raise ConfigError(f"step {step.id!r} depends on unknown step {dep!r}")
        self._check_acyclic()
        names = {p.id: p for p in phases}
        self.phases: list[Phase] = []
        for step in self.steps:
            if step.phase not in {p.id for p in self.phases}:
                self.phases.append(names.get(step.phase, Phase(id=step.phase)))

    @classmethod
    def plan(cls, steps: Iterable[Step], *, name: str = "plan", phases: Sequence[Phase] = ()) -> Workflow:
        """Each step depends on the one before it."""
        chained: list[Step] = []
        for step in steps:
            deps = step.deps or ((chained[-1].id,) if chained else ())
            chained.append(_with_deps(step, deps))
        return cls(chained, name=name, phases=phases)

    def _check_acyclic(self) -> None:
        state: dict[str, int] = {}

        def visit(sid: str, path: list[str]) -> None:
            if state.get(sid) == 2:
                return
            if state.get(sid) == 1:
                raise ConfigError(f"dependency cycle: {' -> '.join([*path, sid])}")
            state[sid] = 1
            for dep in self._by_id[sid].deps:
                visit(dep, [*path, sid])
            state[sid] = 2

        for step in self.steps:
            visit(step.id, [])

    def __getitem__(self, step_id: str) -> Step:
        return self._by_id[step_id]

    def phase_steps(self, phase: str) -> list[Step]:
        """The steps of one phase (cached: the workflow does not change)."""
        if self._phase_cache is None:
            cache: dict[str, list[Step]] = {}
            for step in self.steps:
                cache.setdefault(step.phase, []).append(step)
            self._phase_cache = cache
        return self._phase_cache.get(phase, [])

    def phase_settled(self, phase: str, done: set[str], skipped: set[str]) -> bool:
        """Every step of ``phase`` is done or skipped (checked from its last step back,
        where an unsettled one is most likely: one comparison in the common case)."""
        return all(s.id in done or s.id in skipped for s in reversed(self.phase_steps(phase)))

    def get(self, step_id: str) -> Step | None:
        return self._by_id.get(step_id)

    def __contains__(self, step_id: object) -> bool:
        return step_id in self._by_id

    def __len__(self) -> int:
        return len(self.steps)

    def next_step(
        self,
        done: set[str],
        skipped: set[str] | frozenset[str] = frozenset(),
        *,
        hint: int = 0,
        route: Mapping[str, Any] | None = None,
    ) -> Step | None:
        """The step a ``goto`` queued in ``route`` (the run's routing state) if any, else
        the first step (in declaration order) whose dependencies are all settled.

        ``hint``: an index before which every step is known to be settled (settled sets
        only grow during a run), so a long plan is not rescanned from the top each step.
        """
        if route:
            for target in route.get("pending") or ():
                if target not in skipped and target in self._by_id:  # a step skipped by decision
                    return self._by_id[target]
        settled = done | skipped
        for step in self.steps[hint:]:
            if step.id not in settled and all(d in settled for d in step.deps):
                return step
        return None

    def settled_prefix(self, settled: set[str], start: int = 0) -> int:
        """Index of the first step at or after ``start`` that is not settled."""
        i = start
        while i < len(self.steps) and self.steps[i].id in settled:
            i += 1
        return i

    def position(self, step_id: str) -> tuple[int, int]:
        """1-based position of a step and the total (for "3 of 12")."""
        ids = [s.id for s in self.steps]
        return ids.index(step_id) + 1, len(ids)

    def replace_remaining(self, done: set[str], new_steps: Iterable[Step]) -> Workflow:
        """A new workflow: the settled steps as they were, the rest replaced (re-plan)."""
        kept = [s for s in self.steps if s.id in done]
        fresh = list(new_steps)
        settled = {s.id for s in kept}
        chained: list[Step] = []
        for step in fresh:
            deps = tuple(d for d in step.deps if d in settled or d in {c.id for c in chained})
            chained.append(_with_deps(step, deps))
        return Workflow([*kept, *chained], name=self.name, phases=self.phases, max_routed=self.max_routed)


def _with_deps(step: Step, deps: tuple[str, ...]) -> Step:
    from dataclasses import replace

    return replace(step, deps=deps)
