"""Values handed to callers are theirs: copies of what the saver keeps, made cheaply.

The saver keeps the latest channel values of a namespace decoded, so that ``get_state``
costs one small read. What ``get_tuple`` returns must still be the caller's own: a node
or a user editing a message from ``get_state`` in place must not change what the saver
serves next, nor the object a node returned (LangGraph's own savers decode afresh on
every read, so theirs never share). Decoding again costs what a cold read costs; a
structural copy of the few kinds of objects a state holds (lists, dicts, Pydantic models
such as LangChain's messages, immutable scalars) costs less, and the garbage collector is
kept out of both: it would walk the whole heap for objects that are all alive, and the
objects they made are filed with the old ones at once instead of being walked by a young
collection on their way there (see :func:`gc_paused`). Anything else is copied with
:func:`copy.deepcopy`.

Like a serializer round trip, the copy does not keep aliasing: an object that appears
twice in the value comes back as two equal objects.

What the saver keeps must also be what decoding its stored bytes gives, or a graph would
see one value while its process lives and another after a restart (LangGraph's savers
always hand out the decoded one): the serializer turns a tuple into a list, an
``OrderedDict`` into a dict, a tuple inside a dataclass into a list. So a value is kept as
a copy only when :func:`exact` says the round trip changes nothing; anything else is kept
decoded from its bytes.
"""

from __future__ import annotations

import copy
import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel

__all__ = ["copied", "exact", "gc_paused", "kept_copy"]

_IMMUTABLE = frozenset({str, int, float, bool, type(None), bytes, complex})
_SLOTS = BaseModel.__dict__
_set_dict = _SLOTS["__dict__"].__set__
_set_extra = _SLOTS["__pydantic_extra__"].__set__
_set_fields_set = _SLOTS["__pydantic_fields_set__"].__set__
_set_private = _SLOTS["__pydantic_private__"].__set__
_MODEL_DEEPCOPY = BaseModel.__deepcopy__
_new = object.__new__
_BARE = frozenset({dict, list})
"""Containers whose empty instances are copied with their own ``copy``."""
_AROUND = ("", "")
"""``s.join(_AROUND)`` is a new string equal to ``s`` (see :func:`_own_ids`)."""
_HOW: dict[type, Callable[[Any], Any]] = {}
"""How each type met so far is copied (see :func:`_how`)."""
_KEPT_UNPAUSED = 64
"""Items of a list :func:`kept_copy` copies without pausing the collector (a step's appends)."""

_gc_lock = threading.Lock()
_gc_depth = 0
_gc_was_enabled = False
_SETTLE_AFTER = 2_000
"""Objects allocated in a pause from which they are filed as old at once (see :func:`_settle`):
a 1 MB chat builds about 6,000; below this many, the young collection that walks them costs
less than the one a settle makes the next pause start with."""
_FULL_AFTER = 4_000_000
"""Objects filed as old by settles after which a full collection runs (see :func:`_settle`)."""
_filed = 0
"""Objects filed as old by settles since the last full collection this module ran."""
_young_owed = False
"""A settle reset the collector's counts since the young generations were last collected."""
_settled_ever = False
"""This process has settled a pause: each pause then starts with a young collection."""


@contextmanager
def gc_paused() -> Iterator[None]:
    """No automatic garbage collection inside (nested and thread-safe): building or copying
    a large state allocates many objects that all stay alive, and each collection pass it
    triggers walks them again for nothing. Collection resumes on leaving, with what the
    pause allocated filed as old (:func:`_settle`)."""
    global _gc_depth, _gc_was_enabled, _young_owed
    if _settled_ever and _gc_depth == 0 and gc.isenabled():
        # the young garbage made since the last pause is collected before this pause may
        # file it as old, and the middle generation too when a settle skipped its pass
        # (both small: a few hundred to a few thousand objects)
        owed, _young_owed = _young_owed, False
        gc.collect(1 if owed else 0)
    with _gc_lock:
        if _gc_depth == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_depth += 1
    full = False
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_was_enabled:
                full = _settle()
                gc.enable()
    if full:  # (outside the lock: a finalizer the pass runs may pause again)
        gc.collect()


