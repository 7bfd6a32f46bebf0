"""Storage keys of any length, and reads that hand out the caller's own objects.

A thread id with nested subgraph namespaces makes keys longer than a run id may be
(128 characters): they must work on every backend, sync and async, and through
``tether import-langgraph``. ``get_state``, ``get_state_history`` and ``get_tuple`` must
return objects the saver does not keep: editing one in place changes nothing else.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command
from typer.testing import CliRunner

from tests.integrations import _lg_nested as nested
from tests.integrations._lg_graph import FIRST_INPUT, build
from tests.stores.conftest import require_url
from tether.cli.app import app
from tether.errors import ConfigError
from tether.integrations.langgraph import TetherSaver
from tether.integrations.langgraph._layout import ns_key, scratch_key, thread_index_key
from tether.state.values import RUN_ID_MAX_LENGTH

BACKENDS = ["sqlite", "postgresql", "redis", "mysql"]


def _messages(state: Any) -> list[tuple[str, str | None, Any]]:
    return [(type(m).__name__, m.id, m.content) for m in state.values.get("messages", [])]


def _run_nested(saver: Any, depth: int, thread: str) -> list[Any]:
    """Run to the innermost interrupt, look at every level, resume; what a user sees."""
    graph = nested.build(depth).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": thread}}
    graph.invoke(nested.FIRST, cfg)
    paused = graph.get_state(cfg, subgraphs=True)
    levels = []
    task = paused.tasks[0]
    while task.state is not None:  # down the nested subgraphs, each in a namespace of its own
        levels.append((task.name, _messages(task.state), task.state.next))
        task = task.state.tasks[0]
    graph.invoke(Command(resume="ok"), cfg)
    done = graph.get_state(cfg)
    namespaces = {t.config["configurable"]["checkpoint_ns"] for t in saver.list(cfg)}
    return [levels, _messages(done), len(list(graph.get_state_history(cfg))), len(namespaces)]


async def _arun_nested(saver: Any, depth: int, thread: str) -> list[Any]:
    graph = nested.build(depth).compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": thread}}
    await graph.ainvoke(nested.FIRST, cfg)
    paused = await graph.aget_state(cfg, subgraphs=True)
    levels = []
    task = paused.tasks[0]
    while task.state is not None:
        levels.append((task.name, _messages(task.state), task.state.next))
        task = task.state.tasks[0]
    await graph.ainvoke(Command(resume="ok"), cfg)
    done = await graph.aget_state(cfg)
    namespaces = {t.config["configurable"]["checkpoint_ns"] async for t in saver.alist(cfg)}
    return [levels, _messages(done), len([h async for h in graph.aget_state_history(cfg)]), len(namespaces)]


def test_keys_longer_than_a_run_id_are_hashed_to_fit() -> None:
    """The thread id and namespaces of a three-level subgraph: every key fits, keys differ."""
    ns = "agent:ae75aaee-767f-ac08-0686-d3f6feed64e6|search:967ffa4b-691b-83fb-add9-d3ed60422b24"
    keys = {
        ns_key(nested.LONG_THREAD, ""),
        ns_key(nested.LONG_THREAD, ns),
        ns_key(nested.LONG_THREAD, ns + "|fetch:0e65b407-1dff-a1b9-1a9e-ee4500c9034c"),
        ns_key("t" * 5000, ""),
        thread_index_key("t" * 5000),
    }
    keys |= {scratch_key(k) for k in list(keys)}
    assert len(keys) == 10
    assert all(len(k) <= RUN_ID_MAX_LENGTH for k in keys)
    short = ns_key("thread-1", "")
    assert short == "lg:8:thread-10:" and scratch_key(short) == short + "~rw"  # unchanged layout
    assert all(len(k) <= RUN_ID_MAX_LENGTH for k in (ns_key("x" * 300, "y" * 300, "p" * 32),))


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"prefix": "p" * 33}, "prefix"),
        ({"prefix": ""}, "prefix"),
        ({"flush_delay": -1}, "flush_delay"),
        ({"flush_delay": float("nan")}, "flush_delay"),
        ({"flush_delay": "0.02"}, "flush_delay"),
    ],
)
def test_a_bad_saver_option_is_refused_before_anything_is_opened(
    tmp_path: Path, options: dict[str, Any], named: str
) -> None:
    db = tmp_path / "never.db"
    with pytest.raises(ConfigError, match=named):
        TetherSaver.from_url(f"sqlite:///{db}", **options)
    assert not db.exists()


@pytest.mark.parametrize("cache_size", [0, -3, 2.5, "256"])
async def test_a_saver_refuses_a_cache_size_that_is_not_a_count(tmp_path: Path, cache_size: Any) -> None:
    async with TetherSaver.from_url(f"sqlite:///{tmp_path}/t.db") as saver:
        with pytest.raises(ConfigError, match="cache_size"):
            TetherSaver(saver.store, cache_size=cache_size)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("depth", [2, 3])
def test_nested_subgraphs_with_a_long_thread_id_run_as_on_sqlitesaver(
    backend: str, depth: int, tmp_path: Path
) -> None:
    """Two and three levels of subgraphs under a 124-character thread id: same states."""
    url = require_url(backend, tmp_path)
    with SqliteSaver.from_conn_string(":memory:") as reference:
        expected = _run_nested(reference, depth, nested.LONG_THREAD)
    prefix = f"lg{uuid.uuid4().hex[:8]}"
    with TetherSaver.from_url(url, prefix=prefix) as saver:
        got = _run_nested(saver, depth, nested.LONG_THREAD)
        saver.delete_thread(nested.LONG_THREAD)
    assert got == expected
    assert len(expected[0]) == depth


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_thread_id_with_a_nul_character_runs_as_on_sqlitesaver(backend: str, tmp_path: Path) -> None:
    """No backend keeps a NUL in a key (PostgreSQL refuses it in text): such a key is hashed."""
    thread = f"chat\x00{uuid.uuid4().hex[:6]}"
    assert "\x00" not in ns_key(thread, "") and "\x00" not in thread_index_key(thread)
    url = require_url(backend, tmp_path)
    with SqliteSaver.from_conn_string(":memory:") as reference:
        expected = _run_nested(reference, 2, thread)
    with TetherSaver.from_url(url, prefix=f"lg{uuid.uuid4().hex[:8]}") as saver:
        got = _run_nested(saver, 2, thread)
        assert [t.config["configurable"]["thread_id"] for t in saver.list(None)][:1] == [thread]
        saver.delete_thread(thread)
    assert got == expected


@pytest.mark.parametrize("backend", BACKENDS)
async def test_nested_subgraphs_with_a_long_thread_id_run_async(backend: str, tmp_path: Path) -> None:
    """The same three-level graph with the async methods, against AsyncSqliteSaver."""
    url = require_url(backend, tmp_path)
    async with AsyncSqliteSaver.from_conn_string(":memory:") as reference:
        expected = await _arun_nested(reference, 3, nested.LONG_THREAD)
    prefix = f"lg{uuid.uuid4().hex[:8]}"
    async with TetherSaver.from_url(url, prefix=prefix) as saver:
        got = await _arun_nested(saver, 3, nested.LONG_THREAD)
        await saver.adelete_thread(nested.LONG_THREAD)
    assert got == expected and len(expected[0]) == 3


def test_delete_for_runs_works_on_a_namespace_with_a_long_key(tmp_path: Path) -> None:
    """Its scratch run gets a key that fits too."""
    thread, ns = "d" * 124, "agent:" + "n" * 60
    cfg: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    with TetherSaver.from_url(f"sqlite:///{tmp_path}/t.db") as saver:
        for i, run in enumerate(["r1", "r2", "r1"]):
            cp = empty_checkpoint()
            cp["channel_values"] = {"n": i}
            cp["channel_versions"] = {"n": i + 1}
            cfg = saver.put(cfg, cp, {"source": "loop", "step": i, "run_id": run}, {"n": i + 1})
        saver.delete_for_runs(["r2"])
        left = [t.metadata["step"] for t in saver.list({"configurable": {"thread_id": thread}})]
    assert left == [2, 0]


def test_import_of_nested_subgraphs_under_a_long_thread_id(tmp_path: Path) -> None:
    """A real SqliteSaver database with two- and three-level subgraphs (one thread paused
    inside the innermost one) imports in full and verifies; the paused thread resumes."""
    src, dst = tmp_path / "langgraph.db", f"sqlite:///{tmp_path}/tether.db"
    threads = {nested.LONG_THREAD: 3, str(uuid.uuid4()): 2, "paused-" + "p" * 117: 3}
    with SqliteSaver.from_conn_string(str(src)) as lg:
        for thread, depth in threads.items():
            graph = nested.build(depth).compile(checkpointer=lg)
            cfg = {"configurable": {"thread_id": thread}}
            graph.invoke(nested.FIRST, cfg)
            if not thread.startswith("paused"):
                graph.invoke(Command(resume="ok"), cfg)
        expected = {
            t: [
                _messages(h)
                for h in nested.build(d)
                .compile(checkpointer=lg)
                .get_state_history({"configurable": {"thread_id": t}})
            ]
            for t, d in threads.items()
        }
    result = CliRunner().invoke(app, ["import-langgraph", f"sqlite:///{src}", dst])
    assert result.exit_code == 0, result.output
    assert "imported 3 threads" in result.output and "verified" in result.output
    with TetherSaver.from_url(dst) as saver:
        for thread, depth in threads.items():
            graph = nested.build(depth).compile(checkpointer=saver)
            cfg = {"configurable": {"thread_id": thread}}
            assert [_messages(h) for h in graph.get_state_history(cfg)] == expected[thread]
        paused = "paused-" + "p" * 117
        graph = nested.build(3).compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": paused}}
        assert graph.get_state(cfg).next == ("agent",)
        graph.invoke(Command(resume="later"), cfg)
        assert _messages(graph.get_state(cfg))[-1] == ("HumanMessage", "fetch-answer", "fetch: later")


# == copies ===========================================================================
def _edit_in_place(messages: list[Any]) -> None:
    messages[-1].content = "EDITED"
    messages[0].additional_kwargs["edited"] = True
    messages.append(HumanMessage(content="appended in place", id="rogue"))


def test_state_read_from_the_saver_is_the_callers_own(tmp_path: Path) -> None:
    """Edit messages from get_state, from get_state_history and from get_tuple in place:
    the next reads, the object a node returned, and a new process see none of it; the
    graph then goes on storing appends."""
    returned: list[AIMessage] = []
    graph_builder = _remembering(returned)
    url = f"sqlite:///{tmp_path}/t.db"
    cfg: Any = {"configurable": {"thread_id": "mine"}}
    with TetherSaver.from_url(url) as saver:
        graph = graph_builder.compile(checkpointer=saver)
        history_of_chat = [
            HumanMessage(content=f"{i}: " + "lorem ipsum " * 90, id=f"h-{i}") for i in range(100)
        ]
        graph.invoke({"messages": history_of_chat, "turn": 0}, cfg)  # a 100 KB conversation
        before = _messages(graph.get_state(cfg))
        first = graph.get_state(cfg).values["messages"]
        assert first[-1] is not returned[-1] and first[-1] == returned[-1]
        _edit_in_place(first)
        history = list(graph.get_state_history(cfg))
        _edit_in_place(history[2].values["messages"])  # an older checkpoint, from the same list
        tup = saver.get_tuple(cfg)
        assert tup is not None
        _edit_in_place(tup.checkpoint["channel_values"]["messages"])
        assert _messages(graph.get_state(cfg)) == before
        assert [_messages(h) for h in graph.get_state_history(cfg)][2] == _messages(
            list(graph.get_state_history(cfg))[2]
        )
        assert returned[-1].content.startswith("turn 4") and "edited" not in returned[0].additional_kwargs
        size = _stored(saver, "mine")
        graph.invoke({"turn": 0}, cfg)  # four more turns on the state it read: appends, not rewrites
        grew = _stored(saver, "mine") - size
        after = _messages(graph.get_state(cfg))
    assert after[: len(before)] == before and len(after) == len(before) + 4
    assert grew < 40_000, f"{grew} bytes for 5 checkpoints of 4 appended messages on 100 KB"
    with TetherSaver.from_url(url) as cold:
        assert _messages(_remembering([]).compile(checkpointer=cold).get_state(cfg)) == after


@pytest.mark.parametrize("cold", [False, True], ids=["warm", "cold"])
def test_what_invoke_returns_is_the_callers_own(tmp_path: Path, cold: bool) -> None:
    """Edit the messages invoke returned in place, append to their list, edit a message a
    node returned: the next get_state, the next invoke and a new process see none of it,
    and the graph goes on storing appends. Warm: the saver that wrote the thread; cold: a
    saver whose first read of the thread is the invoke's own (it hands the decoded values
    over as they are)."""
    returned: list[AIMessage] = []
    url = f"sqlite:///{tmp_path}/t.db"
    cfg: Any = {"configurable": {"thread_id": "ours"}}
    chat = [HumanMessage(content=f"{i}: " + "lorem ipsum " * 90, id=f"h-{i}") for i in range(100)]
    if cold:
        with TetherSaver.from_url(url) as first:
            _remembering([]).compile(checkpointer=first).invoke({"messages": chat, "turn": 0}, cfg)
            chat = []
    with TetherSaver.from_url(url) as saver:
        graph = _remembering(returned).compile(checkpointer=saver)
        out = graph.invoke({"messages": chat, "turn": 0}, cfg)
        before = _messages(graph.get_state(cfg))
        with TetherSaver.from_url(url) as other:
            assert _messages(_remembering([]).compile(checkpointer=other).get_state(cfg)) == before
        _edit_in_place(out["messages"])
        returned[1].content = "EDITED where the node made it"
        assert _messages(graph.get_state(cfg)) == before
        size = _stored(saver, "ours")
        graph.invoke({"turn": 0}, cfg)  # four more turns, on the state as stored
        grew = _stored(saver, "ours") - size
        after = _messages(graph.get_state(cfg))
    assert after[: len(before)] == before and len(after) == len(before) + 4
    assert "EDITED" not in str(after) and "rogue" not in str(after)
    assert grew < 40_000, f"{grew} bytes for 5 checkpoints of 4 appended messages on 100 KB"
    with TetherSaver.from_url(url) as new:
        assert _messages(_remembering([]).compile(checkpointer=new).get_state(cfg)) == after


async def test_what_ainvoke_returns_is_the_callers_own(tmp_path: Path) -> None:
    """The same on the async path: edits to what ainvoke returned stay the caller's."""
    url = f"sqlite:///{tmp_path}/t.db"
    cfg: Any = {"configurable": {"thread_id": "aours"}}
    async with TetherSaver.from_url(url) as saver:
        graph = build(turns=4, pause_at=99).compile(checkpointer=saver)
        mine = [HumanMessage(content="deploy the service", id="user-0")]  # (edited below)
        out = await graph.ainvoke({"messages": mine, "turn": 0}, cfg)
        before = _messages(await graph.aget_state(cfg))
        _edit_in_place(out["messages"])
        assert _messages(await graph.aget_state(cfg)) == before
    async with TetherSaver.from_url(url) as cold:
        graph = build(turns=4, pause_at=99).compile(checkpointer=cold)
        assert _messages(await graph.aget_state(cfg)) == before


