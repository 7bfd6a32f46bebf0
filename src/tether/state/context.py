"""ExecutionContext: one run's state, changed only through reducers.

Besides holding the state, the context records *what changed since it was last
checkpointed*, as replayable ops. A store then writes those ops (a delta) instead of
the whole state: the delta comes from the reducers, never from diffing two states.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tether.errors import InvalidStateValue
from tether.state.reducers import Op, Reducer, ReducerRegistry, default_registry
from tether.state.values import check_run_id, check_text, check_value, copy_value

__all__ = ["Changes", "Delta", "ExecutionContext"]

_MISSING = object()
_new_tuple = tuple.__new__


@dataclass(slots=True, kw_only=True)
class Delta:
    """What a context holds that its store does not have yet."""

    ops: list[Op] = field(default_factory=list)
    executed: list[str] = field(default_factory=list)
    full: bool = False
    """True when only a whole-state write is correct (new run, restore, delete)."""


_CLEAN = Delta()
"""A context's delta right after a save, shared and never changed: the first change
records into a new one (most commits hand over nothing more than this)."""


class Changes(NamedTuple):
    """What a context hands its store at a commit (:meth:`ExecutionContext.take_changes`).

    Everything the store needs to write the next version, taken under the context's lock
    so that the ops and the state agree: the ops since ``version``, or (``full``, or when
    the store decides to compact) the whole state they lead to.
    """

    run_id: str
    version: int
    """The stored version these changes follow (0: the run was never saved)."""
    ops: tuple[Op, ...]
    executed: tuple[str, ...]
    """Node ids marked executed since ``version``."""
    full: bool
    """Only a whole-state write is correct (new run, restore, delete)."""
    state: Mapping[str, Any]
    """The state the changes lead to, read-only: the context's own dict, lent (the context
    copies it before its next change while the changes are out), its values shared
    (reducers replace values, they never change one in place)."""
    all_executed: tuple[str, ...]
    """Every node id marked executed, in order."""
    datetimes: bool | None
    """Whether any value of ``state`` holds a datetime (None: not known)."""
    write_id: str = ""
    """The id of an earlier attempt at these same changes whose outcome is not known
    (see :meth:`ExecutionContext.restore_changes`); "" for a first attempt."""
    followed: bool = False
    """With ``write_id``: more changes were recorded after these, and wait their turn (the
    store commits them next, once these are settled)."""


class ExecutionContext:
    """The state of one run, safe to use from several threads.

    ``get`` returns the stored object itself, without a copy, so a 10 MB history is
    cheap to read; treat it as read-only and change state with ``put``/``merge``
    (in-place edits would be neither checked nor checkpointed). ``snapshot()`` returns a
    deep copy.
    """

    __slots__ = (
        "_dated",
        "_delta",
        "_executed",
        "_executed_set",
        "_lent",
        "_lock",
        "_reducers",
        "_state",
        "_unsettled",
        "node_id",
        "run_id",
        "version",
    )

    def __init__(
        self,
        run_id: str,
        state: Mapping[str, Any] | None = None,
        *,
        reducers: ReducerRegistry | None = None,
    ) -> None:
        check_run_id(run_id)
        self.run_id = run_id
        self.node_id: str | None = None
        self.version = 0
        """The stored version this context matches (0: never saved)."""
        self._reducers = reducers if reducers is not None else default_registry()
        self._lock = threading.RLock()
        self._state: dict[str, Any] = {}
        self._executed: list[str] = []
        self._executed_set: set[str] = set()
        self._delta = Delta(full=True)
        self._lent = 0
        """How many taken changes hold ``_state`` itself (not yet ``saved`` or given back):
        while any does, a change copies the dict first, so what they hold stays as taken."""
        self._unsettled: Changes | None = None
        """Changes whose save failed, its outcome unknown: they go first at the next commit,
        with their write id, so that if they did land they are found and not stored twice."""
        self._dated: set[str] | None = set()
        """Keys whose value holds a datetime (None: not known, for a state read back from a
        store): a store encodes a state without any by a faster encoder."""
        if state:
            for key in state:
                _check_key(key)
            self._dated = {key for key, value in state.items() if check_value(value, key=key)}
            self._state = copy_value(dict(state))

    # -- reading -------------------------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any:
        with self._lock:
            return self._state.get(key, default)

    def __getitem__(self, key: str) -> Any:
        with self._lock:
            return self._state[key]

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._state

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._state)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        with self._lock:
            return len(self._state)

    @property
    def reducers(self) -> ReducerRegistry:
        return self._reducers

    @property
    def executed_node_ids(self) -> list[str]:
        with self._lock:
            return list(self._executed)

    # -- writing -------------------------------------------------------------------
    def put(self, key: str, value: Any) -> None:
        """Overwrite one key, whatever its reducer."""
        _check_key(key)
        self.put_trusted(key, value, check_value(value, key=key))

    def put_trusted(self, key: str, value: Any, dated: bool = False) -> None:
        """``put`` for a value already known to be valid (the runtime's own bookkeeping):
        skips the walk that ``put`` does first. ``dated``: whether it holds a datetime."""
        _check_key(key)
        with self._lock:
            if self._lent:
                self._own()
            self._state[key] = value
            self._record(key, "set", value)
            _flag(self._dated, key, dated)

    def merge(self, update: Mapping[str, Any]) -> None:
        """Apply each key's reducer; all keys or none (the update is checked first)."""
        dated: set[str] = set()
        for key, value in update.items():
            _check_key(key)
            if check_value(value, key=key):
                dated.add(key)
        self.merge_trusted(update, dated)

    def merge_trusted(self, update: Mapping[str, Any], dated: set[str] | None = None) -> None:
        """``merge`` for values already known to be valid (the runtime's own bookkeeping,
        built from str/int/float only): skips the walk that ``merge`` does first.
        ``dated``: the keys of ``update`` whose value holds a datetime."""
        with self._lock:
            new: dict[str, Any] = {}
            ops: list[Op] = []
            flags: dict[str, bool] = {}
            for key, value in update.items():
                red = self._reducers.reducer_for(key)
                old = new[key] if key in new else self._state.get(key)
                try:
                    result = red(old, value)
                except InvalidStateValue as exc:
                    raise InvalidStateValue(f"state key {key!r}: {exc}", key=key) from exc
                op_name = getattr(red, "op", None)
                fresh = dated is not None and key in dated
                if op_name is None:
                    flags[key] = check_value(result, key=key)  # a user reducer may return anything
                    ops.append((key, "set", result))
                else:
                    norm = getattr(red, "normalise", None)
                    ops.append((key, op_name, norm(value) if norm else value))
                    # a built-in reducer's result is made of the old value and the new one
                    flags[key] = fresh or (op_name != "set" and _holds(self._dated, key))
                new[key] = result
            if self._lent:
                self._own()
            self._state.update(new)
            for key, op_name, arg in ops:
                self._record(key, op_name, arg)
            for key, flag in flags.items():
                _flag(self._dated, key, flag)

    def delete(self, key: str) -> None:
        with self._lock:
            if key in self._state:
                if self._lent:
                    self._own()
                del self._state[key]
                self._recording().full = True  # rare: a whole write is simpler than a del op
                _flag(self._dated, key, False)

    def mark_executed(self, node_id: str) -> None:
        """Record that a node finished; resume will skip it."""
        check_text(node_id, "node id")
        with self._lock:
            if node_id not in self._executed_set:
                self._executed.append(node_id)
                self._executed_set.add(node_id)
                self._recording().executed.append(node_id)
            self.node_id = node_id

    def register_reducer(self, key_or_pattern: str, reducer: Reducer | str) -> None:
        with self._lock:
            self._reducers.register(key_or_pattern, reducer)

    def _own(self) -> None:
        """Stop sharing the state with changes taken (they keep the dict as it was)."""
        self._state = dict(self._state)
        self._lent = 0

    def _recording(self) -> Delta:
        """The delta to record a change into (a new one after a save)."""
        d = self._delta
        if d is _CLEAN:
            d = self._delta = Delta()
        return d

    def _record(self, key: str, op: str, arg: Any) -> None:
        d = self._delta
        if d.full:
            return
        if d is _CLEAN:
            d = self._delta = Delta()
        if op == "set":  # an overwrite makes earlier ops on the key dead weight
            d.ops = [o for o in d.ops if o[0] != key]
        d.ops.append((key, op, arg))

    # -- whole state ---------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """A deep copy of the state, safe to keep or send anywhere."""
        with self._lock:
            return copy_value(self._state)  # type: ignore[no-any-return]

    def restore(self, data: Mapping[str, Any]) -> None:
        """Replace the whole state (the next checkpoint is a full one)."""
        dated: set[str] = set()
        for key, value in data.items():
            _check_key(key)
            if check_value(value, key=key):
                dated.add(key)
        with self._lock:
            self._state = copy_value(dict(data))
            self._lent = 0
            self._dated = dated
            self._delta = Delta(full=True, executed=list(self._delta.executed))

    # -- the hand-off to a store ------------------------------------------------------
    @classmethod
    def from_stored(
        cls,
        run_id: str,
        state: dict[str, Any],
        executed: list[str],
        *,
        version: int,
        node_id: str | None,
        reducers: ReducerRegistry | None = None,
    ) -> ExecutionContext:
        """A context continuing a stored version. ``state`` and ``executed`` become the
        context's own, neither copied nor checked: a store passes what it just decoded."""
        ctx = cls(run_id, reducers=reducers)
        ctx._state = state
        ctx._dated = None
        ctx._executed = executed
        ctx._executed_set = set(executed)
        ctx.version = version
        ctx.node_id = node_id
        ctx._delta = _CLEAN
        return ctx

    def pending(self) -> Delta:
        """The changes not yet stored (a view; do not mutate)."""
        with self._lock:
            if self._unsettled is None:
                return self._delta
            return _merged(self._unsettled, self._delta)

    @property
    def dirty(self) -> bool:
        with self._lock:
            d = self._delta
            return self._unsettled is not None or d.full or bool(d.ops) or bool(d.executed)

    def state_view(self) -> dict[str, Any]:
        """The live state, not copied: for reading at once (results, reports), never to keep."""
        return self._state

    def take_changes(self) -> Changes:
        """Hand what changed since the last save to a store, and start recording anew.

        Give the changes back with :meth:`restore_changes` if the save fails, or confirm
        it with :meth:`saved`. Changes given back are handed out again first, alone and
        with their write id (``followed`` says whether more wait behind them)."""
        with self._lock:
            unsettled = self._unsettled
            if unsettled is not None:
                self._unsettled = None
                d = self._delta
                # still counted as lent if it holds ``_state`` (see restore_changes)
                return unsettled._replace(followed=d.full or bool(d.ops) or bool(d.executed))
            taken = self._delta
            self._delta = _CLEAN
            dated = self._dated
            self._lent += 1  # lent, not copied: the next change copies it if still out
            # every field given, in order: no call of the named tuple's Python ``__new__``
            return _new_tuple(
                Changes,
                (
                    self.run_id,
                    self.version,
                    tuple(taken.ops),
                    tuple(taken.executed),
                    taken.full,
                    self._state,
                    tuple(self._executed),
                    None if dated is None else bool(dated),
                    "",
                    False,
                ),
            )

    def restore_changes(self, changes: Changes) -> None:
        """A save of ``changes`` failed: put them back in front of anything recorded since.

        They stay apart from what is recorded later, with their write id: the next commit
        sends them first, as they were, so that if the failed attempt did land (its reply
        lost) the store finds it and stores nothing twice; the later changes follow at the
        version after it."""
        with self._lock:
            self._unsettled = changes._replace(followed=False)
            if changes.state is not self._state:
                self._lent = self._lent - 1 if self._lent > 1 else 0
            # else: still lent, now to the changes kept for the next commit

    def saved(self, version: int, *, datetimes: bool | None = None) -> None:
        """The changes last taken are stored as ``version``. ``datetimes``: what the store
        found, walking the state, when the changes did not say (False: none holds one)."""
        with self._lock:
            self.version = version
            if self._lent:
                self._lent -= 1
            if datetimes is False and self._dated is None:
                self._dated = set()

    def _holds_datetimes(self) -> bool:
        """Whether any value holds a datetime. Known from the checks values pass on their
        way in; a state read back from a store is walked once, here, when first asked."""
        with self._lock:
            if self._dated is None:
                self._dated = {key for key, value in self._state.items() if check_value(value, key=key)}
            return bool(self._dated)

    def __repr__(self) -> str:
        return f"ExecutionContext(run_id={self.run_id!r}, version={self.version}, keys={len(self)})"


def _merged(first: Changes, later: Delta) -> Delta:
    """``first`` and then ``later`` as one delta (an overwrite drops earlier ops on its key)."""
    merged = Delta(ops=list(first.ops), executed=list(first.executed), full=first.full or later.full)
    for key, op, arg in later.ops:
        if op == "set":
            merged.ops = [o for o in merged.ops if o[0] != key]
        merged.ops.append((key, op, arg))
    merged.executed.extend(later.executed)
    if merged.full:
        merged.ops = []
    return merged


def _flag(dated: set[str] | None, key: str, holds: bool) -> None:
    """Record whether ``key``'s value holds a datetime (nothing to do while not known)."""
    if dated is not None:
        if holds:
            dated.add(key)
        else:
            dated.discard(key)


def _holds(dated: set[str] | None, key: str) -> bool:
    """Whether ``key``'s value may hold a datetime: yes when not known."""
    return dated is None or key in dated


def _check_key(key: object) -> None:
    if type(key) is not str or not key:
        raise InvalidStateValue(f"state keys must be non-empty str, got {key!r}")
    if not key.isascii():
        check_text(key, "state key")
