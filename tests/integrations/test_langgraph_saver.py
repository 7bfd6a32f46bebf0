"""TetherSaver's own promises beyond the conformance suite: appends stored as appends, the
latest checkpoint served after one small read, writes batched with their checkpoint, long
ids, and LangGraph's serializer for objects."""

from __future__ import annotations

import functools
import operator
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.types import INTERRUPT
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel

from tests.integrations._lg_graph import FIRST_INPUT, build, kill_when_stalled
from tether.integrations.langgraph import TetherSaver
from tether.integrations.langgraph._layout import ns_key


class Plan(BaseModel):
    goal: str
    steps: list[str]


def stored_bytes(saver: TetherSaver, thread: str) -> int:
    return sum(h.size for h in saver._srun(saver.store.history(ns_key(thread, ""))))


def test_a_growing_message_list_is_stored_as_appends(tmp_path: Path) -> None:
    """Steps on a ~300 KB conversation add a few KB each, not the whole list again."""
    with TetherSaver.from_url(f"sqlite:///{tmp_path}/t.db") as saver:
        graph = build(turns=1_000, pause_at=-1).compile(checkpointer=saver)
        big = [AIMessage(content="h" * 1000, id=f"old-{i}") for i in range(300)]
        cfg: dict[str, Any] = {"configurable": {"thread_id": "grow"}, "recursion_limit": 100}
        graph.update_state(cfg, {**FIRST_INPUT, "messages": big}, as_node="agent")
        before = stored_bytes(saver, "grow")
        graph.update_state(cfg, {"turn": 989})  # the graph ends after 1,000 turns: 11 steps
        graph.invoke(None, cfg)
        state = graph.get_state(cfg).values
        added = stored_bytes(saver, "grow") - before
    assert state["turn"] == 1_000 and len(state["messages"]) == 300 + 11
    assert before > 300_000
    assert added < 12 * 8_000, f"{added} bytes for 12 checkpoints on a 300 KB state"


