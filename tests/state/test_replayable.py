"""Replayable user reducers: the delta stores the update, and replay calls the reducer again."""

from __future__ import annotations

import pytest

from tether.errors import ConfigError
from tether.state import ExecutionContext, default_registry, replayable
from tether.state.reducers import apply_op
from tether.stores import open_store


def _longest(old, update):
    return max(old or "", update, key=len)


LONGEST = replayable("tests.state.test_replayable:longest", _longest)


async def test_a_replayable_reducer_records_its_update_and_replays_the_same_result(tmp_path):
    reducers = default_registry().register("name", LONGEST)
    async with open_store(f"sqlite:///{tmp_path}/r.db") as store:
        ctx = ExecutionContext("r", {"name": ""}, reducers=reducers)
        await store.commit(ctx)
        for update in ("ab", "a", "abc"):
            ctx.merge({"name": update})
            ops = list(ctx.pending().ops)
            assert ops == [("name", "tests.state.test_replayable:longest", update)]  # not the result
            await store.commit(ctx)
        assert ctx["name"] == "abc"
        loaded = await store.load("r")
        assert loaded.state["name"] == "abc"  # replayed from the three deltas
    assert (
        apply_op(
            apply_op("ab", "tests.state.test_replayable:longest", "a"),
            "tests.state.test_replayable:longest",
            "x",
        )
        == "ab"
    )


def test_bad_names_and_unknown_ops_are_clear_errors():
    with pytest.raises(ConfigError, match="module:name"):
        replayable("nocolon", _longest)
    with pytest.raises(ValueError, match="import the module that registers it"):
        apply_op(None, "somewhere.else:missing", 1)
    with pytest.raises(ValueError, match="unknown op"):
        apply_op(None, "tether.no_such_module:x", 1)
