"""Sealing from packed parts (``stores/_seal``) writes the very bytes the decoded path wrote.

A delta joined from its packed ops is the payload ``Codec.encode`` made of the same dict;
a segment joined from steps is ``pack_segment`` of the decoded bodies, byte for byte, at
every level; a tail read back from the database (no steps) seals to the same bytes as the
tail this process kept; and rows written the old way load as before.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.state import ExecutionContext, RunStatus
from tether.state.model import NO_CHAIN
from tether.state.reducers import default_registry
from tether.state.serde import SCHEMA_VERSION, Codec, pack_value
from tether.stores._chain import ChainEngine, CompactionPolicy, Known
from tether.stores._seal import join_delta, join_segment, steps_of
from tether.stores._segment import pack_segment, split_segment

_value = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text("abé", max_size=20) | st.floats(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text("ab", max_size=3), inner, max_size=3),
    max_leaves=8,
)
_op = st.one_of(
    st.tuples(st.sampled_from(["m", "ix"]), st.just("append"), st.lists(_value, max_size=20)),
    st.tuples(st.sampled_from(["m", "cp", "p"]), st.just("set"), _value),
    st.tuples(
        st.just("cfg"), st.just("merge"), st.dictionaries(st.text("ab", max_size=2), _value, max_size=2)
    ),
    st.tuples(st.just("n"), st.just("add"), st.integers(-5, 5)),
)
_delta = st.tuples(
    st.sampled_from([None, "agent", "tools"]),
    st.sampled_from(["running", "paused"]),
    st.sampled_from([{}, {}, {"step": 1}, {"at": datetime(2026, 1, 2, tzinfo=UTC)}]),
    st.lists(_op, max_size=6),
    st.lists(st.sampled_from("abc"), max_size=2),
)


def _joined(delta: tuple[Any, ...], ts: float) -> tuple[bytes, Any, dict[str, Any]]:
    node, status, meta, ops, executed = delta
    body, step, _rewrite = join_delta(SCHEMA_VERSION, node, status, ts, meta, ops, list(executed))
    as_dict = {
        "v": SCHEMA_VERSION, "node": node, "status": status, "ts": ts, "meta": meta, "kind": "delta",
        "ops": [[k, op, arg] for k, op, arg in ops], "executed": list(executed),
    }  # fmt: skip
    return body, step, as_dict


def _decoded(body: bytes) -> Any:
    return Codec().decode(Codec().frame(body))


@settings(max_examples=200, deadline=None)
@given(st.lists(_delta, min_size=1, max_size=12), st.integers(1, 300), st.integers(1, 3))
def test_a_segment_joined_from_steps_is_the_segment_packed_from_decoded_bodies(deltas, first, fanout):
    steps, bodies = [], []
    for i, delta in enumerate(deltas):
        body, step, as_dict = _joined(delta, 1.7e9 + i / 3)
        assert Codec().frame(body) == Codec().encode(as_dict)  # the delta as it was written
        steps.append(step)
        bodies.append(_decoded(body))
    seg, seg_steps = join_segment(first, steps, 1)
    assert seg == pack_value(pack_segment(first, bodies, 1))
    decoded = _decoded(seg)
    assert seg_steps == steps_of(split_segment(decoded))
    # a merge of segments (the next level) from their steps, against the decoded path
    merged_steps = seg_steps * fanout
    merged, _ = join_segment(first, merged_steps, 2)
    reference = pack_segment(first, split_segment(decoded) * fanout, 2)
    assert merged == pack_value(reference)


def _run(engine: ChainEngine, script: list[tuple[str, Any]], forget_at: int) -> list[tuple[bytes, int]]:
    """Commit ``script`` one op a version; at ``forget_at`` the kept tail loses its steps,
    as after a load. Returns each write's payload and level."""
    ctx = ExecutionContext("r", reducers=default_registry().register("cfg", "merge"))
    known, out = Known(0, NO_CHAIN, []), []
    chain = NO_CHAIN
    for i, (key, value) in enumerate(script):
        version = i + 1
        ctx.merge({key: value})
        if i == forget_at and known.tail:
            tail = [(p, n, lv, None) for p, n, lv, _steps in known.tail]
            known = known._replace(tail=tail)
        changes = ctx.take_changes()
        plan = engine.plan(
            changes, known, node="n", status=RunStatus.RUNNING, now=time.time(), meta={},
            meta_dated=False, expires_at=None, require_status=None, write_id="",
        )  # fmt: skip
        chain = plan.write.chain_after(chain, version)
        ctx.saved(version, datetimes=plan.walked)
        out.append((plan.write.payload, plan.level))
        known = engine.after(plan, version, chain, known.tail)
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("messages"), st.lists(st.text("xyz", max_size=30), min_size=1, max_size=3)),
            st.tuples(
                st.just("cp"),
                st.dictionaries(st.text("ab", max_size=2), st.integers(-(2**40), 2**40), max_size=3),
            ),
            st.tuples(
                st.just("cfg"), st.dictionaries(st.sampled_from("abc"), st.integers(-9, 9), max_size=2)
            ),
        ),
        min_size=1,
        max_size=60,
    ),
    st.integers(0, 60),
)
def test_a_tail_read_back_from_the_database_seals_to_the_same_bytes(script, forget_at):
    policy = CompactionPolicy(max_chain=10_000, seal_versions=3, seal_fanout=2, seal_bytes=1 << 20)
    engine = ChainEngine(Codec(), policy, seals=True, splits_state=False)
    kept = _run(engine, script, forget_at=-1)
    read_back = _run(engine, script, forget_at=forget_at)
    assert [level for _, level in kept] == [level for _, level in read_back]
    # the times differ between the runs: compare the segments decoded, times aside
    for (a, _), (b, _) in zip(kept, read_back, strict=True):
        da, db = Codec().decode(a), Codec().decode(b)
        da.pop("ts"), db.pop("ts")
        assert da == db


