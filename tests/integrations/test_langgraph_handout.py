"""The copies reads hand out share nothing mutable, and the collector pause always ends."""

from __future__ import annotations

import dataclasses
import gc
import threading
import weakref
from collections import OrderedDict, defaultdict
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from pydantic import BaseModel

from tether.integrations.langgraph import TetherSaver, _handout
from tether.integrations.langgraph._handout import copied, gc_paused


@dataclasses.dataclass
class Note:
    tags: list[str]


def _objects(value: object) -> list[object]:
    """Every mutable container reachable from ``value`` (lists, dicts, models' dicts)."""
    out: list[object] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, dict)):
            out.append(v)
            stack.extend(v.values() if isinstance(v, dict) else v)
        elif hasattr(v, "__dict__"):
            out.append(v)
            stack.append(vars(v))
    return out


def test_a_copy_is_equal_and_shares_no_mutable_object() -> None:
    value = {
        "messages": [
            AIMessage(
                content="calling",
                id="a1",
                tool_calls=[{"id": "c1", "name": "search", "args": {"q": ["x", "y"]}}],
                additional_kwargs={"k": {"nested": [1, 2]}},
            ),
            ToolMessage(content="found", tool_call_id="c1", id="t1", artifact={"rows": [1]}),
        ],
        "notes": (Note(["a"]), {"b": [1]}),
        "count": 3,
    }
    twin = copied(value)
    assert twin == value
    mine = {id(o) for o in _objects(value)}
    assert not mine & {id(o) for o in _objects(twin)}
    twin["messages"][0].tool_calls[0]["args"]["q"].append("z")
    twin["messages"][1].content = "edited"
    twin["notes"][0].tags.append("b")
    assert value["messages"][0].tool_calls[0]["args"]["q"] == ["x", "y"]
    assert value["messages"][1].content == "found" and value["notes"][0].tags == ["a"]
    assert twin["messages"][0].model_fields_set == value["messages"][0].model_fields_set


def test_copied_messages_own_their_ids() -> None:
    """A chat's copied messages get id strings of their own (equal, not shared), so that
    LangGraph's per-step scan of every id reads the copies' memory only."""
    chat = [HumanMessage(content="hi", id="lc_run--" + "7" * 36), AIMessage(content="yes", id="a" * 40)]
    for twin in (copied(chat), copied({"messages": chat})["messages"]):
        assert [m.id for m in twin] == [m.id for m in chat]
        assert all(t.id is not m.id for t, m in zip(twin, chat, strict=True))
        assert twin == chat
    no_id = copied([AIMessage(content="x")])
    assert no_id[0].id is None


def test_the_collector_pause_nests_across_threads_and_ends() -> None:
    assert gc.isenabled()
    inside = threading.Event()
    leave = threading.Event()

    def hold() -> None:
        with gc_paused():
            inside.set()
            leave.wait(5)

    t = threading.Thread(target=hold)
    with gc_paused():
        t.start()
        inside.wait(5)
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread still holds its pause
    leave.set()
    t.join()
    assert gc.isenabled()
    try:
        with gc_paused():
            raise ValueError("decoding failed")
    except ValueError:
        pass
    assert gc.isenabled()


