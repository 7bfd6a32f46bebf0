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
