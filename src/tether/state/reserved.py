"""The runtime's own part of a run's state, kept under one reserved key.

A run's state is the user's: their keys, their reducers. The runtime keeps what it
needs to drive, resume and explain a run under the single key :data:`RESERVED`
(``"_tether"``), so that no user key can collide with it and a user never has to know
its names::

    todo              {step id: {name, phase, status, attempts}} (dict-merged per step)
    event_log         retries, rollback actions, decisions, routes (appended)
    failure_report    the last failure report (dict) or None
    pending_decision  a failure report waiting for retry/skip/replan/abort, or None
    lease             who executes the run now: {owner, host, pid, expires_at, drive}
    pause_reason      why the run is PAUSED or INTERRUPTED, or None
    route             the steps a ``goto`` queued, and visits per step: {pending, visits, total}

The part is changed through one replayable reducer (:data:`REDUCER`, registered by
:func:`~tether.state.reducers.default_registry`): ``todo`` merges, ``event_log``
appends, ``route`` takes a routing step (below) or is overwritten by a dict, every other
field is overwritten, and a delta stores only the update, so appending one event to a
long log writes one event.

A routed step writes its routing as ``[left, *chosen]`` (:func:`route_step`), not the
route it makes: ``left`` is the index in the queue of the entry the step leaves (-1:
none), ``chosen`` the steps its ``goto`` calls put in front, each counted as one visit.
A run loops for hundreds of steps: rewriting the queue and every step's visits each time
was the largest share of what an orchestration stored beyond its final state (see
``benchmarks/README.md``, ``bench_storage.py``). Runs that stored whole routes (dicts) replay
as before.

Runs written before this layout kept these fields as top-level keys (``_lease`` for
the lease, ``_route`` for the route, which stayed there a while longer). :func:`runtime_state`
reads both shapes, and :func:`upgrade_context` moves an old run's fields under the reserved
key when the run is resumed. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Union

from tether.errors import ConfigError
from tether.state.reducers import replayable

if TYPE_CHECKING:
    from tether.state.context import ExecutionContext

__all__ = [
    "EVENT_LOG",
    "FAILURE_REPORT",
    "FIELDS",
    "LEASE",
    "OP",
    "PAUSE_REASON",
    "PENDING_DECISION",
    "REDUCER",
    "RESERVED",
    "ROUTE",
    "TODO",
    "check_user_keys",
    "is_legacy",
    "merge_part_into",
    "release_lease",
    "route_step",
    "runtime_get",
    "runtime_state",
    "runtime_update",
    "upgrade_context",
    "without_lease",
]

RESERVED = "_tether"
"""The one state key the runtime owns; a user key of that name is refused."""

TODO = "todo"
EVENT_LOG = "event_log"
FAILURE_REPORT = "failure_report"
PENDING_DECISION = "pending_decision"
LEASE = "lease"
PAUSE_REASON = "pause_reason"
ROUTE = "route"
FIELDS = frozenset({TODO, EVENT_LOG, FAILURE_REPORT, PENDING_DECISION, LEASE, PAUSE_REASON, ROUTE})

_LEGACY = {
    "todo": TODO,
    "event_log": EVENT_LOG,
    "failure_report": FAILURE_REPORT,
    "pending_decision": PENDING_DECISION,
    "_lease": LEASE,
    "pause_reason": PAUSE_REASON,
    "_route": ROUTE,
}
"""Top-level key of the previous layout -> field under :data:`RESERVED`."""
_LEGACY_MARK = "_lease"
"""Every run the previous runtime wrote has this key (a user's ``todo`` alone does not
make a state the runtime's)."""
_LEGACY_ROUTE = "_route"
"""Runs written with the reserved key but before the route moved under it keep it here."""


_MISSING: Any = object()


_Readable = Union[Mapping[str, Any], "ExecutionContext"]
"""A state dict or a context: both answer ``get``."""


def route_step(route: Any, step: list[Any]) -> dict[str, Any]:
    """The route (``{pending, visits[, total]}``) a routing step ``[left, *chosen]`` makes
    of ``route``: the queue's entry at index ``left`` removed (none when out of range, -1),
    ``chosen`` put in front in their order, one visit counted for each (and the ``total``
    of routes written before the visits' sum replaced it, when there is one). A new dict:
    ``route`` is not changed."""
    old = route if type(route) is dict else {}
    left, chosen = step[0], step[1:]
    pending = list(old.get("pending") or ())
    if type(left) is int and 0 <= left < len(pending):
        del pending[left]
    visits = dict(old.get("visits") or {})
    for target in chosen:
        visits[target] = int(visits.get(target, 0)) + 1
    new = {**old, "pending": [*chosen, *pending], "visits": visits}
    if "total" in old:
        new["total"] = int(old["total"]) + len(chosen)
    return new


def _merge_part(old: Any, update: Any) -> dict[str, Any]:
    part: dict[str, Any] = dict(old) if type(old) is dict else {}
    for name, value in update.items():
        if name == TODO:
            prev = part.get(TODO)
            part[TODO] = {**prev, **value} if type(prev) is dict else dict(value)
        elif name == EVENT_LOG:
            prev = part.get(EVENT_LOG)
            part[EVENT_LOG] = prev + list(value) if type(prev) is list else list(value)
        elif name == ROUTE and type(value) is list:
            part[ROUTE] = route_step(part.get(ROUTE), value)
        else:
            part[name] = value
    return part


OP = "tether.state.reserved:part"
"""The op name of :data:`REDUCER` in stored deltas."""
REDUCER = replayable(OP, _merge_part)
"""The reducer of :data:`RESERVED`: merges ``todo``, appends ``event_log``, applies a
routing step to ``route``, overwrites the rest."""


def merge_part_into(part: dict[str, Any], update: Mapping[str, Any]) -> None:
    """:data:`REDUCER`'s update applied in place, for replaying stored deltas into a freshly
    decoded state (which nothing else references): no copy of a long TODO list per op."""
    for name, value in update.items():
        prev = part.get(name)
        if name == TODO and type(prev) is dict:
            prev.update(value)
        elif name == EVENT_LOG and type(prev) is list:
            prev.extend(value)
        elif name == ROUTE and type(value) is list:
            part[ROUTE] = route_step(prev, value)
        else:
            part[name] = value


def is_legacy(state: _Readable) -> bool:
    """Whether ``state`` is a run written before the reserved key (top-level ``_lease``)."""
    return state.get(RESERVED) is None and state.get(_LEGACY_MARK, _MISSING) is not _MISSING


def runtime_state(state: _Readable) -> Mapping[str, Any]:
    """The runtime's part of ``state`` (a state dict or a context), read-only; a run of the
    previous layout is read from its top-level keys."""
    part = state.get(RESERVED)
    if type(part) is dict:
        return part
    if is_legacy(state):
        return {
            new: state.get(old) for old, new in _LEGACY.items() if state.get(old, _MISSING) is not _MISSING
        }
    return {}


def runtime_get(state: _Readable, name: str, default: Any = None) -> Any:
    """One field of the runtime's part (``default`` when absent or None)."""
    value = runtime_state(state).get(name)
    return default if value is None else value


def runtime_update(**fields: Any) -> dict[str, Any]:
    """A state update (for ``merge``) that changes the given fields of the runtime's part."""
    unknown = set(fields) - FIELDS
    if unknown:
        raise ConfigError(f"not a field of the runtime's state: {sorted(unknown)}; use {sorted(FIELDS)}")
    return {RESERVED: fields}


def check_user_keys(keys: Iterable[str], *, where: str = "state") -> None:
    """Refuse a user's key equal to :data:`RESERVED`: the runtime's part is not theirs to write."""
    if RESERVED in keys:
        raise ConfigError(
            f"{where} uses the key {RESERVED!r}, which tether reserves for its own bookkeeping "
            "(TODO list, event log, lease); rename the key"
        )


def without_lease(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` with no runner's lease in it (a copy when there was one), either layout."""
    part = state.get(RESERVED)
    if type(part) is dict and part.get(LEASE) is not None:
        return {**state, RESERVED: {**part, LEASE: None}}
    if state.get(_LEGACY_MARK) is not None:
        return {**state, _LEGACY_MARK: None}
    return state


def release_lease(ctx: ExecutionContext) -> None:
    """Drop a runner's lease from ``ctx`` (no process executes what is written next), either layout."""
    if is_legacy(ctx):
        if ctx.get(_LEGACY_MARK) is not None:
            ctx.put(_LEGACY_MARK, None)
    elif runtime_get(ctx, LEASE) is not None:
        ctx.merge(runtime_update(lease=None))


def upgrade_context(ctx: ExecutionContext) -> bool:
    """Move an old-layout run's runtime keys under :data:`RESERVED` in ``ctx``. Returns
    whether anything moved."""
    if is_legacy(ctx):
        part = dict(runtime_state(ctx))
        for old in _LEGACY:
            ctx.delete(old)
        ctx.merge({RESERVED: part})
        return True
    route = ctx.get(_LEGACY_ROUTE, _MISSING)
    if route is _MISSING:
        return False
    ctx.delete(_LEGACY_ROUTE)
    if route is not None and runtime_get(ctx, ROUTE) is None:
        ctx.merge(runtime_update(route=route))
    return True