def _settle() -> bool:
    """File everything the collector tracks in its oldest generation, without a pass;
    returns whether a full collection is due now (the caller runs it).

    A large state built in a pause (about 100k containers at 10 MB) sits in the youngest
    generation: the first allocation after the pause would trigger a collection that walks
    all of it, only to find it alive. ``freeze`` then ``unfreeze`` moves every tracked
    object to the oldest generation by splicing two lists (no walk). It also resets the
    collector's counts, so left alone the middle and full collections would never run
    again in a process that reads big states often, and garbage cycles filed old with the
    state would stay for good. So once a pause has settled, every pause starts with a
    collection of the young generation (of the middle one too after a settle: what the
    reset skipped; both small), so that young garbage is not filed as old, and a full
    collection runs once settles have filed :data:`_FULL_AFTER` objects since the last
    one (about 40 copies of a 10 MB chat between passes of tens of milliseconds). What
    settles still file as old (young garbage made before the first settle, or by another
    thread during a pause) waits for that full collection. Skipped when the process keeps
    objects frozen itself (a server that froze its heap before forking must keep it frozen)."""
    global _filed, _young_owed, _settled_ever
    young = gc.get_count()[0]
    if young < _SETTLE_AFTER or gc.get_freeze_count() != 0:
        return False
    gc.freeze()
    gc.unfreeze()
    _young_owed = _settled_ever = True
    _filed += young
    if _filed < _FULL_AFTER:
        return False
    _filed = 0
    return True


def copied(value: Any) -> Any:
    """A copy of ``value`` that shares no mutable object with it."""
    with gc_paused():
        out = _copy(value)
        for items in out.values() if type(out) is dict else (out,):
            if type(items) is list:
                _own_ids(items)
        return out


def kept_copy(value: Any) -> Any:
    """A copy of what a graph handed to ``put`` (an :func:`exact` value), for the saver to
    keep, as a read in a new process would decode it. The graph and its caller keep the
    originals (``invoke`` returns them) and may edit them in place, which must not change
    what the saver serves next. A step hands over a few new messages, copied as they are;
    a whole state is copied with the collector paused, as a read's is."""
    if type(value) is list and len(value) > _KEPT_UNPAUSED:
        with gc_paused():
            out: Any = _copy_list(value)
            _all_set(out)
            return out
    out = _copy(value)
    _all_set(out)
    return out


_EXACT_KEYS = frozenset({str, int})
"""Dict keys that come back from the serializer as they went in."""
_EXACT_SCALARS = _IMMUTABLE - {complex}
"""Scalars that come back from the serializer as they went in (a complex number does not)."""


def exact(value: Any) -> bool:
    """Whether decoding ``value``'s serialized bytes gives back an equal value of the same
    types: plain dicts (str or int keys), lists, the scalars (not complex numbers), and
    Pydantic models (such as LangChain's messages) made of those. Anything else (a tuple, a
    dict or list subclass, a model inside a model, a dataclass...) may come back changed, so
    the saver keeps it decoded instead."""
    try:
        return _exact(value)
    except RecursionError:
        return False


def _exact(x: Any, in_model: bool = False) -> bool:
    # loops, not ``all()`` over a generator, and empty containers (most of a message's
    # dicts and lists) told without a call: this runs on every value a put keeps
    tx = type(x)
    immutable, bare = _EXACT_SCALARS, _BARE
    if tx in _IMMUTABLE:
        return tx in immutable
    if tx is list:
        for v in x:
            tv = type(v)
            if tv not in immutable and not (tv in bare and not v) and not _exact(v, in_model):
                return False
        return True
    if tx is dict:
        keys = _EXACT_KEYS
        for k, v in x.items():
            if type(k) not in keys:
                return False
            tv = type(v)
            if tv not in immutable and not (tv in bare and not v) and not _exact(v, in_model):
                return False
        return True
    if in_model:
        # a model is rebuilt as ``cls(**model_dump())``: a model anywhere inside it comes
        # back as its dict unless the field's type says otherwise
        return False
    plain = _PLAIN_MODELS.get(tx)
    if plain is None:
        plain = _PLAIN_MODELS[tx] = _plain_model(tx)
    # (private attributes are not stored: a read elsewhere gets their defaults)
    return (
        plain
        and not x.__pydantic_private__
        and _exact(x.__dict__, True)
        and (not x.__pydantic_extra__ or _exact(x.__pydantic_extra__, True))
    )


_PLAIN_MODELS: dict[type, bool] = {}
"""Whether a type is a Pydantic model that ``cls(**model_dump())`` rebuilds field for field."""


def _plain_model(tx: type) -> bool:
    """A Pydantic model copied field by field, whose dump holds every field as it is: no
    field left out of it, no serializer or computed field reshaping it."""
    if not (isinstance(tx, type) and issubclass(tx, BaseModel)) or _how(tx) is not _copy_model:
        return False
    decorators = tx.__pydantic_decorators__
    return not (
        any(f.exclude for f in tx.model_fields.values())
        or decorators.field_serializers
        or decorators.model_serializers
        or tx.model_computed_fields
    )


