"""ExecutionContext: reducers, validation, deltas, snapshots, threads."""

from __future__ import annotations

import datetime as dt
import enum
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.errors import ConfigError, InvalidStateValue
from tether.state import ExecutionContext, ReducerRegistry, default_registry, upsert_by
from tether.state.reducers import apply_op
from tether.state.values import copy_value


def test_default_reducers_follow_seed_003():
    """messages and execution_history append; *_output and other keys overwrite."""
    ctx = ExecutionContext("r")
    ctx.merge({"messages": [1], "execution_history": ["a"], "plan_output": 1, "x": 1})
    ctx.merge({"messages": [2, 3], "execution_history": "b", "plan_output": 2, "x": 2})
    assert ctx.get("messages") == [1, 2, 3]
    assert ctx.get("execution_history") == ["a", "b"]
    assert ctx.get("plan_output") == 2
    assert ctx.get("x") == 2


def test_user_reducers_by_key_and_pattern_override_defaults():
    """A registered key or glob wins over the defaults; later patterns win over earlier."""
    reg = default_registry().register("messages", "overwrite").register("*_count", "counter")
    reg.register("tool_*", "merge").register("tool_special_*", "append")
    ctx = ExecutionContext("r", reducers=reg)
    ctx.merge({"messages": [1], "a_count": 2, "tool_cfg": {"a": 1}, "tool_special_x": 1})
    ctx.merge({"messages": [2], "a_count": 3, "tool_cfg": {"b": 2}, "tool_special_x": 2})
    assert ctx.get("messages") == [2]
    assert ctx.get("a_count") == 5
    assert ctx.get("tool_cfg") == {"a": 1, "b": 2}
    assert ctx.get("tool_special_x") == [1, 2]


def test_upsert_by_id_replaces_in_place_and_appends_new():
    ctx = ExecutionContext("r")
    ctx.register_reducer("items", upsert_by("key"))
    ctx.merge({"items": [{"key": 1, "v": "a"}, {"key": 2, "v": "b"}]})
    ctx.merge({"items": {"key": 1, "v": "A"}})
    ctx.merge({"items": [{"key": 3, "v": "c"}]})
    assert ctx.get("items") == [{"key": 1, "v": "A"}, {"key": 2, "v": "b"}, {"key": 3, "v": "c"}]
    with pytest.raises(InvalidStateValue, match="needs dicts with 'key'"):
        ctx.merge({"items": [{"nokey": 1}]})


def test_unknown_reducer_name_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown reducer 'apend'"):
        ReducerRegistry().register("x", "apend")


class Color(enum.Enum):
    RED = 1


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ((1, 2), "use a list"),
        ({1, 2}, "sorted list"),
        (object(), "allowed: str"),
        (Color.RED, "allowed: str"),
        (2**64, "64 bits"),
        ({"a": {1: "x"}}, "dict keys must be str"),
        ([1, [2, bytearray(b"x")]], "use bytes"),
    ],
)
def test_values_that_cannot_round_trip_are_refused_at_put_and_merge(value, fragment):
    """The error names the key and path, and the state is unchanged."""
    ctx = ExecutionContext("r", {"keep": 1})
    with pytest.raises(InvalidStateValue, match=fragment) as err:
        ctx.put("bad", value)
    assert err.value.key == "bad" and "'bad'" in str(err.value)
    with pytest.raises(InvalidStateValue):
        ctx.merge({"ok": 1, "bad": value})
    assert ctx.snapshot() == {"keep": 1}  # merge is all-or-nothing


def test_datetime_with_foreign_tzinfo_is_refused():
    class Odd(dt.tzinfo):
        def utcoffset(self, d):
            return dt.timedelta(0)

    with pytest.raises(InvalidStateValue, match="tzinfo"):
        ExecutionContext("r").put("t", dt.datetime(2020, 1, 1, tzinfo=Odd()))


def test_snapshot_is_a_deep_copy_and_restore_replaces():
    ctx = ExecutionContext("r", {"messages": [{"a": [1]}]})
    snap = ctx.snapshot()
    snap["messages"][0]["a"].append(2)
    assert ctx.get("messages") == [{"a": [1]}]
    ctx.restore({"other": 1})
    assert ctx.snapshot() == {"other": 1}
    assert ctx.pending().full


def test_delta_records_reducer_ops_and_overwrites_drop_earlier_ops():
    ctx = ExecutionContext("r")
    ctx.take_changes()
    ctx.saved(1)  # pretend the first full save happened
    ctx.merge({"messages": ["a"], "x": 1})
    ctx.merge({"messages": ["b"], "x": 2})
    ctx.put("messages", ["z"])
    ops = ctx.pending().ops
    assert ("x", "set", 1) not in ops
    assert ops == [("x", "set", 2), ("messages", "set", ["z"])]