def test_the_latest_checkpoint_is_served_after_one_small_read(tmp_path: Path) -> None:
    """A warm get_tuple asks the store only for the run record (it hands out a copy of the
    values it keeps, decoding nothing)."""
    with TetherSaver.from_url(f"sqlite:///{tmp_path}/t.db") as saver:
        graph = build(pause_at=99).compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "warm"}}
        graph.invoke(FIRST_INPUT, cfg)
        calls: list[str] = []
        twin = saver.inline_store.twin  # type: ignore[union-attr]  # a sync saver's own connection
        assert twin is not None
        for store in (saver.store, twin):  # either may serve a read: every call counts
            for name in ("get_run", "load", "load_context", "_read", "_read_chain"):
                real = getattr(store, name)

                async def spy(*a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
                    calls.append(_name)
                    return await _real(*a, **k)

                setattr(store, name, spy)
        first = saver.get_tuple(cfg)
        second = saver.get_tuple(cfg)
    assert calls == ["get_run", "get_run"]
    assert first is not None and second is not None
    mine, theirs = (
        first.checkpoint["channel_values"]["messages"],
        second.checkpoint["channel_values"]["messages"],
    )
    assert mine == theirs and not any(a is b for a, b in zip(mine, theirs, strict=True))  # each its own
    assert first.checkpoint["channel_values"]["turn"] == 6


def test_task_writes_wait_for_their_checkpoint_and_interrupts_do_not(tmp_path: Path) -> None:
    """Writes join the next commit (or the flush); an interrupt is durable at once."""
    url = f"sqlite:///{tmp_path}/t.db"
    thread = f"w-{uuid.uuid4().hex[:6]}"
    cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    with TetherSaver.from_url(url, flush_delay=30) as writer, TetherSaver.from_url(url) as reader:
        cp = empty_checkpoint()
        stored = writer.put(cfg, cp, {"source": "loop", "step": 0}, {})
        writer.put_writes(stored, [("messages", "hello")], "task-1")
        assert reader.get_tuple(stored).pending_writes == []  # type: ignore[union-attr]
        assert writer.get_tuple(stored).pending_writes == [("task-1", "messages", "hello")]  # type: ignore[union-attr]
        assert reader.get_tuple(stored).pending_writes == [("task-1", "messages", "hello")]  # type: ignore[union-attr]
        writer.put_writes(stored, [(INTERRUPT, {"ask": "ok?"})], "task-2")
        pending = reader.get_tuple(stored).pending_writes  # type: ignore[union-attr]
        assert ("task-2", INTERRUPT, {"ask": "ok?"}) in pending
        writer.put_writes(stored, [("log", "late")], "task-3")
    with TetherSaver.from_url(url) as again:  # closing the writer stored what it held
        pending = again.get_tuple(stored).pending_writes  # type: ignore[union-attr]
    assert ("task-3", "log", "late") in pending


def test_long_ids_and_objects_round_trip(tmp_path: Path) -> None:
    """A 300-character thread id and namespace, a Pydantic model and messages come back."""
    thread, ns = "t" * 300, "child:" + "n" * 200
    cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    plan = Plan(goal="ship", steps=["build", "test"])
    cp = empty_checkpoint()
    cp["channel_values"] = {"plan": plan, "messages": [AIMessage(content="hi", id="m1")]}
    cp["channel_versions"] = {"plan": 1, "messages": 1}
    with TetherSaver.from_url(f"sqlite:///{tmp_path}/t.db") as saver:
        saver.put(cfg, cp, {"source": "input", "step": -1}, {"plan": 1, "messages": 1})
    with TetherSaver.from_url(f"sqlite:///{tmp_path}/t.db") as cold:
        tup = cold.get_tuple(cfg)
        listed = list(cold.list({"configurable": {"thread_id": thread}}))
    assert tup is not None
    assert tup.config["configurable"]["checkpoint_ns"] == ns
    assert tup.checkpoint["channel_values"]["plan"] == plan
    assert isinstance(tup.checkpoint["channel_values"]["messages"][0], AIMessage)
    assert [t.checkpoint["id"] for t in listed] == [cp["id"]]


def _batch(state: list[str], writes: Any) -> list[str]:
    return functools.reduce(operator.add, writes, state)


class DeltaState(TypedDict, total=False):
    items: Annotated[list[str], DeltaChannel(_batch, snapshot_frequency=25)]
    left: int


def _delta_graph() -> Any:
    def node(s: Any) -> dict[str, Any]:
        return {"items": [f"item {s['left']}"], "left": s["left"] - 1}

    g = StateGraph(DeltaState)
    g.add_node("node", node)
    g.add_edge(START, "node")
    g.add_conditional_edges("node", lambda s: "node" if s["left"] > 0 else END, ["node", END])
    return g


def test_langgraph_delta_channel_rebuilds_the_same_state_as_on_sqlitesaver(tmp_path: Path) -> None:
    """DeltaChannel (beta) replays ancestors' pending writes through get_tuple: same values."""
    graph = _delta_graph()
    seen = []
    for opener in (
        lambda: TetherSaver.from_url(f"sqlite:///{tmp_path}/t.db"),
        lambda: SqliteSaver.from_conn_string(str(tmp_path / "lg.db")),
    ):
        cfg: dict[str, Any] = {"configurable": {"thread_id": "delta"}, "recursion_limit": 200}
        with opener() as saver:
            graph.compile(checkpointer=saver).invoke({"items": ["start"], "left": 60}, cfg)
        with opener() as saver:  # a fresh saver rebuilds the channel from the stored writes
            compiled = graph.compile(checkpointer=saver)
            history = [len(h.values.get("items", [])) for h in compiled.get_state_history(cfg)]
            seen.append((compiled.get_state(cfg).values, history))
    assert seen[0] == seen[1]
    assert seen[0][0]["items"][-1] == "item 1" and len(seen[0][0]["items"]) == 61


def test_an_old_checkpoint_is_read_in_two_loads_and_a_message_is_stored_once(tmp_path: Path) -> None:
    """Time travel reads two stored versions (the checkpoint's own, and the next put's for its
    writes) and decodes no message the latest state holds;
    the task write that appended a message refers to the channel's chunk instead of holding
    the message again; both read back as on SqliteSaver, from the saver that wrote them and
    from a fresh one."""
    graph = build(turns=8, pause_at=-1)
    cfg: dict[str, Any] = {"configurable": {"thread_id": "old"}}
    url = f"sqlite:///{tmp_path}/t.db"
    with SqliteSaver.from_conn_string(str(tmp_path / "lg.db")) as lg:
        graph.compile(checkpointer=lg).invoke(FIRST_INPUT, cfg)
        expected = [_comparable(t) for t in lg.list(cfg)]
    with TetherSaver.from_url(url) as saver:
        graph.compile(checkpointer=saver).invoke(FIRST_INPUT, cfg)
        warm = [_comparable(t) for t in saver.list(cfg)]
        old = list(saver.list(cfg))[4].config
        loads = _chain_reads(saver)
        tup = saver.get_tuple(old)
        read_for_tuple = len(loads)
        newest = saver.get_tuple(cfg)
        latest = saver._srun(saver.store.load(ns_key("old", "")))
    with TetherSaver.from_url(url) as cold:
        fresh = [_comparable(t) for t in cold.list(cfg)]
    assert warm == fresh == expected
    assert read_for_tuple == 2 and tup is not None and tup.pending_writes and newest is not None
    # the older list is a prefix of the latest one held in memory: copied from it, not
    # decoded again (no load but the two above), and the caller's own
    older, now = tup.checkpoint["channel_values"]["messages"], newest.checkpoint["channel_values"]["messages"]
    assert 0 < len(older) < len(now) and older == now[: len(older)]
    assert not any(a is b for a, b in zip(older, now, strict=False))
    assert latest is not None
    kinds = {(e[3], e[4]) for e in latest.state["w"]}
    assert ("messages", "@c") in kinds and ("log", "@c") in kinds
    assert "p" not in latest.state  # no note of what each put replaced


def test_a_thread_whose_puts_kept_notes_reads_and_continues_as_on_sqlitesaver(tmp_path: Path) -> None:
    """A thread stored by an earlier saver, whose every put kept a note of what it replaced
    (``p``): its checkpoints read back as on SqliteSaver, an old one from the one version
    that noted it, and the next put clears the note."""
    graph = build(turns=8, pause_at=-1)
    cfg: dict[str, Any] = {"configurable": {"thread_id": "noted"}}
    with SqliteSaver.from_conn_string(str(tmp_path / "lg.db")) as lg:
        graph.compile(checkpointer=lg).invoke(FIRST_INPUT, cfg)
        expected = [_comparable(t) for t in lg.list(cfg)]
        graph.compile(checkpointer=lg).invoke(FIRST_INPUT, cfg)
        expected_after = [_comparable(t) for t in lg.list(cfg)]
    db = tmp_path / "noted.db"
    db.write_bytes((Path(__file__).parent / "data" / "saver_with_notes.db").read_bytes())
    with TetherSaver.from_url(f"sqlite:///{db}") as saver:
        stored = saver._srun(saver.store.load(ns_key("noted", "")))
        assert stored is not None and stored.state.get("p"), "the fixture's puts kept notes"
        assert [_comparable(t) for t in saver.list(cfg)] == expected
        old = list(saver.list(cfg))[4].config
        loads = _chain_reads(saver)
        tup = saver.get_tuple(old)
        assert len(loads) == 1 and tup is not None and _comparable(tup) == expected[4]
        graph.compile(checkpointer=saver).invoke(FIRST_INPUT, cfg)
        after = saver._srun(saver.store.load(ns_key("noted", "")))
        assert after is not None and after.state.get("p") is None
    with TetherSaver.from_url(f"sqlite:///{db}") as cold:
        assert [_comparable(t) for t in cold.list(cfg)] == expected_after


def _chain_reads(saver: TetherSaver) -> list[Any]:
    """The chain reads ``saver``'s stores make from now on (its store and the inline twin
    a sync graph's calls use), one entry per read."""
    loads: list[Any] = []
    for store in (saver.store, saver._threads.store.twin):  # type: ignore[attr-defined]
        real = store._read_chain

        async def spy(*a: Any, _real: Any = real, **k: Any) -> Any:
            loads.append(a)
            return await _real(*a, **k)

        store._read_chain = spy
    return loads


def _comparable(t: Any) -> tuple[Any, ...]:
    """What two savers must agree on (ids and task ids are random)."""
    values = t.checkpoint["channel_values"]
    writes = sorted((ch, repr(v)) for _task, ch, v in t.pending_writes or [])
    return (t.metadata.get("step"), {k: repr(v) for k, v in values.items()}, writes)


def _seed_runs(saver: TetherSaver, thread: str) -> dict[str, Any]:
    """Six checkpoints of runs r1, r2, r1, r3, r2, r3, each with a task write; returns what
    reads give for each checkpoint id."""
    cfg: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    items: list[str] = []
    for i, run in enumerate(["r1", "r2", "r1", "r3", "r2", "r3"]):
        cp = empty_checkpoint()
        items = [*items, f"m{i}"]
        cp["channel_values"] = {"items": items, "n": i}
        cp["channel_versions"] = {"items": i + 1, "n": i + 1}
        cfg = saver.put(cfg, cp, {"source": "loop", "step": i, "run_id": run}, {"items": i + 1, "n": i + 1})
        saver.put_writes(cfg, [("items", [f"w{i}"])], f"task-{i}")
    return {t.checkpoint["id"]: _comparable(t) for t in saver.list({"configurable": {"thread_id": thread}})}


@pytest.mark.slow
@pytest.mark.parametrize("point", ["scratch", "deleted", "copying"])
def test_delete_for_runs_killed_midway_is_finished_by_running_it_again(tmp_path: Path, point: str) -> None:
    """SIGKILL while the kept checkpoints are copied aside, right after the namespace was
    deleted, or while they are copied back: running delete_for_runs again leaves exactly
    the checkpoints of the other runs, as they were, and no scratch run."""
    url = f"sqlite:///{tmp_path}/t.db"
    with TetherSaver.from_url(url, flush_delay=None) as saver:
        before = _seed_runs(saver, "del")
        runs = {cid: tup[0] for cid, tup in before.items()}
    stall = tmp_path / "stalled"
    kill_when_stalled("tests.integrations._lg_delete", url, "del", point, str(stall), stall=stall)
    with TetherSaver.from_url(url) as saver:
        saver.delete_for_runs(["r2"])
        after = {
            t.checkpoint["id"]: _comparable(t) for t in saver.list({"configurable": {"thread_id": "del"}})
        }
        scratch = saver._srun(saver.store.get_run(ns_key("del", "") + "~rw"))
    kept = {cid: tup for cid, tup in before.items() if cid in after}
    assert len(after) == 4 and scratch is None
    assert after == kept
    assert sorted(tup[0] for tup in after.values()) == [0, 2, 3, 5]
    assert len(runs) == 6


def test_sync_task_writes_do_not_wait_for_the_stores_loop(tmp_path: Path) -> None:
    """A sync graph's task writes are buffered in its own thread: put_writes returns while
    the store's loop thread is busy, and the writes are stored with the next put."""
    cfg: Any = {"configurable": {"thread_id": "busy", "checkpoint_ns": ""}}
    with TetherSaver.from_url(f"sqlite:///{tmp_path}/t.db", flush_delay=30) as saver:
        assert saver._loop is not None
        stored = saver.put(cfg, empty_checkpoint(), {"source": "loop", "step": 0}, {})
        saver._loop.call_soon_threadsafe(time.sleep, 1.0)  # the loop thread is busy for 1 s
        t0 = time.monotonic()
        saver.put_writes(stored, [("messages", "hello")], "task-1")
        took = time.monotonic() - t0
        following = saver.put(stored, empty_checkpoint(), {"source": "loop", "step": 1}, {})
        first = saver.get_tuple(stored)
    assert took < 0.5, f"put_writes waited {took:.2f} s for the store's loop"
    assert following["configurable"]["checkpoint_id"] != stored["configurable"]["checkpoint_id"]
    assert first is not None and first.pending_writes == [("task-1", "messages", "hello")]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "redis"])
