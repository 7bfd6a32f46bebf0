"""The records' invariants that their speed tricks must not break."""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect

import pytest

from tether.state.model import ChainStats, Checkpoint, RunStatus, chain_stats, make_checkpoint


def test_the_fast_checkpoint_constructor_builds_what_the_dataclass_builds():
    """``make_checkpoint`` sets the slots directly; it must take every field, in order, and
    give an object equal to (and as frozen as) ``Checkpoint(...)``. A field added to
    Checkpoint without it fails here."""
    names = [f.name for f in dataclasses.fields(Checkpoint)]
    assert list(inspect.signature(make_checkpoint).parameters) == names
    values = {
        "run_id": "r",
        "node_id": "n",
        "state": {"messages": [1]},
        "executed_node_ids": ["a"],
        "timestamp": dt.datetime(2026, 1, 2, tzinfo=dt.UTC),
        "version": 3,
        "status": RunStatus.PAUSED,
        "metadata": {"k": "v"},
    }
    fast = make_checkpoint(*(values[n] for n in names))
    assert fast == Checkpoint(**values)
    assert type(fast) is Checkpoint and repr(fast) == repr(Checkpoint(**values))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.version = 4  # type: ignore[misc]


def test_a_stored_time_becomes_the_same_datetime_whenever_it_is_read():
    """Stores leave the POSIX time in the slot; every way of looking at the checkpoint
    must see the datetime ``Checkpoint(...)`` would hold."""
    import copy
    import pickle

    ts = 1_790_000_000.123456
    when = dt.datetime.fromtimestamp(ts, dt.UTC)
    args = ("r", None, {"a": 1}, [], ts, 2, RunStatus.RUNNING, {})
    plain = Checkpoint(
        run_id="r", node_id=None, state={"a": 1}, timestamp=when, version=2, status=RunStatus.RUNNING
    )
    assert make_checkpoint(*args) == plain  # __eq__ reads through the descriptor
    assert repr(make_checkpoint(*args)) == repr(plain)
    lazy = make_checkpoint(*args)
    assert lazy.timestamp == when and type(lazy.timestamp) is dt.datetime
    assert lazy.timestamp is lazy.timestamp  # made once
    assert pickle.loads(pickle.dumps(make_checkpoint(*args))) == plain
    assert copy.deepcopy(make_checkpoint(*args)).timestamp == when
    assert dataclasses.replace(make_checkpoint(*args), version=3).timestamp == when
    assert dataclasses.asdict(make_checkpoint(*args))["timestamp"] == when
    with pytest.raises(dataclasses.FrozenInstanceError):
        lazy.timestamp = when  # type: ignore[misc]
    assert Checkpoint(run_id="r", node_id=None, state={}).timestamp.tzinfo is dt.UTC


def test_cached_ids_and_no_metadata_read_as_the_callers_own_list_and_dict():
    """A store's load may leave its cached tuple of ids and None for no metadata in the
    slots. Every way of reading them must see what ``Checkpoint(...)`` holds, and each
    checkpoint gets its own list and dict, so a caller's change never reaches the cache."""
    import copy
    import pickle

    ids = ("a", "b")
    args = ("r", "b", {"a": 1}, ids, 1_790_000_000.0, 2, RunStatus.RUNNING, None)
    plain = Checkpoint(
        run_id="r",
        node_id="b",
        state={"a": 1},
        executed_node_ids=["a", "b"],
        timestamp=dt.datetime.fromtimestamp(1_790_000_000.0, dt.UTC),
        version=2,
        status=RunStatus.RUNNING,
    )
    assert make_checkpoint(*args) == plain and repr(make_checkpoint(*args)) == repr(plain)
    lazy = make_checkpoint(*args)
    assert type(lazy.executed_node_ids) is list and lazy.executed_node_ids == ["a", "b"]
    assert type(lazy.metadata) is dict and lazy.metadata == {}
    assert lazy.executed_node_ids is lazy.executed_node_ids and lazy.metadata is lazy.metadata  # made once
    lazy.executed_node_ids.append("c")
    lazy.metadata["k"] = 1
    assert ids == ("a", "b")
    other = make_checkpoint(*args)
    assert other.executed_node_ids == ["a", "b"] and other.metadata == {}
    for seen in (
        pickle.loads(pickle.dumps(make_checkpoint(*args))),
        copy.deepcopy(make_checkpoint(*args)),
        dataclasses.replace(make_checkpoint(*args), version=2),
    ):
        assert seen == plain and type(seen.executed_node_ids) is list and type(seen.metadata) is dict
    as_dict = dataclasses.asdict(make_checkpoint(*args))
    assert as_dict["executed_node_ids"] == ["a", "b"] and as_dict["metadata"] == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        lazy.metadata = {}  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        lazy.executed_node_ids = []  # type: ignore[misc]


def test_the_fast_chain_stats_constructor_builds_what_the_dataclass_builds():
    names = [f.name for f in dataclasses.fields(ChainStats)]
    assert list(inspect.signature(chain_stats).parameters) == names
    values = dict(zip(names, (7, 1000, 30, 4, 5), strict=True))
    fast = chain_stats(*values.values())
    assert fast == ChainStats(**values) and repr(fast) == repr(ChainStats(**values))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.length = 6  # type: ignore[misc]