def test_put_trusted_overwrites_like_put_and_keeps_the_taken_state():
    """``put_trusted`` (no value walk) records the same set op as ``put``, drops earlier
    ops on the key, and copies a state lent to a store before changing it."""
    ctx = ExecutionContext("r", {"w": [1]}, reducers=default_registry().register("w", "append"))
    ctx.take_changes()
    ctx.saved(1)
    ctx.merge({"w": [2]})
    taken = ctx.take_changes()
    ctx.put_trusted("w", [b"x"])
    assert dict(taken.state) == {"w": [1, 2]}
    assert ctx.pending().ops == [("w", "set", [b"x"])]
    ctx.merge({"w": [3]})
    ctx.put_trusted("w", [4], dated=True)
    assert ctx.pending().ops == [("w", "set", [4])] and ctx.get("w") == [4]
    with pytest.raises(InvalidStateValue):
        ctx.put_trusted("", 1)  # the key is still checked


def test_failed_save_gives_the_delta_back():
    ctx = ExecutionContext("r")
    ctx.take_changes()
    ctx.merge({"messages": ["a"]})
    taken = ctx.take_changes()
    ctx.merge({"messages": ["b"]})
    ctx.restore_changes(taken)
    assert ctx.pending().ops == [("messages", "append", ["a"]), ("messages", "append", ["b"])]


def test_changes_given_back_go_first_alone_with_their_write_id():
    """After a save of unknown outcome, the next take hands those changes back as they
    were (so a store can find them if they landed), then what was recorded since."""
    ctx = ExecutionContext("r")
    ctx.take_changes()
    ctx.saved(1)
    ctx.merge({"messages": ["a"]})
    taken = ctx.take_changes()
    ctx.merge({"messages": ["b"]})
    ctx.restore_changes(taken._replace(write_id="w1"))
    again = ctx.take_changes()
    assert again.write_id == "w1" and again.followed and again.version == 1
    assert again.ops == (("messages", "append", ["a"]),)
    ctx.saved(2)
    later = ctx.take_changes()
    assert later.write_id == "" and not later.followed and later.version == 2
    assert later.ops == (("messages", "append", ["b"]),)
    ctx.saved(3)
    assert not ctx.dirty


def test_taken_state_stays_as_taken_while_the_changes_are_out():
    """The state is lent to the store, not copied: a change made before the store is done
    (or after its save failed) must not show in what it encodes."""
    ctx = ExecutionContext("r", {"x": 1, "y": 1})
    first = ctx.take_changes()
    ctx.put("x", 2)
    ctx.merge({"z": 3})
    ctx.delete("y")
    assert dict(first.state) == {"x": 1, "y": 1}
    ctx.saved(1)
    taken = ctx.take_changes()
    assert dict(taken.state) == {"x": 2, "z": 3}
    ctx.restore_changes(taken._replace(write_id="w"))
    ctx.put("x", 4)  # recorded after the failed save: the retry still sends the old state
    again = ctx.take_changes()
    assert dict(again.state) == {"x": 2, "z": 3} and again.followed
    ctx.saved(2)
    later = ctx.take_changes()
    assert dict(later.state) == {"x": 4, "z": 3} and not later.write_id
    ctx.saved(3)
    ctx.put("x", 5)
    assert dict(again.state) == {"x": 2, "z": 3} and ctx.get("x") == 5


def test_threads_merging_at_once_lose_nothing():
    """ExecutionContext is safe to share between threads."""
    ctx = ExecutionContext("r", reducers=default_registry().register("n", "counter"))

    def work(tag: int) -> None:
        for i in range(500):
            ctx.merge({"messages": [f"{tag}-{i}"], "n": 1})

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ctx.get("messages")) == 4000 and len(set(ctx.get("messages"))) == 4000
    assert ctx.get("n") == 4000


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63), st.text(max_size=5))
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)
updates = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "messages": st.lists(json_value, max_size=3),
            "cfg": st.dictionaries(st.text(max_size=3), json_value, max_size=3),
            "n": st.integers(-100, 100),
            "todo": st.lists(st.fixed_dictionaries({"id": st.integers(0, 4), "v": json_value}), max_size=3),
            "x_output": json_value,
        },
    ),
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(updates)
def test_replaying_recorded_ops_rebuilds_the_state(batch):
    """The delta comes from the reducers: replaying its ops on the old state gives the new one."""
    reg = (
        default_registry().register("cfg", "merge").register("n", "counter").register("todo", upsert_by("id"))
    )
    ctx = ExecutionContext("r", {"messages": ["start"]}, reducers=reg)
    ctx.take_changes()
    before = ctx.snapshot()
    for update in batch:
        ctx.merge(update)
    state = copy_value(before)
    for key, op, arg in ctx.pending().ops:
        state[key] = apply_op(state.get(key), op, copy_value(arg))
    assert state == ctx.snapshot()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(json_value, max_size=4), max_size=6))
