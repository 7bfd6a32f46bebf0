"""Checks the configuration objects users build in Python, when they are built.

The configs users pass (``LoopConfig``, ``ExpiryPolicy``…) are dataclasses, and a dataclass
takes any value: ``LoopConfig(max_iterations="30")`` would fail much later, inside a run, as
``'<' not supported between 'int' and 'str'``. A config calls :func:`check_fields` in its
``__post_init__`` and a wrong type fails at once, naming the class, the field, what it
expects and what it got. Only the types a user can get wrong are checked (numbers, strings,
booleans, ``Literal`` choices, optional values, containers and classes); callables and
protocols are left to the code that uses them.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any

from tether.errors import ConfigError

__all__ = ["InvalidConfig", "check_fields"]


class InvalidConfig(ConfigError, TypeError):
    """A config field holds a value of the wrong type or range (a ``TypeError`` too)."""

    def __init__(self, owner: str, field: str, message: str) -> None:
        super().__init__(f"{owner}.{field}: {message}")
        self.owner = owner
        self.field = field


_HINTS: dict[type, dict[str, Any]] = {}


def check_fields(obj: Any, *, non_negative: tuple[str, ...] = (), positive: tuple[str, ...] = ()) -> None:
    """Raise :class:`InvalidConfig` for the first field of dataclass ``obj`` whose value does
    not match its annotation; ``non_negative``/``positive`` name numeric fields that must be
    ``>= 0`` / ``> 0`` (a timedelta counts by its seconds)."""
    cls = type(obj)
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    owner = cls.__name__
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        expected = hints.get(f.name, Any)
        if not _matches(value, expected):
            raise InvalidConfig(
                owner, f.name, f"expected {_describe(expected)}, got {value!r} ({type(value).__name__})"
            )
        if f.name in non_negative or f.name in positive:
            number = value.total_seconds() if hasattr(value, "total_seconds") else value
            if number is None:
                continue
            if isinstance(number, float) and math.isnan(number):
                raise InvalidConfig(owner, f.name, "must be a number, not NaN")
            if f.name in positive and number <= 0:
                raise InvalidConfig(owner, f.name, f"must be > 0, got {value!r}")
            if number < 0:
                raise InvalidConfig(owner, f.name, f"must be >= 0, got {value!r}")


def _matches(value: Any, expected: Any) -> bool:
    if expected is Any or isinstance(expected, typing.TypeVar):
        return True
    origin = typing.get_origin(expected)
    args = typing.get_args(expected)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arm) for arm in args)
    if origin is typing.Literal:
        return value in args
    if expected is type(None):
        return value is None
    if expected is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (dict, typing.Mapping) or expected is dict:
        if not isinstance(value, dict):
            return False
        if len(args) == 2:
            return all(_matches(k, args[0]) and _matches(v, args[1]) for k, v in value.items())
        return True
    if origin in (list, tuple, set, frozenset):
        if not isinstance(value, origin):
            return False
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return all(_matches(v, args[0]) for v in value)
        if origin is tuple:
            return len(args) == len(value) and all(_matches(v, a) for v, a in zip(value, args, strict=True))
        return not args or all(_matches(v, args[0]) for v in value)
    if isinstance(expected, type):
        if getattr(expected, "_is_protocol", False):
            return True  # a protocol: the code that calls it says what is missing
        try:
            return isinstance(value, expected)
        except TypeError:
            return True
    return True  # Callable, Annotated and the like: not checked here


def _describe(expected: Any) -> str:
    origin = typing.get_origin(expected)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(expected))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(expected))
    if expected is type(None):
        return "None"
    if isinstance(expected, type) and origin is None:
        return expected.__name__
    return str(expected).replace("typing.", "")
