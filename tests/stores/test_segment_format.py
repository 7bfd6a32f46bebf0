"""The segment payload on its own: packing the deltas of several versions into one row and
replaying it, whole or up to any version inside it, gives what the deltas one by one give."""

from __future__ import annotations

import copy
import struct
from typing import Any

import ormsgpack
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tether.stores._chain import apply_delta as _apply
from tether.stores._segment import apply_segment, pack_segment, split_segment

KEYS = ["messages", "notes", "config", "count", "todo", "out"]

values = st.one_of(st.integers(-5, 5), st.booleans(), st.text(max_size=3), st.none())
items = st.lists(st.one_of(values, st.dictionaries(st.sampled_from("ab"), values, max_size=2)), max_size=3)
ops = st.one_of(
    st.tuples(st.sampled_from(["messages", "notes"]), st.just("append"), items),
    st.tuples(st.sampled_from(KEYS), st.just("set"), st.one_of(values, items)),
    st.tuples(
        st.just("config"), st.just("merge"), st.dictionaries(st.sampled_from("xyz"), values, max_size=2)
    ),
    st.tuples(st.just("count"), st.just("add"), st.integers(-3, 3)),
    st.tuples(
        st.just("todo"),
        st.just("upsert:id"),
        st.lists(st.fixed_dictionaries({"id": st.sampled_from("pq"), "s": values}), max_size=2),
    ),
)
bodies = st.lists(
    st.fixed_dictionaries(
        {
            "v": st.just(2),
            "kind": st.just("delta"),
            "node": st.one_of(st.none(), st.sampled_from(["plan", "act"])),
            "status": st.sampled_from(["running", "paused"]),
            "ts": st.floats(0, 2e9),
            "meta": st.one_of(
                st.just({}), st.dictionaries(st.sampled_from("mn"), st.one_of(st.just(1), st.just(True)))
            ),
            "executed": st.lists(st.text("xyz", min_size=1, max_size=2), max_size=2),
            "ops": st.lists(ops.map(list), max_size=4),
        }
    ),
    min_size=1,
    max_size=9,
)


def _roundtrip(payload: dict[str, Any]) -> dict[str, Any]:
    """What a store hands back: the payload encoded and decoded."""
    out: dict[str, Any] = ormsgpack.unpackb(ormsgpack.packb(payload))
    return out


def _valid(deltas: list[dict[str, Any]]) -> bool:
    """Whether the deltas replay at all (an append onto a non-list is refused either way)."""
    try:
        _replay_each({}, deltas)
    except Exception:
        return False
    return True


