"""Reducers: the only way state changes, and therefore the source of every delta.

A reducer combines a key's old value with an update. The built-in ones are also
*replayable*: they have an ``op`` name, and applying the same op to the same argument
gives the same result, so a checkpoint can store ``(key, op, update)`` instead of the
whole new value. Appending one message to a 10 MB history then writes one message.

A user reducer that is a plain callable is not replayable; its result is recorded as a
``set`` of the key's new value, which is correct but not compact.

Reducers never mutate their inputs: callers may hold references to old values.
"""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from tether.errors import ConfigError, InvalidStateValue

__all__ = [
    "APPEND",
    "COUNTER",
    "MERGE",
    "OVERWRITE",
    "Op",
    "Reducer",
    "ReducerRegistry",
    "apply_op",
    "default_registry",
    "replayable",
    "upsert_by",
]

Op = tuple[str, str, Any]
"""One recorded change: ``(key, op_name, argument)``; ``op_name`` is a replayable op."""


@runtime_checkable
class Reducer(Protocol):
    """Combines a key's old value (``None`` when absent) with an update."""

    def __call__(self, old: Any, update: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class _Builtin:
    """A replayable reducer: ``op`` names it in stored deltas."""

    op: str
    fn: Callable[[Any, Any], Any]
    normalise: Callable[[Any], Any] = lambda u: u

    def __call__(self, old: Any, update: Any) -> Any:
        return self.fn(old, self.normalise(update))


def _as_list(update: Any) -> list[Any]:
    return update if type(update) is list else [update]


def _append(old: Any, update: list[Any]) -> list[Any]:
    if old is None:
        return list(update)
    if type(old) is not list:
        raise InvalidStateValue(f"append needs a list to extend, found {type(old).__name__}")
    return old + update


def _overwrite(old: Any, update: Any) -> Any:
    return update


def _merge(old: Any, update: Any) -> dict[str, Any]:
    if type(update) is not dict:
        raise InvalidStateValue(f"merge needs a dict update, got {type(update).__name__}")
    if old is None:
        return dict(update)
    if type(old) is not dict:
        raise InvalidStateValue(f"merge needs a dict to update, found {type(old).__name__}")
    return {**old, **update}


def _count(old: Any, update: Any) -> int | float:
    if type(update) not in (int, float):
        raise InvalidStateValue(f"counter needs a number, got {type(update).__name__}")
    total: int | float = (old or 0) + update
    return total


def _upsert(id_key: str) -> Callable[[Any, Any], list[Any]]:
    def upsert(old: Any, update: list[Any]) -> list[Any]:
        items = [] if old is None else list(old)
        where = {item.get(id_key): i for i, item in enumerate(items) if type(item) is dict and id_key in item}
        for item in update:
            if type(item) is not dict or id_key not in item:
                raise InvalidStateValue(f"upsert_by({id_key!r}) needs dicts with {id_key!r}")
            pos = where.get(item[id_key])
            if pos is None:
                where[item[id_key]] = len(items)
                items.append(item)
            else:
                items[pos] = item
        return items

    return upsert


APPEND = _Builtin("append", _append, _as_list)
"""Extend a list (a non-list update is appended as one item)."""
OVERWRITE = _Builtin("set", _overwrite)
"""Replace the old value."""
MERGE = _Builtin("merge", _merge)
"""Shallow dict merge: the update's keys win."""
COUNTER = _Builtin("add", _count)
"""Add a number to the old value (absent counts as 0)."""


def upsert_by(id_key: str = "id") -> Reducer:
    """Add-or-replace dict items in a list by their ``id_key`` (order of first arrival)."""
    return _Builtin(f"upsert:{id_key}", _upsert(id_key), _as_list)


_CUSTOM_OPS: dict[str, Callable[[Any, Any], Any]] = {}


def replayable(op: str, fn: Callable[[Any, Any], Any]) -> Reducer:
    """Make a pure ``fn(old, update)`` a reducer whose deltas store the update, not the result.

    A plain callable reducer is recorded as a ``set`` of the key's whole new value; a
    replayable one is recorded as ``(key, op, update)`` and replayed by calling ``fn``
    again, so a step that folds a small update into a big value writes only the update.
    ``fn`` must be deterministic (put timestamps in the update, not in ``fn``).

    ``op`` names the reducer in stored checkpoints as ``"module:name"``: a process that
    loads such a run must have called ``replayable`` with the same name first (modules
    under ``tether.`` are imported on demand).
    """
    module, _, name = op.partition(":")
    if not module or not name or op.startswith("upsert:"):
        raise ConfigError(f"a replayable op is named 'module:name', got {op!r}")
    _CUSTOM_OPS[op] = fn
    return _Builtin(op, fn)


def _custom_op(op: str) -> Callable[[Any, Any], Any]:
    fn = _CUSTOM_OPS.get(op)
    module = op.partition(":")[0]
    if fn is None and module.startswith("tether."):
        try:
            importlib.import_module(module)
        except ImportError:
            pass
        fn = _CUSTOM_OPS.get(op)
    if fn is None:
        raise ValueError(f"unknown op {op!r} (import the module that registers it first)")
    return fn


_NAMED: dict[str, Reducer] = {
    "append": APPEND,
    "overwrite": OVERWRITE,
    "set": OVERWRITE,
    "merge": MERGE,
    "dict_merge": MERGE,
    "counter": COUNTER,
    "add": COUNTER,
    "upsert": upsert_by("id"),
}


def _resolve(reducer: Reducer | str) -> Reducer:
    if isinstance(reducer, str):
        if reducer.startswith("upsert:"):
            return upsert_by(reducer.partition(":")[2])
        try:
            return _NAMED[reducer]
        except KeyError:
            names = ", ".join(sorted(_NAMED))
            raise ConfigError(f"unknown reducer {reducer!r}; use one of {names}") from None
    if not callable(reducer):
        raise ConfigError(f"a reducer must be callable or a name, got {reducer!r}")
    return reducer


def apply_op(old: Any, op: str, arg: Any) -> Any:
    """Replay one stored op; unknown ops mean a newer writer (or corruption)."""
    if op == "set":
        return arg
    if op == "append":
        return _append(old, arg)
    if op == "merge":
        return _merge(old, arg)
    if op == "add":
        return _count(old, arg)
    if op.startswith("upsert:"):
        return _upsert(op[7:])(old, arg)
    return _custom_op(op)(old, arg)


class ReducerRegistry:
    """Which reducer applies to which key: exact keys first, then glob patterns.

    Later registrations win over earlier ones and over the defaults, so a user can
    override ``messages`` or ``*_output`` without touching tether.
    """

    __slots__ = ("_exact", "_matched", "_patterns")

    def __init__(self) -> None:
        self._exact: dict[str, Reducer] = {}
        self._patterns: list[tuple[str, Reducer]] = []
        self._matched: dict[str, Reducer] = {}
        """Keys resolved through a pattern: a run merges the same few keys at every step,
        and a glob match costs more than the merge."""

    def register(self, key_or_pattern: str, reducer: Reducer | str) -> ReducerRegistry:
        """Use ``reducer`` for a key, or for every key matching a glob (``*_output``)."""
        red = _resolve(reducer)
        if key_or_pattern.startswith("_"):
            from tether.state.reserved import REDUCER, check_user_keys

            if red is not REDUCER:
                check_user_keys((key_or_pattern,), where="a reducer registration")
        if any(c in key_or_pattern for c in "*?["):
            self._patterns.insert(0, (key_or_pattern, red))
        else:
            self._exact[key_or_pattern] = red
        self._matched = {}
        return self

    def reducer_for(self, key: str) -> Reducer:
        red = self._exact.get(key) or self._matched.get(key)
        if red is not None:
            return red
        red = next((r for pattern, r in self._patterns if fnmatch.fnmatchcase(key, pattern)), OVERWRITE)
        if self._patterns and len(self._matched) < 1024:  # bounded: keys may be many
            self._matched[key] = red
        return red

    def copy(self) -> ReducerRegistry:
        new = ReducerRegistry()
        new._exact = dict(self._exact)
        new._patterns = list(self._patterns)
        return new

    def update(self, items: Iterable[tuple[str, Reducer | str]]) -> ReducerRegistry:
        for key, red in items:
            self.register(key, red)
        return self


def default_registry() -> ReducerRegistry:
    """``messages`` and ``execution_history`` append, the rest overwrite; the runtime's
    reserved key has its own reducer (see :mod:`tether.state.reserved`)."""
    from tether.state.reserved import REDUCER, RESERVED  # it builds its reducer from this module

    return (
        ReducerRegistry()
        .register("*_output", OVERWRITE)
        .register("messages", APPEND)
        .register("execution_history", APPEND)
        .register(RESERVED, REDUCER)
    )
