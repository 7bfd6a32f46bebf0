"""The records' invariants that their speed tricks must not break."""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect

import pytest

from tether.state.model import Checkpoint, RunStatus, _checkpoint


def test_the_fast_checkpoint_constructor_builds_what_the_dataclass_builds():
    """``_checkpoint`` sets the slots directly; it must take every field, in order, and
    give an object equal to (and as frozen as) ``Checkpoint(...)``. A field added to
    Checkpoint without it fails here."""
    names = [f.name for f in dataclasses.fields(Checkpoint)]
    assert list(inspect.signature(_checkpoint).parameters) == names
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
    fast = _checkpoint(*(values[n] for n in names))
    assert fast == Checkpoint(**values)
    assert type(fast) is Checkpoint and repr(fast) == repr(Checkpoint(**values))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.version = 4  # type: ignore[misc]