def test_append_in_batches_equals_one_at_a_time(chunks):
    one = ExecutionContext("a")
    many = ExecutionContext("b")
    for chunk in chunks:
        one.merge({"messages": chunk})
        for item in chunk:
            many.merge({"messages": [item]})
    assert one.get("messages", []) == many.get("messages", [])


def _holds_datetime(value):
    if type(value) is dt.datetime:
        return True
    if type(value) is dict:
        return any(_holds_datetime(v) for v in value.values())
    if type(value) is list:
        return any(_holds_datetime(v) for v in value)
    return False


when = st.one_of(
    st.just(dt.datetime(2026, 3, 29, 1, 30)),
    st.just(dt.datetime(2026, 3, 29, 1, 30, tzinfo=dt.UTC)),
)
dated_value = st.recursive(
    st.one_of(json_leaf, when),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("merge"), st.sampled_from(["messages", "cfg", "x_output", "todo", "mine"]), dated_value
        ),
        st.tuples(st.just("put"), st.sampled_from(["messages", "cfg", "x_output"]), dated_value),
        st.tuples(st.just("delete"), st.sampled_from(["messages", "cfg", "x_output"]), st.none()),
        st.tuples(st.just("restore"), st.just(""), st.dictionaries(st.sampled_from(["a", "b"]), dated_value)),
        st.tuples(st.just("reload"), st.just(""), st.none()),
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_a_state_said_to_hold_no_datetime_holds_none(steps):
    """The faster encoder (msgspec) cannot write a datetime as tether does, so it is used
    only when the context says the state holds none: that must never be wrong, whatever
    the reducers did (a built-in one keeps the old value's datetimes; overwrite drops them)."""
    reg = default_registry().register("cfg", "merge").register("todo", upsert_by("id"))
    reg.register("mine", lambda old, new: [old, new])  # a user reducer: its result is checked
    ctx = ExecutionContext("r", reducers=reg)
    for op, key, value in steps:
        try:
            if op == "merge":
                ctx.merge({key: value})
            elif op == "put":
                ctx.put(key, value)
            elif op == "delete":
                ctx.delete(key)
            elif op == "restore":
                ctx.restore(value)
            else:  # as a store hands back a loaded state: not known until asked
                ctx = ExecutionContext.from_stored(
                    "r", ctx.snapshot(), [], version=1, node_id=None, reducers=reg
                )
        except InvalidStateValue:
            continue  # a reducer refused the value: nothing changed
        said = ctx._holds_datetimes()
        assert said or not _holds_datetime(ctx.snapshot())


def test_copy_value_copies_every_container_and_keeps_scalars_exact() -> None:
    """copy_value (msgspec's C walk) must rebuild every dict and list at every depth, so no
    change to a copy reaches the original, and hand back scalars as they are: a datetime
    keeps its zone (not ISO text), bytes stay bytes (not base64), big ints stay ints."""
    import datetime as dt
    from zoneinfo import ZoneInfo

    when = dt.datetime(2026, 3, 29, 1, 30, tzinfo=ZoneInfo("Europe/Paris"))
    original = {
        "m": [{"content": "hi", "at": when, "raw": b"\x00", "n": [[1, 2**64 - 1], {"x": -(2**63)}]}],
        "naive": dt.datetime(2026, 1, 1),
        "flags": [True, False, None, 1.5],
    }
    copied = copy_value(original)
    assert copied == original
    assert copied["m"] is not original["m"] and copied["m"][0] is not original["m"][0]
    assert copied["m"][0]["n"][0] is not original["m"][0]["n"][0]
    assert copied["m"][0]["n"][1] is not original["m"][0]["n"][1]
    assert copied["m"][0]["at"] is when and type(copied["m"][0]["raw"]) is bytes
    assert type(copied["flags"][0]) is bool and copied["naive"].tzinfo is None
    copied["m"][0]["n"][0].append(3)
    copied["m"][0]["content"] = "changed"
    assert original["m"][0]["n"][0] == [1, 2**64 - 1] and original["m"][0]["content"] == "hi"


def test_a_registry_remembers_pattern_lookups_and_forgets_them_on_register() -> None:
    """A key resolved through a glob is remembered (a run merges the same keys every step);
    a registration made later, exact or by pattern, still applies."""
    reg = ReducerRegistry().register("c:*", "append").register("m", "merge")
    assert reg.reducer_for("c:messages").op == "append"  # type: ignore[attr-defined]
    assert reg.reducer_for("cp").op == "set"  # type: ignore[attr-defined]
    reg.register("c:messages", "merge")
    assert reg.reducer_for("c:messages").op == "merge"  # type: ignore[attr-defined]
    assert reg.reducer_for("c:other").op == "append"  # type: ignore[attr-defined]
    reg.register("c:o*", "merge")
    assert reg.reducer_for("c:other").op == "merge"  # type: ignore[attr-defined]
    assert reg.copy().reducer_for("c:other").op == "merge"  # type: ignore[attr-defined]
