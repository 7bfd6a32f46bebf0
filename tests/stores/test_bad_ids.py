"""A node id no backend can store is refused with a typed error before any I/O, and the
context keeps its unsaved changes: a corrected commit stores them."""

from __future__ import annotations

import pytest

from tests.stores.conftest import new_id
from tether.errors import InvalidStateValue
from tether.state import ExecutionContext


@pytest.mark.parametrize(
    ("node_id", "says"),
    [("step\ud800one", "lone surrogate"), ("step\x00one", "NUL character"), (7, "must be a str")],
)
async def test_a_node_id_no_backend_can_store_is_refused_and_nothing_is_lost(store, node_id, says):
    run_id = new_id("badnode")
    ctx = ExecutionContext(run_id, {"n": 1})
    with pytest.raises(InvalidStateValue, match=says):
        await store.commit(ctx, node_id=node_id)
    assert await store.get_run(run_id) is None
    assert await store.commit(ctx, node_id="step-one") == 1
    loaded = await store.load(run_id)
    assert loaded.state["n"] == 1 and loaded.node_id == "step-one"