def test_what_a_pause_built_is_filed_as_old_without_a_young_collection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A large state built in a pause leaves the young generation empty: the next allocation
    triggers no collection that walks it (and no collection runs on leaving)."""
    monkeypatch.setattr(_handout, "_young_owed", False)  # (what an earlier settle owes)
    monkeypatch.setattr(_handout, "_settled_ever", False)
    monkeypatch.setattr(_handout, "_filed", 0)
    passes: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            passes.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        with gc_paused():
            state = [{"n": [i]} for i in range(20_000)]
        young = gc.get_count()[0]
        more = [[i] for i in range(100)]
    finally:
        gc.callbacks.remove(seen)
    assert young < 100 and not passes and len(state) == 20_000 and more
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_process_that_froze_its_heap_keeps_it_frozen() -> None:
    """Filing as old unfreezes what is frozen: a process that froze objects itself (before a
    fork) keeps them frozen, and the state then ages as usual."""
    gc.collect()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with gc_paused():
            state = [{"n": [i]} for i in range(20_000)]
        assert gc.get_freeze_count() == frozen and len(state) == 20_000
    finally:
        gc.unfreeze()


class _Cycle:
    """A garbage cycle once dropped: only the cycle collector frees it."""

    def __init__(self) -> None:
        self.me = self


class _Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def test_garbage_cycles_made_around_reads_of_a_big_thread_are_collected(tmp_path: Path) -> None:
    """A loop that reads a big thread again and again (each copy filed as old at once)
    while the application makes garbage cycles: the cycles are collected as the
    collector alone would, not kept for good. Filing as old resets the collector's
    counts; a cycle made right before a read was filed with the copy and stayed alive,
    and no middle or full collection ran again (300 of 300 cycles alive before the fix)."""
    g = StateGraph(_Chat)
    g.add_node("agent", lambda s: {"messages": [AIMessage(content="ok")]})
    g.add_edge(START, "agent")
    g.add_edge("agent", END)
    with TetherSaver.from_url(f"sqlite:///{tmp_path / 'gc.db'}") as saver:
        graph = g.compile(checkpointer=saver)
        cfg: Any = {"configurable": {"thread_id": "big"}}
        messages = [HumanMessage(content=f"m{i}", id=str(i)) for i in range(5000)]
        graph.update_state(cfg, {"messages": messages}, as_node="agent")
        graph.get_state(cfg)  # (what the first settle files as old waits for a full collection)
        gc.collect()
        refs: list[weakref.ref[_Cycle]] = []
        older = gc.get_stats()[1]["collections"]
        for i in range(60):
            work = [{"n": i} for _ in range(2000)]  # the application's own allocations
            cycle = _Cycle()  # dropped right before the read: young when the copy is settled
            refs.append(weakref.ref(cycle))
            del cycle
            state = graph.get_state(cfg)
            assert len(state.values["messages"]) == 5000
            del state, work
        alive = [i for i, r in enumerate(refs) if r() is not None]
        assert alive in ([], [59])  # the last read's cycle waits for the next collection
        assert gc.get_stats()[1]["collections"] > older  # middle collections still run


def test_a_cycle_already_old_is_collected_within_the_full_collection_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Garbage in the oldest generation waits for a full collection; settles, which reset
    the counts that would trigger one, run it themselves once they have filed
    ``_FULL_AFTER`` objects."""
    monkeypatch.setattr(_handout, "_FULL_AFTER", 100_000)
    monkeypatch.setattr(_handout, "_filed", 0)
    held: _Cycle | None = _Cycle()
    ref = weakref.ref(held)
    gc.collect(1)  # alive: moved to the oldest generation
    held = None
    assert ref() is not None
    settles = 0
    while ref() is not None and settles < 20:
        with gc_paused():
            state = [{"n": [i]} for i in range(25_000)]
        settles += 1
        del state
    assert ref() is None
    assert settles <= 5  # 25,000 objects filed per settle, a full collection at 100,000


def test_a_first_read_of_a_mid_sized_thread_is_not_walked_by_a_young_collection(tmp_path: Path) -> None:
    """A saver opened afresh reads a thread of 800 messages (about a 1 MB chat's count, some
    6,000 containers once decoded): what the read built is filed as old, so no collection
    during or right after the read walks it as young (one did, for about a tenth of a 1 MB
    chat's read, while only pauses that built 10,000 objects were settled)."""
    g = StateGraph(_Chat)
    g.add_node("agent", lambda s: {"messages": [AIMessage(content="ok")]})
    g.add_edge(START, "agent")
    g.add_edge("agent", END)
    url = f"sqlite:///{tmp_path / 'mid.db'}"
    cfg: Any = {"configurable": {"thread_id": "mid"}}
    with TetherSaver.from_url(url) as saver:
        messages = [
            AIMessage(
                content=f"a{i}", id=f"a{i}", tool_calls=[{"id": f"c{i}", "name": "f", "args": {"i": i}}]
            )
            if i % 2
            else HumanMessage(content=f"h{i}", id=f"h{i}")
            for i in range(800)
        ]
        g.compile(checkpointer=saver).update_state(cfg, {"messages": messages}, as_node="agent")
    young: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            young.append(gc.get_count()[0])  # what this pass walks as young

    with TetherSaver.from_url(url) as saver:
        graph = g.compile(checkpointer=saver)
        gc.collect()
        gc.callbacks.append(seen)
        try:
            state = graph.get_state(cfg)
            after = [[i] for i in range(2000)]  # the application goes on
        finally:
            gc.callbacks.remove(seen)
    assert len(state.values["messages"]) == 800 and after
    assert all(n < 2000 for n in young), young


@dataclasses.dataclass
class Pinned:
    """A value ``copy.deepcopy`` refuses (as an object holding a lock or a handle may), which
    LangGraph's serializer stores by its fields."""

    name: str

    def __deepcopy__(self, memo: dict[int, Any]) -> Pinned:
        raise TypeError("a Pinned cannot be copied")


class PinnedState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    pins: Annotated[list[Pinned], lambda a, b: a + b]
    last: Pinned


