"""What may live in a run's state, and a fast deep copy of it.

State is JSON-like data plus ``datetime`` and ``bytes``, because that is what every
store can write and read back *exactly*. Anything else is refused when it enters the
state, so the step that put it there fails, not a save an hour later. Tuples, sets and
custom objects are refused rather than silently turned into lists or strings.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo

from tether.errors import InvalidStateValue

__all__ = ["check_value", "copy_value"]

_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1
_HINTS: dict[type, str] = {
    tuple: "use a list (a tuple would come back as a list)",
    set: "use a sorted list",
    frozenset: "use a sorted list",
    bytearray: "use bytes",
    memoryview: "use bytes",
}


def check_value(value: Any, *, key: str | None = None) -> bool:
    """Raise :class:`InvalidStateValue` unless ``value`` round-trips exactly through a store.

    Returns whether it holds a ``datetime`` anywhere: the walk is being made anyway, and a
    state known to hold none can be encoded by the faster encoder (see ``serde.pack_plain``).
    """
    return _check(value, key, None)


_Path = tuple[Any, str | int] | None
"""Where a nested value sits, as (parent path, key or index): built as the walk goes down,
made a string only for an error (formatting a path per element doubled the walk's cost)."""


def _fail(value: Any, key: str | None, path: _Path, why: str) -> InvalidStateValue:
    parts: list[str] = []
    while path is not None:
        path, part = path
        parts.append(f"[{part!r}]")
    at = "".join(reversed(parts))
    where = f"state key {key!r}" if key is not None else "state value"
    return InvalidStateValue(
        f"{where}{' at ' + at if at else ''}: {type(value).__name__} cannot be stored ({why})",
        key=key,
        path=at,
    )


def _check(value: Any, key: str | None, path: _Path) -> bool:
    # Exact type checks: a str or int subclass (an Enum, say) would come back as the
    # base type, which is not an exact round trip.
    tp = type(value)
    if tp is str or tp is float or tp is bool or value is None or tp is bytes:
        return False
    if tp is dict:
        dated = False
        for k, v in value.items():
            if type(k) is not str:
                raise _fail(k, key, (path, k), "dict keys must be str")
            if type(v) is not str and _check(v, key, (path, k)):
                dated = True
        return dated
    if tp is list:
        dated = False
        for i, v in enumerate(value):
            if type(v) is not str and _check(v, key, (path, i)):
                dated = True
        return dated
    if tp is int:
        if not _INT_MIN <= value <= _INT_MAX:
            raise _fail(value, key, path, "integers must fit in 64 bits; store big ones as str")
        return False
    if tp is dt.datetime:
        tz = value.tzinfo
        if tz is not None and type(tz) not in (dt.timezone, ZoneInfo):
            raise _fail(value, key, path, "tzinfo must be None, datetime.timezone or ZoneInfo")
        return True
    hint = _HINTS.get(tp, "allowed: str, int, float, bool, None, bytes, datetime, list, dict")
    raise _fail(value, key, path, hint)


def copy_value(value: Any) -> Any:
    """Deep-copy checked state data.

    Much faster than :func:`copy.deepcopy` on large message lists because scalars
    (immutable) are shared and only dicts and lists are rebuilt.
    """
    tp = type(value)
    if tp is dict:
        return {k: copy_value(v) if type(v) in (dict, list) else v for k, v in value.items()}
    if tp is list:
        return [copy_value(v) if type(v) in (dict, list) else v for v in value]
    return value