def _all_set(value: Any) -> None:
    """Mark every field of the models in ``value`` (an :func:`exact` one) as set, as
    ``cls(**model_dump())`` does when a read decodes them: ``model_dump(exclude_unset=True)``
    then gives the same after a restart."""
    tv = type(value)
    if tv is list:
        for v in value:
            if type(v) not in _IMMUTABLE:
                _all_set(v)
    elif tv is dict:
        for v in value.values():
            if type(v) not in _IMMUTABLE:
                _all_set(v)
    elif tv not in _IMMUTABLE:
        extra = value.__pydantic_extra__
        _set_fields_set(value, set(value.__dict__) | set(extra) if extra else set(value.__dict__))


def _own_ids(items: list[Any]) -> None:
    """Give each copied model in ``items`` (a chat's messages) an ``id`` string of its own,
    made in one pass so that they lie together in memory. LangGraph's ``add_messages``
    reads the id of every message of the chat at every step (it indexes the list by id):
    ids shared with the saver's objects lie wherever those were made, among their
    contents, so that scan would touch more memory on every step of a long chat than on
    ids that lie together (``bench_handout.py`` measures it). A string is immutable, so the
    copy is equal in every other way."""
    how, model, around = _HOW, _copy_model, _AROUND
    for m in items:
        if how.get(type(m)) is model:
            fields = m.__dict__
            ident = fields.get("id")
            if type(ident) is str:
                fields["id"] = ident.join(around)  # a new string equal to ``ident``


def _copy(x: Any) -> Any:
    tx = type(x)
    if tx in _IMMUTABLE:
        return x
    how = _HOW.get(tx)
    if how is None:
        how = _HOW[tx] = _how(tx)
    return how(x)


def _how_of(x: Any) -> Callable[[Any], Any]:
    """How an object of a type not met yet is copied (kept in ``_HOW``)."""
    how = _HOW[type(x)] = _how(type(x))
    return how


def _copy_list(x: list[Any]) -> list[Any]:
    # the scalars most values are tested inline, and the others go straight to their
    # type's copy: a call per value is most of a copy's cost
    immutable, how = _IMMUTABLE, _HOW
    return [v if type(v) in immutable else (how.get(type(v)) or _how_of(v))(v) for v in x]


def _copy_dict(x: dict[Any, Any]) -> dict[Any, Any]:
    immutable, how = _IMMUTABLE, _HOW
    if not x:
        return {}
    return {k: v if type(v) in immutable else (how.get(type(v)) or _how_of(v))(v) for k, v in x.items()}


def _copy_tuple(x: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(_copy(v) for v in x)


def _how(tx: type) -> Callable[[Any], Any]:
    """How to copy an object of type ``tx`` (looked up once per type: ``isinstance`` on a
    model class goes through its metaclass). A Pydantic model with Pydantic's own deep
    copy is copied field by field; any other type with :func:`copy.deepcopy`."""
    if tx is dict:
        return _copy_dict
    if tx is list:
        return _copy_list
    if tx is tuple:
        return _copy_tuple
    if issubclass(tx, BaseModel) and tx.__deepcopy__ is _MODEL_DEEPCOPY:
        return _copy_model
    return copy.deepcopy


def _copy_model(x: BaseModel) -> BaseModel:
    """What ``BaseModel.__deepcopy__`` does, without its memo (the cost of a deepcopy). The
    model's dict is copied at C speed, then its mutable values replaced by copies; the
    empty dicts and lists most messages hold (``additional_kwargs``, ``tool_calls``...)
    are copied in place, without a call each. The model's slots are set through their own
    descriptors: ``object.__setattr__`` on a class that defines ``__setattr__`` first walks
    its whole MRO (CPython's check against a type's setattr being bypassed), a third of the
    copy of a LangChain message."""
    new = _new(type(x))
    immutable, bare = _IMMUTABLE, _BARE
    fields = x.__dict__.copy()
    for k, v in fields.items():
        tv = type(v)
        if tv not in immutable:
            fields[k] = v.copy() if not v and tv in bare else _copy(v)
    _set_dict(new, fields)
    extra = x.__pydantic_extra__
    _set_extra(new, extra if extra is None else _copy_dict(extra) if extra else {})
    _set_fields_set(new, x.__pydantic_fields_set__.copy())
    private = x.__pydantic_private__
    _set_private(new, None if private is None else _copy(private))
    return new
