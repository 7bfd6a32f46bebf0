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


def test_a_put_after_another_process_wrote_the_thread_reloads_and_stores_its_own_values(
    tmp_path: Path,
) -> None:
    """Saver A's cached state is one version behind once saver B (another process) put a
    checkpoint: A's next put must not be stored as a delta on what A last saw."""
    url = f"sqlite:///{tmp_path}/t.db"
    m = [AIMessage(content=f"m{i}", id=f"m{i}") for i in range(4)]
    with TetherSaver.from_url(url) as a, TetherSaver.from_url(url) as b:
        first = _put(a, "t", None, [m[0]], 1)
        seen = b.get_tuple({"configurable": {"thread_id": "t"}})
        assert seen is not None
        second = _put(b, "t", first, [*seen.checkpoint["channel_values"]["messages"], m[1]], 2)
        mine = [m[0], AIMessage(content="m1", id="m1"), m[2], m[3]]  # A's own objects
        third = _put(a, "t", second, mine, 3)
        _put(a, "t", third, [*mine, AIMessage(content="m4", id="m4")], 4)  # A's cache is current again
    assert [x.content for x in _stored(url, "t")] == ["m0", "m1", "m2", "m3", "m4"]


def test_writes_of_older_checkpoints_are_dropped_once_their_bytes_are_worth_it(tmp_path: Path) -> None:
    """The writes of checkpoints before the previous one stay until dropping them pays: a
    few small ones stay, one big one (over 32 KB of pending writes) goes at the next put."""
    from tether.integrations.langgraph._layout import ns_key
    from tether.sync import open_store_sync

    url = f"sqlite:///{tmp_path}/t.db"
    msgs = [AIMessage(content="m0", id="m0")]

    def writes_of(ids: list[str]) -> list[str]:
        with open_store_sync(url) as store:
            cp = store.load(ns_key("t", ""))
            assert cp is not None
            return [i for i in ids if any(e[0] == i for e in cp.state.get("w") or [])]

    with TetherSaver.from_url(url, flush_delay=None) as saver:
        ids = [_put(saver, "t", None, msgs, 1)]
        for n, size in ((2, 10), (3, 10), (4, 40_000), (5, 10)):
            cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": ids[-1]}}
            saver.put_writes(cfg, [("note", "x" * size)], f"task{n}")  # type: ignore[arg-type]
            ids.append(_put(saver, "t", ids[-1], msgs, n))
            if n == 3:
                assert writes_of(ids) == ids[0:2]  # the small writes of an older one: kept
            if n == 4:
                assert writes_of(ids) == ids[2:3]  # over 32 KB pending: the older ones went
    assert writes_of(ids) == ids[3:4]  # and the big one once it is older