def _remembering(returned: list[AIMessage]) -> Any:
    """``build``'s agent graph (four turns, no pause), its node keeping what it returned."""
    from langgraph.graph import END, START, StateGraph

    from tests.integrations._lg_graph import State

    def agent(state: Any) -> dict[str, Any]:
        turn = state.get("turn", 0) + 1
        msg = AIMessage(content=f"turn {turn}: " + "x" * 200, id=f"ai-{len(returned)}")
        returned.append(msg)
        return {"messages": [msg], "turn": turn}

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", lambda s: END if s["turn"] >= 4 else "agent", ["agent", END])
    return g


def _stored(saver: TetherSaver, thread: str) -> int:
    return sum(h.size for h in saver._srun(saver.store.history(ns_key(thread, ""))))


async def test_async_reads_hand_out_copies_too(tmp_path: Path) -> None:
    """A cold read (values just decoded) and a warm one: both are the caller's."""
    url = f"sqlite:///{tmp_path}/t.db"
    cfg: Any = {"configurable": {"thread_id": "amine"}}
    async with TetherSaver.from_url(url) as saver:
        graph = build(turns=4, pause_at=99).compile(checkpointer=saver)
        await graph.ainvoke(FIRST_INPUT, cfg)
        before = _messages(await graph.aget_state(cfg))
    async with TetherSaver.from_url(url) as cold:
        graph = build(turns=4, pause_at=99).compile(checkpointer=cold)
        for _ in range(3):  # cold (decoded), then lent, then decoded again
            _edit_in_place((await graph.aget_state(cfg)).values["messages"])
            assert _messages(await graph.aget_state(cfg)) == before
        old = [h async for h in graph.aget_state_history(cfg)][3]
        _edit_in_place(old.values["messages"])
        again = [h async for h in graph.aget_state_history(cfg)][3]
        assert "EDITED" not in str(_messages(again)) and _messages(again) != _messages(old)
