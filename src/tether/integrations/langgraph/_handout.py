"""Values handed to callers are theirs: copies of what the saver keeps, made cheaply.

The saver keeps the latest channel values of a namespace decoded, so that ``get_state``
costs one small read. What ``get_tuple`` returns must still be the caller's own: a node
or a user editing a message from ``get_state`` in place must not change what the saver
serves next, nor the object a node returned (LangGraph's own savers decode afresh on
every read, so theirs never share). Decoding again costs what a cold read costs; a
structural copy of the few kinds of objects a state holds (lists, dicts, Pydantic models
such as LangChain's messages, immutable scalars) costs about a third of that, and the
garbage collector is kept out of both (it would walk the whole heap for objects that are
all alive). Anything else is copied with :func:`copy.deepcopy`.

Like a serializer round trip, the copy does not keep aliasing: an object that appears
twice in the value comes back as two equal objects.
"""

from __future__ import annotations

import copy
import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel

__all__ = ["copied", "gc_paused"]

_IMMUTABLE = frozenset({str, int, float, bool, type(None), bytes, complex})
_set_attr = object.__setattr__
_MODEL_DEEPCOPY = BaseModel.__deepcopy__

_gc_lock = threading.Lock()
_gc_depth = 0
_gc_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """No automatic garbage collection inside (nested and thread-safe): building or copying
    a large state allocates many objects that all stay alive, and each collection pass it
    triggers walks them again for nothing. Collection resumes on leaving; the objects that
    became garbage meanwhile are collected then, as usual."""
    global _gc_depth, _gc_was_enabled
    with _gc_lock:
        if _gc_depth == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_was_enabled:
                gc.enable()


def copied(value: Any) -> Any:
    """A copy of ``value`` that shares no mutable object with it."""
    with gc_paused():
        return _copy(value)


def _copy(x: Any) -> Any:
    tx = type(x)
    if tx in _IMMUTABLE:
        return x
    if tx is list:
        return [_copy(v) for v in x]
    if tx is dict:
        return {k: _copy(v) for k, v in x.items()}
    if tx is tuple:
        return tuple(_copy(v) for v in x)
    if isinstance(x, BaseModel) and tx.__deepcopy__ is _MODEL_DEEPCOPY:
        return _copy_model(x, tx)
    return copy.deepcopy(x)


def _copy_model(x: BaseModel, tx: type[BaseModel]) -> BaseModel:
    """What ``BaseModel.__deepcopy__`` does, without its memo (the cost of a deepcopy)."""
    new = tx.__new__(tx)
    _set_attr(new, "__dict__", _copy(x.__dict__))
    extra = x.__pydantic_extra__
    _set_attr(new, "__pydantic_extra__", None if extra is None else _copy(extra))
    _set_attr(new, "__pydantic_fields_set__", set(x.__pydantic_fields_set__))
    private = getattr(x, "__pydantic_private__", None)
    _set_attr(new, "__pydantic_private__", None if private is None else _copy(private))
    return new
