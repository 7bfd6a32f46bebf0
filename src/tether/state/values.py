"""What may live in a run's state, and a fast deep copy of it.

State is JSON-like data plus ``datetime`` and ``bytes``, because that is what every
store can write and read back *exactly*. Anything else is refused when it enters the
state, so the step that put it there fails, not a save an hour later. Tuples, sets and
custom objects are refused rather than silently turned into lists or strings.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any
from zoneinfo import ZoneInfo

from tether.errors import ConfigError, InvalidStateValue

__all__ = ["RUN_ID_MAX_LENGTH", "check_run_id", "check_text", "check_value", "copy_value"]

RUN_ID_MAX_LENGTH = 128
"""Longest run id, in characters: one rule for every backend (MySQL's key column is the
tightest at 191)."""

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


def check_text(text: str, what: str) -> None:
    """Raise :class:`InvalidStateValue` if ``text`` holds a lone surrogate (half of an
    emoji from a cut model stream, say): no store can encode it, so it is refused where
    it enters rather than at every later save."""
    if not text.isascii() and not _encodable(text):
        raise InvalidStateValue(f"{what}: {_surrogate_at(text)}")


def check_node_id(node_id: object) -> None:
    """Raise :class:`InvalidStateValue` unless ``node_id`` is ``None`` or a str every backend
    can store (valid Unicode, no NUL): checked before the write, so the checkpoint's changes
    stay with the context instead of failing inside a driver with an encoding error."""
    if node_id is None:
        return
    if type(node_id) is not str:
        raise InvalidStateValue(f"node id must be a str or None, got {type(node_id).__name__}")
    if "\x00" in node_id:
        raise InvalidStateValue(f"node id {node_id!r} contains a NUL character; remove it")
    check_text(node_id, "node id")


def check_run_id(run_id: object) -> None:
    """Raise :class:`ConfigError` unless ``run_id`` is one every backend can store: a
    non-empty str of at most ``RUN_ID_MAX_LENGTH`` characters, without NUL, valid Unicode.
    Checked before any I/O, so a bad id fails the same way on every store."""
    if type(run_id) is not str or not run_id:
        raise ConfigError(f"run id must be a non-empty str, got {run_id!r}")
    if len(run_id) > RUN_ID_MAX_LENGTH:
        raise ConfigError(
            f"run id is {len(run_id)} characters long; at most {RUN_ID_MAX_LENGTH} are allowed "
            "(use a shorter id, e.g. a hash of the long one)"
        )
    if "\x00" in run_id:
        raise ConfigError(f"run id {run_id!r} contains a NUL character; remove it")
    if not run_id.isascii() and not _encodable(run_id):
        raise ConfigError(f"run id {run_id!r} is not valid Unicode: {_surrogate_at(run_id)}")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _surrogate_at(text: str) -> str:
    at = next(i for i, c in enumerate(text) if "\ud800" <= c <= "\udfff")
    return (
        f"lone surrogate {text[at]!r} at index {at} (half of a character, e.g. from a cut "
        "stream); drop it or decode the source with errors='replace'"
    )


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
    if tp is str:
        if not value.isascii() and not _encodable(value):
            raise _fail(value, key, path, _surrogate_at(value))
        return False
    if tp is float or tp is bool or value is None or tp is bytes:
        return False
    if tp is dict:
        dated = False
        for k, v in value.items():
            if type(k) is not str:
                raise _fail(k, key, (path, k), "dict keys must be str")
            if not k.isascii() and not _encodable(k):
                raise _fail(k, key, path, _surrogate_at(k))
            if type(v) is str:
                if not v.isascii() and not _encodable(v):
                    raise _fail(v, key, (path, k), _surrogate_at(v))
            elif _check(v, key, (path, k)):
                dated = True
        return dated
    if tp is list:
        dated = False
        for i, v in enumerate(value):
            if type(v) is str:
                if not v.isascii() and not _encodable(v):
                    raise _fail(v, key, (path, i), _surrogate_at(v))
            elif _check(v, key, (path, i)):
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
    """Deep-copy checked state data: new dicts and lists, the scalars (all immutable) shared.

    ``msgspec.to_builtins`` does that walk in C, much faster than the same walk in Python
    (figures in ``benchmarks/README.md``). It would also turn a
    tuple into a list or an Enum into its value, so it is only for data
    :func:`check_value` passed, which holds neither.
    """
    return _to_builtins()(value, builtin_types=_KEPT)


_KEPT = (bytes, dt.datetime)
"""What ``to_builtins`` must hand back as is (else base64 and ISO text)."""


@functools.cache
def _to_builtins() -> Any:
    import msgspec  # on first use: its import is not light (see serde._msgspec_encoder)

    return msgspec.to_builtins
