"""ExecutionContext: one run's state, changed only through reducers.

Besides holding the state, the context records *what changed since it was last
checkpointed*, as replayable ops. A store then writes those ops (a delta) instead of
the whole state: the delta comes from the reducers, never from diffing two states.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.errors import InvalidStateValue
from tether.state.model import _NO_CHAIN, ChainStats
from tether.state.reducers import Op, Reducer, ReducerRegistry, default_registry
from tether.state.values import check_run_id, check_text, check_value, copy_value

__all__ = ["Delta", "ExecutionContext"]

_MISSING = object()


@dataclass(slots=True, kw_only=True)
class Delta:
    """What a context holds that its store does not have yet."""

    ops: list[Op] = field(default_factory=list)
    executed: list[str] = field(default_factory=list)
    full: bool = False
    """True when only a whole-state write is correct (new run, restore, delete)."""


class ExecutionContext:
    """The state of one run, safe to use from several threads.

    ``get`` returns the stored object itself, without a copy, so a 10 MB history is
    cheap to read; treat it as read-only and change state with ``put``/``merge``
    (in-place edits would be neither checked nor checkpointed). ``snapshot()`` returns a
    deep copy.
    """

    __slots__ = (
        "_chain",
        "_dated",
        "_delta",
        "_executed",
        "_executed_set",
        "_lock",
        "_reducers",
        "_state",
        "_tail",
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
        self._chain = _NO_CHAIN
        self._tail: list[tuple[bytes, int, int]] | None = []
        """The last rows stored after the last full one, oldest first, ending at ``version``
        (None: not known): what the store may pack into its next segment row (see
        ``stores.base.Carrier``)."""
        self._dated: set[str] | None = set()
        """Keys whose value holds a datetime (None: not known, for a state read back from a
        store). A full checkpoint of a state without any is encoded by the faster encoder."""
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
        dated = check_value(value, key=key)
        with self._lock:
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
        self._merge_checked(update, dated)

    def _merge_checked(self, update: Mapping[str, Any], dated: set[str] | None = None) -> None:
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
            self._state.update(new)
            for key, op_name, arg in ops:
                self._record(key, op_name, arg)
            for key, flag in flags.items():
                _flag(self._dated, key, flag)

    def delete(self, key: str) -> None:
        with self._lock:
            if key in self._state:
                del self._state[key]
                self._delta.full = True  # rare: a whole write is simpler than a del op
                _flag(self._dated, key, False)

    def mark_executed(self, node_id: str) -> None:
        """Record that a node finished; resume will skip it."""
        check_text(node_id, "node id")
        with self._lock:
            if node_id not in self._executed_set:
                self._executed.append(node_id)
                self._executed_set.add(node_id)
                self._delta.executed.append(node_id)
            self.node_id = node_id

    def register_reducer(self, key_or_pattern: str, reducer: Reducer | str) -> None:
        with self._lock:
            self._reducers.register(key_or_pattern, reducer)

    def _record(self, key: str, op: str, arg: Any) -> None:
        if self._delta.full:
            return
        if op == "set":  # an overwrite makes earlier ops on the key dead weight
            self._delta.ops = [o for o in self._delta.ops if o[0] != key]
        self._delta.ops.append((key, op, arg))

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
            self._dated = dated
            self._delta = Delta(full=True, executed=list(self._delta.executed))

    # -- used by stores ------------------------------------------------------------
    def pending(self) -> Delta:
        """The changes not yet stored (a view; do not mutate)."""
        with self._lock:
            return self._delta

    @property
    def dirty(self) -> bool:
        with self._lock:
            d = self._delta
            return d.full or bool(d.ops) or bool(d.executed)

    def _state_ref(self) -> dict[str, Any]:
        return self._state

    def _holds_datetimes(self) -> bool:
        """Whether any value holds a datetime (what the encoder must know; callers hold
        ``_lock``). Known from the checks values pass on their way in; a state read back
        from a store is walked once, here, the first time it is asked."""
        if self._dated is None:
            self._dated = {key for key, value in self._state.items() if check_value(value, key=key)}
        return bool(self._dated)

    def _mark_saved(
        self, version: int, chain: ChainStats, tail: list[tuple[bytes, int, int]] | None = None
    ) -> None:
        with self._lock:
            self.version = version
            self._chain = chain
            self._tail = tail

    def _take(self) -> Delta:
        """Hand the current delta to a store and start a new one for later changes.

        Callers hold ``_lock`` while taking and encoding, so the encoded state is
        exactly the state the taken delta leads to.
        """
        with self._lock:
            taken = self._delta
            self._delta = Delta(full=False)
            return taken

    def _give_back(self, taken: Delta) -> None:
        """A save failed: put its ops back in front of anything recorded since."""
        with self._lock:
            later = self._delta
            merged = Delta(
                ops=list(taken.ops),
                executed=list(taken.executed),
                full=taken.full or later.full,
            )
            for key, op, arg in later.ops:
                if op == "set":
                    merged.ops = [o for o in merged.ops if o[0] != key]
                merged.ops.append((key, op, arg))
            merged.executed.extend(later.executed)
            if merged.full:
                merged.ops = []
            self._delta = merged

    def _load(
        self,
        *,
        state: dict[str, Any],
        executed: list[str],
        version: int,
        node_id: str | None,
        chain: ChainStats,
        tail: list[tuple[bytes, int, int]] | None = None,
    ) -> None:
        with self._lock:
            self._state = state
            self._dated = None
            self._executed = executed
            self._executed_set = set(executed)
            self.version = version
            self.node_id = node_id
            self._chain = chain
            self._tail = tail
            self._delta = Delta()

    @property
    def chain(self) -> ChainStats:
        with self._lock:
            return self._chain

    def __repr__(self) -> str:
        return f"ExecutionContext(run_id={self.run_id!r}, version={self.version}, keys={len(self)})"


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
