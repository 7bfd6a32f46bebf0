"""Overwrites stored as patches: a replay gives the exact state, and a rewrite of a mostly
unchanged value stores only what changed."""

from __future__ import annotations

import copy
import time
from typing import Any

import ormsgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.state.context import ExecutionContext
from tether.state.model import NO_CHAIN, RunStatus
from tether.state.reducers import default_registry
from tether.state.reserved import runtime_update
from tether.state.serde import Codec
from tether.stores._chain import ChainEngine, Known
from tether.stores._patch import PATCH, SKIP, apply_patch, diff, patch_ops, whole_ops
from tether.stores.policies import CompactionPolicy

_REG = default_registry().register("index", "merge")

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True), st.text(max_size=30)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner, max_size=6),
    max_leaves=25,
)


@settings(max_examples=120, deadline=None)
@given(values, values)
def test_a_diff_applied_to_the_old_value_gives_the_new_one_or_the_caller_falls_back(old, new):
    """``diff`` may be fooled by ``==`` (1 against True, NaN), never by the exact bytes check."""
    p = diff(old, new)
    if p is None:
        return
    got = apply_patch(copy.deepcopy(old), p)
    if ormsgpack.packb(got) != ormsgpack.packb(new):
        # only where == says equal what the bytes do not: patch_ops checks and writes a set
        assert got == new or got != got


def _commit(
    engine: ChainEngine, ctx: ExecutionContext, rows: list[bytes], known: Known, *, patches: bool = True
) -> Known:
    plan = engine.plan(
        ctx.take_changes(),
        known,
        node="n",
        status=RunStatus.RUNNING,
        now=time.time(),
        meta={},
        meta_dated=False,
        expires_at=None,
        require_status=None,
        write_id="",
        patches=patches,
    )
    rows.append(plan.write.payload)
    ctx.saved(len(rows), datetimes=plan.walked)
    return engine.after(plan, len(rows), NO_CHAIN, known.tail)


def _replay(engine: ChainEngine, rows: list[bytes]) -> dict[str, Any]:
    state, _executed, _head, _tail = engine.replay("r", list(enumerate(rows, 1)))
    return state


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["cfg", "index", "_tether"]), values), max_size=25))
def test_replaying_overwrites_merges_and_runtime_updates_gives_every_version(script):
    """Whatever mix of sets, dict merges and runtime updates a run commits, the chain
    replays to the state of every version."""
    engine = ChainEngine(Codec(), CompactionPolicy(seal_versions=0), seals=False, splits_state=False)
    ctx = ExecutionContext("r", {"cfg": None}, reducers=_REG)
    rows: list[bytes] = []
    known = _commit(engine, ctx, rows, Known(0, NO_CHAIN, []))
    for i, (key, value) in enumerate(script):
        if key == "_tether":
            ctx.merge(
                runtime_update(route={"visits": {"a": i}, "note": value}, todo={f"s{i % 3}": {"v": value}})
            )
        elif key == "index":
            ctx.merge({"index": {f"k{i % 4}": [value] * (i % 5), "n": i}})
        else:
            ctx.merge({"cfg": {"value": value, "log": list(range(i)), "pad": "x" * 60}})
        known = _commit(engine, ctx, rows, known)
        assert ormsgpack.packb(_replay(engine, rows)) == ormsgpack.packb(ctx.snapshot())


def test_a_growing_dict_is_stored_as_what_changed():
    """A metrics dict whose list grows by one number a step stores that number, not the list."""
    engine = ChainEngine(Codec(), CompactionPolicy(seal_versions=0), seals=False, splits_state=False)
    ctx = ExecutionContext("r", {"metrics": {}})
    rows: list[bytes] = []
    known = _commit(engine, ctx, rows, Known(0, NO_CHAIN, []))
    sizes: list[int] = []
    for i in range(200):
        sizes.append(1000 + i)
        ctx.merge({"metrics": {"sizes": list(sizes), "runs": i, "label": "main prompt bytes"}})
        known = _commit(engine, ctx, rows, known)
    final = len(ormsgpack.packb(ctx.snapshot()))
    assert _replay(engine, rows) == ctx.snapshot()
    deltas = [Codec().decode(r) for r in rows[20:]]  # (small values are written whole)
    assert all(op == PATCH for d in deltas for _k, op, _a in d["ops"])
    assert sum(map(len, rows)) < 40 * final  # whole rewrites: about 100x


