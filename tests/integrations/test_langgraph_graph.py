"""A real StateGraph (appending messages in a loop, an interrupt, update_state, history,
time travel) gives the same states on TetherSaver as on LangGraph's own SqliteSaver."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command

from tests.integrations._lg_graph import FIRST_INPUT, build, kill_when_stalled
from tests.stores.conftest import require_url
from tether.errors import ConfigError
from tether.integrations.langgraph import TetherSaver


def view(snap: Any) -> dict[str, Any]:
    """What a user of the graph sees of a state snapshot, without saver-made ids."""
    values = dict(snap.values)
    values["messages"] = [(type(m).__name__, m.id, m.content) for m in values.get("messages", [])]
    return {
        "values": values,
        "next": snap.next,
        "step": snap.metadata.get("step") if snap.metadata else None,
        "source": snap.metadata.get("source") if snap.metadata else None,
        "tasks": [(t.name, [i.value for i in t.interrupts]) for t in snap.tasks],
        "has_parent": snap.parent_config is not None,
    }


def scenario(saver: Any) -> list[Any]:
    graph = build().compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": f"graph-{uuid.uuid4().hex[:8]}"}}
    seen: list[Any] = []
    graph.invoke(FIRST_INPUT, cfg)
    seen.append(view(graph.get_state(cfg)))  # paused at the human's question
    graph.invoke(Command(resume="yes"), cfg)
    seen.append(view(graph.get_state(cfg)))
    graph.update_state(
        cfg, {"messages": [HumanMessage(content="one more thing", id="user-1")], "log": ["edit"]}
    )
    seen.append(view(graph.get_state(cfg)))
    history = list(graph.get_state_history(cfg))
    seen.append([view(h) for h in history])
    old = next(h for h in history if h.values.get("turn") == 2 and h.next == ("agent",))
    graph.invoke(None, old.config)  # time travel: run again from after turn 2
    seen.append(view(graph.get_state(cfg)))
    graph.update_state(old.config, {"log": ["forked"]})  # a branch from the old checkpoint
    seen.append(view(graph.get_state(cfg)))
    seen.append([view(h) for h in graph.get_state_history(cfg)])
    seen.append([view(h) for h in graph.get_state_history(cfg, filter={"source": "update"})])
    return seen


async def ascenario(saver: Any) -> list[Any]:
    graph = build().compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": f"agraph-{uuid.uuid4().hex[:8]}"}}
    seen: list[Any] = []
    await graph.ainvoke(FIRST_INPUT, cfg)
    seen.append(view(await graph.aget_state(cfg)))
    await graph.ainvoke(Command(resume="yes"), cfg)
    seen.append(view(await graph.aget_state(cfg)))
    await graph.aupdate_state(cfg, {"messages": [HumanMessage(content="one more thing", id="user-1")]})
    history = [h async for h in graph.aget_state_history(cfg)]
    seen.append([view(h) for h in history])
    old = next(h for h in history if h.values.get("turn") == 2 and h.next == ("agent",))
    await graph.ainvoke(None, old.config)
    seen.append([view(h) async for h in graph.aget_state_history(cfg)])
    return seen


def check_expected(seen: list[Any]) -> None:
    """The scenario did what it says (so equal transcripts are not equally empty)."""
    paused, done = seen[0], seen[1]
    assert paused["next"] == ("human",)
    assert paused["tasks"] == [("human", [{"question": "go on after turn 3?"}])]
    assert len(paused["values"]["messages"]) == 4
    assert done["next"] == () and done["values"]["turn"] == 6
    assert [m[1] for m in done["values"]["messages"]][-3:] == ["ai-4", "ai-5", "ai-6"]
    assert len(seen[3]) >= 9  # every step of the thread is in its history


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_graph_gives_the_same_states_as_on_sqlitesaver(backend: str, tmp_path: Path) -> None:
    """Interrupt, resume, update_state, history, time travel and a fork: equal transcripts."""
    with SqliteSaver.from_conn_string(str(tmp_path / "lg.db")) as reference:
        expected = scenario(reference)
    check_expected(expected)
    with TetherSaver.from_url(require_url(backend, tmp_path)) as saver:
        got = scenario(saver)
    assert got == expected


async def test_an_async_graph_gives_the_same_states_as_on_asyncsqlitesaver(tmp_path: Path) -> None:
    """The async methods, on the caller's loop, match AsyncSqliteSaver."""
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "lg.db")) as reference:
        expected = await ascenario(reference)
    async with TetherSaver.from_url(f"sqlite:///{tmp_path}/t.db") as saver:
        got = await ascenario(saver)
    assert got == expected
    assert len(got[-1]) > len(got[2])  # the replay added checkpoints


async def test_a_sync_graph_runs_inside_a_running_event_loop(tmp_path: Path) -> None:
    """A saver opened with `with` serves sync graphs even where a loop runs (Jupyter)."""
    asyncio.get_running_loop()
    with TetherSaver.from_url(f"sqlite:///{tmp_path}/t.db") as saver:
        graph = build(pause_at=99).compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "in-loop"}}
        graph.invoke(FIRST_INPUT, cfg)
        assert graph.get_state(cfg).values["turn"] == 6
        assert (await saver.aget_tuple(cfg)) is not None  # the async twin works from this loop too


async def test_a_sync_call_on_the_saver_own_loop_is_refused_clearly(tmp_path: Path) -> None:
    """Blocking the store's own loop would hang: a ConfigError says what to do instead."""
    async with TetherSaver.from_url(f"sqlite:///{tmp_path}/t.db") as saver:
        with pytest.raises(ConfigError, match="ainvoke"):
            saver.get_tuple({"configurable": {"thread_id": "x"}})
        with pytest.raises(ConfigError, match="thread id"):
            await saver.aget_tuple({"configurable": {}})


@pytest.mark.slow
def test_a_graph_killed_mid_step_resumes_on_the_same_thread(tmp_path: Path) -> None:
    """SIGKILL inside turn 4; the same thread id then finishes with nothing lost or doubled."""
    url = f"sqlite:///{tmp_path}/t.db"
    stall = tmp_path / "stalled"
    kill_when_stalled("tests.integrations._lg_graph", url, "killed", str(stall), stall=stall)
    with TetherSaver.from_url(url) as saver:
        graph = build(pause_at=99, stall=stall).compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "killed"}}
        before = graph.get_state(cfg)
        assert before.values["turn"] == 3 and before.next == ("agent",)
        graph.invoke(None, cfg)
        after = graph.get_state(cfg).values
    assert after["turn"] == 6
    assert [m.id for m in after["messages"]] == ["user-0"] + [f"ai-{i}" for i in range(1, 7)]
    assert after["log"] == [f"agent {i}" for i in range(1, 7)]
