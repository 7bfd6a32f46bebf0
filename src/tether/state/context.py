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
from tether.state.model import ChainStats
from tether.state.reducers import Op, Reducer, ReducerRegistry, default_registry
from tether.state.values import check_value, copy_value

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
    (in-place edits would not be checkpointed). ``snapshot()`` returns a deep copy.
    """

    __slots__ = (
        "_chain",
        "_delta",
        "_executed",
        "_executed_set",
        "_lock",
        "_reducers",
        "_state",
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
        self._chain = ChainStats()
        if state:
            for key, value in state.items():
                check_value(value, key=key)
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
        check_value(value, key=key)
        with self._lock:
            self._state[key] = value
            self._record(key, "set", value)

    def merge(self, update: Mapping[str, Any]) -> None:
        """Apply each key's reducer; all keys or none (the update is checked first)."""
        for key, value in update.items():
            _check_key(key)
            check_value(value, key=key)
        self._merge_checked(update)

    def _merge_checked(self, update: Mapping[str, Any]) -> None:
        """``merge`` for values already known to be valid (the runtime's own bookkeeping,
        built from str/int/float only): skips the walk that ``merge`` does first."""
        with self._lock:
            new: dict[str, Any] = {}
            ops: list[Op] = []
            for key, value in update.items():
                red = self._reducers.reducer_for(key)
                old = new[key] if key in new else self._state.get(key)
                try:
                    result = red(old, value)
                except InvalidStateValue as exc:
                    raise InvalidStateValue(f"state key {key!r}: {exc}", key=key) from exc
                op_name = getattr(red, "op", None)
                if op_name is None:
                    check_value(result, key=key)  # a user reducer may return anything
                    ops.append((key, "set", result))
                else:
                    norm = getattr(red, "normalise", None)
                    ops.append((key, op_name, norm(value) if norm else value))
                new[key] = result
            self._state.update(new)
            for key, op_name, arg in ops:
                self._record(key, op_name, arg)

    def delete(self, key: str) -> None:
        with self._lock:
            if key in self._state:
                del self._state[key]
                self._delta.full = True  # rare: a whole write is simpler than a del op

    def mark_executed(self, node_id: str) -> None:
        """Record that a node finished; resume will skip it."""
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
        for key, value in data.items():
            _check_key(key)
            check_value(value, key=key)
        with self._lock:
            self._state = copy_value(dict(data))
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

    def _mark_saved(self, version: int, chain: ChainStats) -> None:
        with self._lock:
            self.version = version
            self._chain = chain

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
    ) -> None:
        with self._lock:
            self._state = state
            self._executed = executed
            self._executed_set = set(executed)
            self.version = version
            self.node_id = node_id
            self._chain = chain
            self._delta = Delta()

    @property
    def chain(self) -> ChainStats:
        with self._lock:
            return self._chain

    def __repr__(self) -> str:
        return f"ExecutionContext(run_id={self.run_id!r}, version={self.version}, keys={len(self)})"


def _check_key(key: object) -> None:
    if type(key) is not str or not key:
        raise InvalidStateValue(f"state keys must be non-empty str, got {key!r}")