def test_a_sync_saver_serves_many_threads_at_once(backend: str, tmp_path: Path) -> None:
    """Graph threads of a server share one saver opened with ``with``: their calls run in
    their own threads, on the store's one synchronous connection, and none sees another's
    writes or loses its own."""
    import threading

    from tests.stores.conftest import require_url

    url = require_url(backend, tmp_path)
    prefix = f"lg{uuid.uuid4().hex[:8]}"
    errors: list[BaseException] = []
    latest: dict[str, Any] = {}

    def work(saver: TetherSaver, name: str) -> None:
        try:
            cfg: Any = {"configurable": {"thread_id": name, "checkpoint_ns": ""}}
            items: list[str] = []
            for i in range(15):
                cp = empty_checkpoint()
                items = [*items, f"{name}-{i}"]
                cp["channel_values"] = {"items": items}
                cp["channel_versions"] = {"items": i + 1}
                cfg = saver.put(cfg, cp, {"source": "loop", "step": i}, {"items": i + 1})
                saver.put_writes(cfg, [("items", [f"w-{name}-{i}"])], f"task-{i}")
                got = saver.get_tuple(cfg)
                assert got is not None and got.checkpoint["channel_values"]["items"] == items
            latest[name] = cfg
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    with TetherSaver.from_url(url, prefix=prefix) as saver:
        threads = [threading.Thread(target=work, args=(saver, f"t{k}")) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    with TetherSaver.from_url(url, prefix=prefix) as again:
        for name, cfg in latest.items():
            tup = again.get_tuple(cfg)
            assert tup is not None
            assert tup.checkpoint["channel_values"]["items"] == [f"{name}-{i}" for i in range(15)]
            assert tup.pending_writes == [("task-14", "items", [f"w-{name}-14"])]
            assert len(list(again.list({"configurable": {"thread_id": name}}))) == 15
            again.delete_thread(name)


def test_a_sync_saver_redoes_a_call_its_connection_lost_on_the_async_store(tmp_path: Path) -> None:
    """The synchronous connection does not retry: a commit or read that fails for a
    transient cause is redone on the async store (which retries), and lands once."""
    from tether.errors import StoreUnavailable

    cfg: Any = {"configurable": {"thread_id": "lost", "checkpoint_ns": ""}}
    with TetherSaver.from_url(f"sqlite:///{tmp_path}/t.db", flush_delay=None) as saver:
        twin = saver.inline_store.twin  # type: ignore[union-attr]
        real_commit, real_get_run = twin.commit, twin.get_run
        failed: list[str] = []

        async def commit(ctx: Any, **kw: Any) -> int:
            if not failed:
                failed.append("commit")
                raise StoreUnavailable("connection lost")
            return await real_commit(ctx, **kw)

        async def get_run(run_id: str) -> Any:
            failed.append("get_run")
            raise StoreUnavailable("connection lost")

        twin.commit = commit
        stored = saver.put(cfg, empty_checkpoint(), {"source": "loop", "step": 0}, {})
        saver.put_writes(stored, [("messages", "hello")], "task-1")
        twin.get_run = get_run
        tup = saver.get_tuple(stored)
        twin.get_run = real_get_run
        versions = [h.version for h in saver._srun(saver.store.history(ns_key("lost", "")))]
    assert failed[0] == "commit" and "get_run" in failed
    assert tup is not None and tup.pending_writes == [("task-1", "messages", "hello")]
    assert versions == [2, 1]  # the failed commit was redone once, the writes after it