def test_rows_written_by_the_decoding_seal_still_load():
    """Rows as the previous code wrote them (deltas encoded as dicts, segments packed from
    decoded bodies) replay with this code, and to the state it gets from its own rows."""
    codec = Codec()
    engine = ChainEngine(codec, CompactionPolicy(), seals=True, splits_state=False)
    full = codec.encode({"v": 1, "kind": "full", "node": None, "status": str(RunStatus.RUNNING), "ts": 1.0, "meta": {},
                         "executed": [], "state": {"messages": ["a"], "cp": {}}})  # fmt: skip
    bodies = [
        {"v": 2, "node": "n", "status": str(RunStatus.RUNNING), "ts": 2.0 + i, "meta": {}, "kind": "delta",
         "ops": [["messages", "append", [f"m{i}"]], ["cp", "set", {"i": i}]], "executed": ["n"] * (i == 0)}
        for i in range(5)
    ]  # fmt: skip
    old_segment = codec.encode(pack_segment(2, bodies[:3]))
    old_deltas = [codec.encode(b) for b in bodies[3:]]
    chain = [(1, full), (2, old_segment), (3, b""), (4, b""), (5, old_deltas[0]), (6, old_deltas[1])]
    cp = engine.checkpoint_of("r", chain)
    assert cp.state == {"messages": ["a", "m0", "m1", "m2", "m3", "m4"], "cp": {"i": 4}}
    assert cp.executed_node_ids == ["n"]
    # the same rows joined from steps are the same bytes
    steps = [
        join_delta(2, b["node"], b["status"], b["ts"], b["meta"], b["ops"], b["executed"]) for b in bodies
    ]
    assert [codec.frame(s[0]) for s in steps[3:]] == old_deltas
    assert codec.frame(join_segment(2, [s[1] for s in steps[:3]], 1)[0]) == old_segment
    # and a tail of those old rows (no steps) seals with a new delta, decoding them
    tail = engine.replay("r", chain)[3]
    assert tail is not None and [c[1:] for c in tail] == [(3, 1, None), (1, 0, None), (1, 0, None)]
    sealing = ChainEngine(
        codec, CompactionPolicy(seal_versions=3, seal_fanout=2), seals=True, splits_state=False
    )
    new = {**bodies[4], "ts": 9.0, "ops": [["messages", "append", ["m5"]]]}
    body, step, _ = join_delta(2, new["node"], new["status"], 9.0, {}, new["ops"], [])
    first, level, segment, _steps = sealing.seal("r", 6, tail, codec.frame(body), step)
    assert (first, level) == (2, 2)
    assert segment == codec.encode(pack_segment(2, [*bodies, new], 2))
