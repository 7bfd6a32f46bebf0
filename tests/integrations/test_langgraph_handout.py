"""The copies reads hand out share nothing mutable, and the collector pause always ends."""

from __future__ import annotations

import dataclasses
import gc
import threading

from langchain_core.messages import AIMessage, ToolMessage

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


def test_what_a_pause_built_is_filed_as_old_without_a_young_collection() -> None:
    """A large state built in a pause leaves the young generation empty: the next allocation
    triggers no collection that walks it (and no collection runs on leaving)."""
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
