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

_SCALARS = (str, int, float, bool, type(None), bytes)
_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1
_HINTS: dict[type, str] = {
    tuple: "use a list (a tuple would come back as a list)",
    set: "use a sorted list",
    frozenset: "use a sorted list",
    bytearray: "use bytes",
    memoryview: "use bytes",
}


def check_value(value: Any, *, key: str | None = None) -> None:
    """Raise :class:`InvalidStateValue` unless ``value`` round-trips exactly through a store."""
    _check(value, key, "")


def _fail(value: Any, key: str | None, path: str, why: str) -> InvalidStateValue:
    where = f"state key {key!r}" if key is not None else "state value"
    at = f" at {path}" if path else ""
    return InvalidStateValue(
        f"{where}{at}: {type(value).__name__} cannot be stored ({why})", key=key, path=path
    )


def _check(value: Any, key: str | None, path: str) -> None:
    # Exact type checks: a str or int subclass (an Enum, say) would come back as the
    # base type, which is not an exact round trip.
    tp = type(value)
    if tp is dict:
        for k, v in value.items():
            if type(k) is not str:
                raise _fail(k, key, f"{path}[{k!r}]", "dict keys must be str")
            _check(v, key, f"{path}[{k!r}]")
    elif tp is list:
        for i, v in enumerate(value):
            _check(v, key, f"{path}[{i}]")
    elif tp is int:
        if not _INT_MIN <= value <= _INT_MAX:
            raise _fail(value, key, path, "integers must fit in 64 bits; store big ones as str")
    elif tp in _SCALARS:
        return
    elif tp is dt.datetime:
        tz = value.tzinfo
        if tz is not None and type(tz) not in (dt.timezone, ZoneInfo):
            raise _fail(value, key, path, "tzinfo must be None, datetime.timezone or ZoneInfo")
    else:
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