def test_a_commit_without_patches_stores_overwrites_whole_and_counts_them_alike():
    """``patches=False`` (a writer whose values are opaque bytes): the same growing dict is
    stored whole each time, replays alike, and its rewrite is counted as a first patch_ops
    (nothing known) counts it, so compaction sees the same waste."""
    engine = ChainEngine(Codec(), CompactionPolicy(seal_versions=0), seals=False, splits_state=False)
    ctx = ExecutionContext("r", {"metrics": {}}, reducers=_REG)
    rows: list[bytes] = []
    known = _commit(engine, ctx, rows, Known(0, NO_CHAIN, []), patches=False)
    for i in range(30):
        ctx.merge({"metrics": {"sizes": list(range(i)), "label": "x" * 40}, "index": {f"k{i}": i}})
        known = _commit(engine, ctx, rows, known, patches=False)
        assert known.values is None
        assert _replay(engine, rows) == ctx.snapshot()
    ops = [op for r in rows[1:] for _k, op, _a in Codec().decode(r)["ops"]]
    assert PATCH not in ops and ops.count("set") == 30 and ops.count("merge") == 30
    taken = (("metrics", "set", {"sizes": [1, 2], "label": "x" * 40}), ("index", "merge", {"a": "y" * 50}))
    taken += (("log", "append", ["z" * 80]),)
    whole, rewrite = whole_ops(taken)
    assert whole == [list(op) for op in taken]
    assert rewrite == patch_ops(taken, None)[2] > 0


def test_an_unchanged_value_set_again_is_not_stored():
    """Setting a key to what it already holds writes no op for it."""
    ops, values, _ = patch_ops((("cfg", "set", {"a": "x" * 100}),), None)
    again, _, rewrite = patch_ops((("cfg", "set", {"a": "x" * 100}),), values)
    assert ops and not again and rewrite == 0


def test_a_capped_list_that_drops_its_oldest_items_is_patched():
    """A window of the last 20 items that moves by one is stored as a cut and one item."""
    old = [[i, f"reports/report_test_{i}.md"] for i in range(20)]
    new = old[1:] + [[20, "reports/report_test_20.md"]]
    p = diff(old, new)
    assert p == [1, 19, [[20, "reports/report_test_20.md"]], 1]  # a list patch: keep 19 after a cut of 1
    assert apply_patch(copy.deepcopy(old), p) == new


def test_a_long_dict_of_counts_is_patched_by_the_entries_that_changed():
    """The runtime's visits per step: one count changed and two steps added, in their order."""
    old = {f"s{i}": 1 for i in range(1000)}
    new = {**old, "s7": 2, "s1000": 1, "s1001": 1}
    p = diff(old, new)
    assert p == [0, {"s7": [2], "s1000": [1], "s1001": [1]}]
    assert list(apply_patch(copy.deepcopy(old), p)) == list(new)


def test_a_value_that_changes_whole_is_stored_whole_and_patched_again_once_it_grows() -> None:
    """A value no patch can shrink (a new record each commit) is written as it is without a
    diff for a while after three misses in a row; once it only grows again, patches come back within
    ``SKIP`` commits, and an unchanged value is still left out meanwhile. A value replaced
    whole once among patched ones is patched again at the next commit."""
    items = [f"line {n}" * 4 for n in range(30)]
    values = None
    kinds = []
    for i in range(4):
        items.append(f"more {i}" * 4)
        log = list(items) if i != 1 else ["replaced"] * 40
        ops, values, _ = patch_ops((("doc", "set", {"log": log}),), values)
        kinds.append(ops[0][1])
    assert kinds == ["set", "set", "set", PATCH]  # (new, then replaced whole, then back)
    values = None
    for i in range(5):  # a fresh blob every time: nothing to patch
        ops, values, _ = patch_ops((("rec", "set", {"blob": bytes([i]) * 200}),), values)
        assert [op for _k, op, _a in ops] == ["set"]
    same, values, rewrite = patch_ops((("rec", "set", {"blob": bytes([4]) * 200}),), values)
    assert same == [] and rewrite == 0  # an unchanged value needs no diff to be left out
    items = [f"line {n}" * 4 for n in range(30)]
    kinds = []
    for i in range(SKIP + 3):  # now it grows by one line a commit
        items.append(f"more {i}" * 4)
        ops, values, _ = patch_ops((("rec", "set", {"blob": b"", "log": list(items)}),), values)
        kinds.append(ops[0][1])
    assert kinds[-1] == PATCH and kinds.index(PATCH) <= SKIP, kinds


def test_an_overwrite_forgets_the_entries_known_under_it_and_an_append_forgets_the_value():
    """A key merged entry by entry, then overwritten whole, then merged again: its entries
    known from before the overwrite are not taken as still there (the merge writes them)."""
    entry = {"text": "x" * 40}
    ops, known, _ = patch_ops((("cfg", "merge", {"a": entry, "b": entry}),), None)
    assert set(known) == {("cfg", "a"), ("cfg", "b")}
    ops, known, _ = patch_ops((("cfg", "merge", {"a": entry}),), known)
    assert ops == []  # the same entry again: nothing to store
    ops, known, _ = patch_ops((("cfg", "set", {"z": 1}),), known)
    assert ("cfg", "a") not in known and ("cfg", "b") not in known
    ops, known, _ = patch_ops((("cfg", "merge", {"a": entry}),), known)
    assert ops == [["cfg", "merge", {"a": entry}]]
    value = ["y" * 40]
    ops, known, _ = patch_ops((("log", "set", value), ("log", "append", ["z"]), ("log", "set", value)), None)
    assert [op[1] for op in ops] == ["set", "append", "set"] and ("log",) in known