def _replay_each(start: dict[str, Any], deltas: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    state, executed = copy.deepcopy(start), []
    for body in deltas:
        _apply(state, executed, _roundtrip(body))
    return state, executed


@settings(max_examples=300, deadline=None)
@given(bodies)
def test_a_segment_replays_as_its_deltas_do_up_to_every_version(deltas):
    assume(_valid(deltas))
    original = copy.deepcopy(deltas)
    seg = pack_segment(7, deltas)
    assert deltas == original  # packing never changes the deltas it was given
    assert seg["first"] == 7 and seg["n"] == len(deltas)
    for count in range(1, len(deltas) + 1):
        state, executed = {"messages": ["old"]}, ["n0"]
        head = apply_segment(state, executed, _roundtrip(seg), count)
        want_state, want_executed = _replay_each({"messages": ["old"]}, deltas[:count])
        want_executed = ["n0", *want_executed]
        assert (state, executed) == (want_state, want_executed), count
        last = deltas[count - 1]
        assert head == {k: last[k] for k in ("node", "status", "ts", "meta")}
        assert type(head["meta"]) is dict and all(
            type(head["meta"][k]) is type(last["meta"][k]) for k in last["meta"]
        )  # {"m": 1} and {"m": True} are equal, not the same


@settings(max_examples=200, deadline=None)
@given(bodies, st.integers(0, 8))
def test_split_gives_back_each_version_and_repacks_to_the_same(deltas, cut):
    assume(_valid(deltas))
    seg = _roundtrip(pack_segment(3, deltas))
    split = split_segment(seg)
    assert len(split) == len(deltas)
    for got, want in zip(split, deltas, strict=True):
        assert {k: got[k] for k in ("node", "status", "ts", "meta", "executed")} == {
            k: want[k] for k in ("node", "status", "ts", "meta", "executed")
        }
    # every version's state is the same whether its deltas come split or as they were
    assert _replay_each({}, split) == _replay_each({}, deltas)
    # the versions after a cut, packed again (what prune does inside a segment)
    cut = min(cut, len(deltas) - 1)
    rest = pack_segment(3 + cut, split[cut:])
    base, _ = _replay_each({}, deltas[:cut])
    state, executed = copy.deepcopy(base), []
    apply_segment(state, executed, _roundtrip(rest), len(deltas) - cut)
    assert (state, executed) == _replay_each(base, deltas[cut:])


def test_consecutive_appends_of_a_key_become_one_op():
    deltas = [
        {"node": "n", "status": "running", "ts": float(i), "meta": {}, "executed": [f"n{i}"],
         "ops": [["messages", "append", [i]], ["out", "set", i]]}
        for i in range(5)
    ]  # fmt: skip
    seg = pack_segment(1, deltas)
    names = seg["names"]  # each key and op name once; the ops give their positions
    ops = [[names[op[0]], names[op[1]], op[2]] for op in seg["ops"]]
    assert ops == [["messages", "append", [0, 1, 2, 3, 4]], ["out", "set", 4]]  # sets: a run
    assert sorted(names) == ["append", "messages", "out", "set"]
    assert seg["ops"][0][4] == struct.pack("<10I", 0, 1, 1, 2, 2, 3, 3, 4, 4, 5)
    assert seg["node"] == "n" and seg["status"] == "running" and seg["meta"] == {}  # one value for all
    assert seg["executed"] == ["n0", "n1", "n2", "n3", "n4"]
    assert seg["ends"] == struct.pack("<5I", 1, 2, 3, 4, 5) and seg["ts"] == struct.pack("<5d", 0, 1, 2, 3, 4)
    assert deltas[0]["ops"][0][2] == [0]  # the first delta's list was copied, not extended


@settings(max_examples=300, deadline=None)
@given(bodies, bodies, bodies, st.integers(1, 3))
def test_segments_packed_whole_into_a_merged_one_replay_as_their_deltas(a, b, c, level):
    """A merge packs decoded segments by their ops (never split into versions first): the
    segment it makes replays, whole and up to every version, as all the deltas one by one,
    and splits back into each version's head."""
    deltas = [*a, *b, *c]
    assume(_valid(deltas))
    original = copy.deepcopy(deltas)
    parts = (
        [_roundtrip(pack_segment(4, a)), *b[:1], _roundtrip(pack_segment(5 + len(a), b[1:]))]
        if len(b) > 1
        else [
            _roundtrip(pack_segment(4, a)),
            *b,
        ]
    )
    parts.append(_roundtrip(pack_segment(0, c)) if len(c) > 1 else c[0])
    kept = copy.deepcopy(parts)
    merged = pack_segment(4, parts, level + 1)
    assert deltas == original and parts == kept  # the parts are not changed
    assert merged["n"] == len(deltas) and merged["lv"] == level + 1
    seg = _roundtrip(merged)
    for count in range(1, len(deltas) + 1):
        state, executed = {"messages": ["old"]}, ["n0"]
        head = apply_segment(state, executed, _roundtrip(seg), count)
        want_state, want_executed = _replay_each({"messages": ["old"]}, deltas[:count])
        assert (state, executed) == (want_state, ["n0", *want_executed]), count
        assert head == {k: deltas[count - 1][k] for k in ("node", "status", "ts", "meta")}
    for got, want in zip(split_segment(seg), deltas, strict=True):
        assert {k: got[k] for k in ("node", "status", "ts", "meta", "executed")} == {
            k: want[k] for k in ("node", "status", "ts", "meta", "executed")
        }
    # the same ops as a merge of the versions split one by one (what a merge packed before)
    assert merged == pack_segment(4, deltas, level + 1)


def test_a_keys_sets_and_merges_become_one_run_whose_earlier_arguments_stay_bytes():
    """A run holds its outcome decoded (the last set, or the merges' union) and each
    earlier version's own argument as MessagePack bytes: a read of the latest state decodes
    the outcome alone; a split or a read of an older version decodes the bytes it needs."""
    deltas = [
        {"v": 2, "kind": "delta", "node": "n", "status": "running", "ts": float(i), "meta": {},
         "executed": [], "ops": [["cp", "set", {"id": i, "seen": [i]}], ["m", "merge", {f"c{i % 2}": i}]]}
        for i in range(4)
    ]  # fmt: skip
    original = copy.deepcopy(deltas)
    seg = _roundtrip(pack_segment(1, deltas))
    assert deltas == original  # the merges' union is a dict of the run's own
    names = seg["names"]
    (cp, m) = seg["ops"]
    assert [names[cp[0]], names[cp[1]], cp[2], cp[3]] == ["cp", "set", {"id": 3, "seen": [3]}, 3]
    assert [names[m[0]], names[m[1]], m[2], m[3]] == ["m", "merge", {"c0": 2, "c1": 3}, 3]
    ends = [len(ormsgpack.packb({"id": i, "seen": [i]})) for i in range(3)]
    assert cp[4] == struct.pack("<6I", 0, ends[0], 1, sum(ends[:2]), 2, sum(ends))
    assert cp[5] == b"".join(ormsgpack.packb({"id": i, "seen": [i]}) for i in range(3))
    assert m[5] == b"".join(ormsgpack.packb({f"c{i % 2}": i}) for i in range(4))  # each merge's own
    for count in range(1, 5):
        state: dict[str, Any] = {"m": {"c9": 9}}
        apply_segment(state, [], seg, count)
        assert state == _replay_each({"m": {"c9": 9}}, deltas[:count])[0], count
    assert [body["ops"] for body in split_segment(seg)] == [d["ops"] for d in deltas]


def test_appends_of_merged_segments_join_into_one_op_with_their_marks_moved():
    def delta(i: int) -> dict[str, Any]:
        return {"node": "n", "status": "running", "ts": float(i), "meta": {}, "executed": [],
                "ops": [["messages", "append", [i, i]]]}  # fmt: skip

    first = _roundtrip(pack_segment(1, [delta(0), delta(1)]))
    second = _roundtrip(pack_segment(3, [delta(2), delta(3)]))
    merged = pack_segment(1, [first, second, delta(4)], 2)
    assert merged["ops"] == [
        [0, 1, [0, 0, 1, 1, 2, 2, 3, 3, 4, 4], 0, struct.pack("<10I", 0, 2, 1, 4, 2, 6, 3, 8, 4, 10)]
    ]
    assert merged["names"] == ["messages", "append"] and merged["n"] == 5 and "ends" not in merged


def test_a_seal_decodes_its_carriers_without_checking_their_checksum_again(monkeypatch):
    """The rows a seal packs are bytes the store encoded or checked as it read them (its
    carriers, kept in memory since): their CRC is not computed a second time."""
    from tether.state import serde
    from tether.state.serde import Codec
    from tether.stores._chain import ChainEngine
    from tether.stores.policies import CompactionPolicy

    codec = Codec()
    engine = ChainEngine(codec, CompactionPolicy(seal_versions=4), seals=True, splits_state=False)
    deltas = [
        {"v": 2, "kind": "delta", "node": "n", "status": "running", "ts": float(i), "meta": {},
         "executed": [], "ops": [["messages", "append", [i]]]}
        for i in range(4)
    ]  # fmt: skip
    tail = [(codec.encode(body), 1, 0) for body in deltas[:3]]
    payload = codec.encode(deltas[3])

    def checked(data: bytes) -> None:
        raise AssertionError("a carrier's checksum computed again")

    monkeypatch.setattr(serde, "_checked", checked)
    monkeypatch.setattr(serde, "_unpack_checked", checked)
    first, level, packed = engine.seal("r", 4, tail, payload, deltas[3])
    monkeypatch.undo()
    assert (first, level) == (2, 1)
    seg = codec.decode(packed)  # the segment itself carries a checksum, checked here
    state: dict[str, Any] = {"messages": []}
    apply_segment(state, [], seg, 4)
    assert state == {"messages": [0, 1, 2, 3]}


def test_a_segment_written_before_runs_reads_and_merges_into_one_with_runs():
    """A schema 3 segment (each version's set and merge an op of its own) still replays, and
    a merge of it with later deltas (a thread continued after an upgrade) makes runs that
    replay, whole and up to every version, as all the deltas one by one."""
    deltas = [
        {"v": 2, "kind": "delta", "node": "n", "status": "running", "ts": float(i), "meta": {},
         "executed": [], "ops": [["cp", "set", {"id": i}], ["m", "merge", {f"c{i % 3}": i}]]}
        for i in range(5)
    ]  # fmt: skip
    before = {
        "v": 3, "kind": "segment", "first": 1, "n": 2, "lv": 1, "node": "n", "status": "running",
        "meta": {}, "ts": struct.pack("<2d", 0.0, 1.0), "executed": [],
        "names": ["cp", "set", "m", "merge"],
        "ops": [[0, 1, {"id": 0}, 0], [2, 3, {"c0": 0}, 0], [0, 1, {"id": 1}, 1], [2, 3, {"c1": 1}, 1]],
    }  # fmt: skip
    for count in (1, 2):
        state: dict[str, Any] = {}
        apply_segment(state, [], _roundtrip(before), count)
        assert state == _replay_each({}, deltas[:count])[0]
    merged = _roundtrip(pack_segment(1, [_roundtrip(before), *deltas[2:]], 2))
    assert [len(op) for op in merged["ops"]] == [6, 6]  # one run each for cp and m
    for count in range(1, 6):
        state = {}
        apply_segment(state, [], merged, count)
        assert state == _replay_each({}, deltas[:count])[0], count
    assert [body["ops"] for body in split_segment(merged)] == [d["ops"] for d in deltas]
