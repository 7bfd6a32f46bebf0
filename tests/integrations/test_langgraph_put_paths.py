"""The put's fast paths keep what is stored equal to what LangGraph holds: a list channel
recognised as grown only when it did, and a thread another process wrote meanwhile reloaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.checkpoint.base import empty_checkpoint

from tether.integrations.langgraph import TetherSaver
from tether.integrations.langgraph._layout import extends


class Loud:
    """An item whose ``==`` is no truth value (as a numpy array's)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __eq__(self, other: object) -> Any:
        return self

    def __bool__(self) -> bool:
        raise ValueError("ambiguous")

    __hash__ = object.__hash__


def test_extends_needs_the_same_objects_or_equal_ones_when_asked() -> None:
    a = [AIMessage(content=f"m{i}", id=f"m{i}") for i in range(6)]
    grown = [*a, AIMessage(content="new", id="new")]
    assert extends(grown, a) and extends(a, a) and extends(grown, [])
    assert not extends(a[:3], a)
    copies = [m.model_copy() for m in a]
    assert not extends(grown, copies)  # other objects at the ends: not the list it grew from
    assert extends(grown, copies, equal=True)
    changed = [*a[:2], AIMessage(content="edited", id="m2"), *a[3:], grown[-1]]
    assert not extends(changed, a)
    loud = [Loud(i) for i in range(5)]
    assert extends([*loud, Loud(9)], loud)
    assert not extends([loud[0], Loud(1), *loud[2:]], loud)  # ``==`` refuses: compared by identity


def _put(saver: TetherSaver, thread: str, parent: str | None, messages: list[Any], n: int) -> str:
    cp = empty_checkpoint()
    version = f"{n:032}.0"
    cp["channel_values"] = {"messages": messages}
    cp["channel_versions"] = {"messages": version}
    cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": parent}}
    out = saver.put(cfg, cp, {"source": "loop", "step": n}, {"messages": version})  # type: ignore[arg-type]
    return str(out["configurable"]["checkpoint_id"])


def _stored(url: str, thread: str) -> list[Any]:
    with TetherSaver.from_url(url) as fresh:  # a new process's view: decoded from the store
        tup = fresh.get_tuple({"configurable": {"thread_id": thread}})
        assert tup is not None
        return list(tup.checkpoint["channel_values"]["messages"])


def test_a_message_replaced_in_the_middle_is_stored_as_replaced(tmp_path: Path) -> None:
    """A list whose ends are the same objects but with another message in the middle is
    rewritten, not stored as an append."""
    url = f"sqlite:///{tmp_path}/t.db"
    msgs = [AIMessage(content=f"m{i}", id=f"m{i}") for i in range(10)]
    with TetherSaver.from_url(url) as saver:
        cid = _put(saver, "t", None, msgs, 1)
        edited = [
            *msgs[:4],
            AIMessage(content="rewritten", id="m4"),
            *msgs[5:],
            AIMessage(content="x", id="x"),
        ]
        _put(saver, "t", cid, edited, 2)
    assert [m.content for m in _stored(url, "t")] == [m.content for m in edited]