def test_values_that_cannot_be_copied_are_kept_and_handed_out_decoded(tmp_path: Path) -> None:
    """A state holding objects copy.deepcopy refuses: puts keep them decoded from their
    stored bytes, reads hand them out decoded afresh; nothing fails, nothing is shared."""

    def node(state: dict[str, Any]) -> dict[str, Any]:
        n = len(state["pins"])
        return {
            "messages": [AIMessage(content=f"pin {n}", id=f"a{n}")],
            "pins": [Pinned(f"p{n}")],
            "last": Pinned(f"p{n}"),
        }

    g = StateGraph(PinnedState)
    g.add_node("node", node)
    g.add_edge(START, "node")
    g.add_edge("node", END)
    cfg: Any = {"configurable": {"thread_id": "pins"}}
    with TetherSaver.from_url(f"sqlite:///{tmp_path}/t.db") as saver:
        graph = g.compile(checkpointer=saver)
        for _ in range(3):
            out = graph.invoke({"messages": [HumanMessage(content="more", id=None)]}, cfg)
        out["pins"][0].name = "EDITED"
        out["last"].name = "EDITED"
        state = graph.get_state(cfg).values
        assert [p.name for p in state["pins"]] == ["p0", "p1", "p2"] and state["last"] == Pinned("p2")
        state["pins"][1].name = "EDITED TOO"
        again = graph.get_state(cfg).values
        assert [p.name for p in again["pins"]] == ["p0", "p1", "p2"] and again["pins"][0] is not state[
            "pins"
        ][0]
        graph.invoke({"messages": [HumanMessage(content="more", id=None)]}, cfg)
        warm = graph.get_state(cfg).values
    with TetherSaver.from_url(f"sqlite:///{tmp_path}/t.db") as cold:
        assert g.compile(checkpointer=cold).get_state(cfg).values == warm
    assert [p.name for p in warm["pins"]] == ["p0", "p1", "p2", "p3"] and len(warm["messages"]) == 8


class Shape(TypedDict, total=False):
    v: Any


@dataclasses.dataclass
class Span:
    start: int
    ends: tuple[int, ...]


class Box(BaseModel):
    items: list[Any] = []


def _echo_graph() -> Any:
    g = StateGraph(Shape)
    g.add_node("node", lambda s: {"v": s.get("v")})
    g.add_edge(START, "node")
    g.add_edge("node", END)
    return g


SHAPES = {
    "tuple": (1, "a"),
    "tuples in a list": [(1, 2), (3, 4)],
    "an OrderedDict": OrderedDict(a=1),
    "a defaultdict": defaultdict(list, a=[1]),
    "a tuple in a dataclass": Span(1, (2, 3)),
    "a tuple in a message's kwargs": AIMessage(content="x", id="m1", additional_kwargs={"span": (1, 2)}),
    "int keys and a message": {1: [AIMessage(content="y", id="m2")], 2: None},
    "a message with fields left unset": [AIMessage(content="w", id="m4")],
    "a message inside a model": Box(items=[AIMessage(content="z", id="m3")]),
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_a_value_reads_the_same_warm_cold_and_on_sqlitesaver(tmp_path: Path, name: str) -> None:
    """The serializer turns some values into others (a tuple into a list): what the saver
    keeps is what decoding gives, so a graph sees the same value before and after a restart,
    as on LangGraph's savers."""
    cfg: Any = {"configurable": {"thread_id": "shapes"}}
    with SqliteSaver.from_conn_string(":memory:") as reference:
        graph = _echo_graph().compile(checkpointer=reference)
        graph.invoke({"v": SHAPES[name]}, cfg)
        expected = graph.get_state(cfg).values["v"]
    with TetherSaver.from_url(f"sqlite:///{tmp_path}/t.db") as saver:
        graph = _echo_graph().compile(checkpointer=saver)
        graph.invoke({"v": SHAPES[name]}, cfg)
        warm = graph.get_state(cfg).values["v"]
    with TetherSaver.from_url(f"sqlite:///{tmp_path}/t.db") as saver:
        cold = _echo_graph().compile(checkpointer=saver).get_state(cfg).values["v"]
    assert _shape(warm) == _shape(cold) == _shape(expected)
    assert warm == expected


def _shape(value: Any) -> Any:
    """``value`` with the type of every part beside it (an ``OrderedDict`` equals its dict)."""
    if isinstance(value, dict):
        return (type(value).__name__, {k: _shape(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_shape(v) for v in value])
    if dataclasses.is_dataclass(value):
        return (type(value).__name__, _shape(vars(value)))
    if isinstance(value, Box):
        return (type(value).__name__, _shape(value.items))
    if isinstance(value, AIMessage):  # what model_dump(exclude_unset=True) keeps, too
        return (type(value).__name__, _shape(value.additional_kwargs), sorted(value.model_fields_set))
    return (type(value).__name__, value)


EXACT = {
    "empty containers": ({"a": {}, "b": [], "c": [[], {}]}, True),
    "a tuple after empty containers": ({"a": {}, "b": [], "c": [{}, (1,)]}, False),
    "a float key": ({1.5: "x"}, False),
    "a dict subclass in a list": ([{}, OrderedDict(a=1)], False),
    "a message with empty dicts and lists": (AIMessage(content="x", id="m"), True),
    "a tuple in a message's kwargs": (AIMessage(content="x", id="m", additional_kwargs={"k": (1,)}), False),
    "a complex number": ([1, 2j], False),
}


@pytest.mark.parametrize("name", list(EXACT))
def test_exact_tells_the_values_a_round_trip_keeps(name: str) -> None:
    """A value is kept as a copy only when the serializer gives it back unchanged: empty
    containers (most of a message's) count as exact, anything else is looked into."""
    value, expected = EXACT[name]
    assert _handout.exact(value) is expected
