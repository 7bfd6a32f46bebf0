"""``tether import-langgraph`` on databases written by LangGraph's own savers."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from typer.testing import CliRunner

from tests.integrations._lg_graph import FIRST_INPUT, build
from tests.integrations.test_langgraph_graph import view
from tests.stores.conftest import require_url
from tether.cli.app import app
from tether.integrations.langgraph import TetherSaver


def write_threads(saver: Any, threads: list[str]) -> None:
    """Each thread: a run to the interrupt, a resume, an edit and a replay from turn 2."""
    graph = build().compile(checkpointer=saver)
    for thread in threads:
        cfg = {"configurable": {"thread_id": thread}}
        graph.invoke(FIRST_INPUT, cfg)
        if thread.endswith("paused"):
            continue
        graph.invoke(Command(resume="yes"), cfg)
        graph.update_state(cfg, {"messages": [HumanMessage(content="and then?", id="user-2")]})
        old = next(
            h for h in graph.get_state_history(cfg) if h.values.get("turn") == 2 and h.next == ("agent",)
        )
        graph.invoke(None, old.config)


def histories(saver: Any, threads: list[str]) -> dict[str, Any]:
    graph = build().compile(checkpointer=saver)
    return {
        t: [view(h) for h in graph.get_state_history({"configurable": {"thread_id": t}})] for t in threads
    }


def test_an_sqlitesaver_database_imports_with_every_checkpoint(tmp_path: Path) -> None:
    """Every thread's whole history reads the same from tether; a rerun skips what is there."""
    src, dst = tmp_path / "langgraph.db", f"sqlite:///{tmp_path}/tether.db"
    threads = ["alpha", "beta-paused", "gamma"]
    with SqliteSaver.from_conn_string(str(src)) as lg:
        write_threads(lg, threads)
        expected = histories(lg, threads)
    runner = CliRunner()
    result = runner.invoke(app, ["import-langgraph", f"sqlite:///{src}", dst])
    assert result.exit_code == 0, result.output
    assert "imported 3 threads" in result.output and "verified" in result.output
    again = runner.invoke(app, ["import-langgraph", str(src), dst])
    assert again.exit_code == 0, again.output
    assert "imported 0 threads" in again.output and "3 already there" in again.output
    with TetherSaver.from_url(dst) as saver:
        assert histories(saver, threads) == expected
        graph = build().compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "beta-paused"}}
        assert graph.get_state(cfg).next == ("human",)
        graph.invoke(Command(resume="yes"), cfg)  # an imported thread goes on in tether
        assert graph.get_state(cfg).values["turn"] == 6
    clash = runner.invoke(app, ["import-langgraph", str(src), dst])
    assert clash.exit_code == 1 and "already has other checkpoints" in clash.output


def test_bad_sources_fail_with_one_line(tmp_path: Path) -> None:
    """A missing file or a database that is not LangGraph's: exit 1 and a clear message."""
    runner = CliRunner()
    missing = runner.invoke(
        app, ["import-langgraph", str(tmp_path / "nope.db"), f"sqlite:///{tmp_path}/t.db"]
    )
    assert missing.exit_code == 1 and "no LangGraph database" in missing.output
    other = tmp_path / "other.db"
    import sqlite3

    sqlite3.connect(other).execute("CREATE TABLE x (y)").connection.commit()
    wrong = runner.invoke(app, ["import-langgraph", str(other), f"sqlite:///{tmp_path}/t.db"])
    assert wrong.exit_code == 1 and "does not look like a LangGraph checkpoint database" in wrong.output


@pytest.mark.slow
def test_a_postgressaver_database_imports(tmp_path: Path) -> None:
    """PostgresSaver's tables, in a schema of this test's own, into a tether SQLite store."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

    base = require_url("postgresql", tmp_path)
    schema = f"lgimport_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    url = f"{base}?options=-csearch_path%3D{schema}"
    try:
        threads = ["pg-one", "pg-two-paused"]
        with PostgresSaver.from_conn_string(url) as lg:
            lg.setup()
            write_threads(lg, threads)
            expected = histories(lg, threads)
        dst = f"sqlite:///{tmp_path}/tether.db"
        result = CliRunner().invoke(app, ["import-langgraph", url, dst])
        assert result.exit_code == 0, result.output
        assert "imported 2 threads" in result.output
        with TetherSaver.from_url(dst) as saver:
            assert histories(saver, threads) == expected
    finally:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")  # this test's own schema only
