"""Copy a database written by LangGraph's ``SqliteSaver`` or ``PostgresSaver`` into a tether store.

Every checkpoint of every thread and namespace is read through LangGraph's own saver (so
its serializer decodes the values) and written through :class:`TetherSaver` in id order,
with its metadata, parent and pending writes. A list channel whose next checkpoint
starts with the same items is stored as an append, so a conversation that LangGraph
stored once per step (the square of its length) arrives about its own size. Then the
latest checkpoint of every namespace is read back from both sides and compared.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

from tether.errors import ConfigError
from tether.integrations.langgraph._threads import Threads
from tether.integrations.langgraph.saver import TetherSaver

__all__ = ["ImportReport", "import_langgraph"]


@dataclass
class ImportReport:
    """What an import copied, and what the comparison afterwards found."""

    threads: int = 0
    namespaces: int = 0
    checkpoints: int = 0
    writes: int = 0
    skipped: list[str] = field(default_factory=list)
    """``thread/namespace`` already in the destination with the same latest checkpoint."""
    mismatches: list[str] = field(default_factory=list)
    """Namespaces whose latest checkpoint differs between source and destination."""


def _source_path(url: str) -> str:
    if url.startswith("sqlite:///"):  # sqlite:///rel.db, sqlite:////abs.db
        return url[len("sqlite:///") :]
    if "://" not in url:
        return url
    raise ConfigError(
        f"import-langgraph reads sqlite:///path.db, a file path or postgresql://...; got {url!r}"
    )


@contextlib.contextmanager
def _open_source(
    url: str,
) -> Iterator[tuple[BaseCheckpointSaver[Any], Callable[[str, tuple[Any, ...]], list[Any]]]]:
    """LangGraph's saver for ``url`` and a function running a query on its database."""
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from langgraph.checkpoint.postgres import PostgresSaver
        except ImportError as exc:
            raise ConfigError(
                "importing from PostgreSQL needs pip install langgraph-checkpoint-postgres"
            ) from exc
        with PostgresSaver.from_conn_string(url) as pg:

            def pg_query(sql: str, args: tuple[Any, ...]) -> list[Any]:
                with pg._cursor() as cur:
                    cur.execute(sql.replace("?", "%s"), args)
                    return [
                        tuple(row.values()) if isinstance(row, dict) else tuple(row) for row in cur.fetchall()
                    ]

            yield pg, pg_query
        return
    import os
    import sqlite3

    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError as exc:
        raise ConfigError("importing from SQLite needs pip install langgraph-checkpoint-sqlite") from exc
    path = _source_path(url)
    if not os.path.exists(path):
        raise ConfigError(f"no LangGraph database at {path!r}")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    try:

        def sqlite_query(sql: str, args: tuple[Any, ...]) -> list[Any]:
            return list(conn.execute(sql, args).fetchall())

        yield SqliteSaver(conn), sqlite_query
    finally:
        conn.close()


def import_langgraph(
    source_url: str,
    dest_url: str,
    *,
    verify: bool = True,
    on_namespace: Callable[[str, str, int], None] | None = None,
    **store_options: Any,
) -> ImportReport:
    """Copy every thread of a LangGraph checkpoint database into the tether store at ``dest_url``.

    A namespace already in the destination with the same latest checkpoint is skipped (so
    an interrupted import can be run again); one with other checkpoints raises
    :class:`ConfigError`. ``on_namespace(thread_id, ns, checkpoints)`` is called as each
    namespace is done.
    """
    report = ImportReport()
    with _open_source(source_url) as (src, query), TetherSaver.from_url(dest_url, **store_options) as dst:
        threads = dst._threads
        try:
            pairs = query("SELECT DISTINCT thread_id, checkpoint_ns FROM checkpoints ORDER BY 1, 2", ())
        except Exception as exc:
            raise ConfigError(
                f"{source_url!r} does not look like a LangGraph checkpoint database: {exc}"
            ) from exc
        seen_threads: set[str] = set()
        for thread_id, ns in pairs:
            thread_id, ns = str(thread_id), str(ns or "")
            ids = [
                str(row[0])
                for row in query(
                    "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? "
                    "ORDER BY checkpoint_id",
                    (thread_id, ns),
                )
            ]
            if not ids:
                continue
            conf = {"thread_id": thread_id, "checkpoint_ns": ns}
            have = dst.get_tuple({"configurable": conf})
            if have is not None:
                if have.checkpoint["id"] == ids[-1]:
                    report.skipped.append(f"{thread_id}/{ns}")
                    continue
                raise ConfigError(
                    f"thread {thread_id!r} namespace {ns!r} already has other checkpoints in {dest_url!r}: "
                    "delete it there first (TetherSaver.delete_thread)"
                )
            for cid in ids:
                tup = src.get_tuple({"configurable": {**conf, "checkpoint_id": cid}})
                if tup is None:
                    continue
                report.writes += _copy_one(dst, threads, thread_id, ns, tup)
                report.checkpoints += 1
            report.namespaces += 1
            seen_threads.add(thread_id)
            if verify:
                problem = _compare(
                    src.get_tuple({"configurable": conf}), dst.get_tuple({"configurable": conf})
                )
                if problem:
                    report.mismatches.append(f"{thread_id}/{ns}: {problem}")
            if on_namespace is not None:
                on_namespace(thread_id, ns, len(ids))
        report.threads = len(seen_threads)
    return report


def _copy_one(dst: TetherSaver, threads: Threads, thread_id: str, ns: str, tup: CheckpointTuple) -> int:
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    checkpoint = tup.checkpoint
    dst._sync(
        threads.put(
            thread_id, ns, checkpoint, tup.metadata, parent, checkpoint["channel_versions"], equal=True
        )
    )
    by_task: dict[str, list[tuple[str, Any]]] = {}
    for task_id, channel, value in tup.pending_writes or []:
        by_task.setdefault(task_id, []).append((channel, value))
    for task_id, writes in by_task.items():
        dst._sync(threads.put_writes(thread_id, ns, checkpoint["id"], writes, task_id, ""))
    return sum(len(w) for w in by_task.values())


def _compare(want: CheckpointTuple | None, got: CheckpointTuple | None) -> str:
    if want is None or got is None:
        return "missing on one side"
    if want.checkpoint["id"] != got.checkpoint["id"]:
        return f"latest checkpoint {got.checkpoint['id']} instead of {want.checkpoint['id']}"
    if want.checkpoint["channel_values"] != got.checkpoint["channel_values"]:
        differ = sorted(
            k
            for k in set(want.checkpoint["channel_values"]) | set(got.checkpoint["channel_values"])
            if want.checkpoint["channel_values"].get(k) != got.checkpoint["channel_values"].get(k)
        )
        return f"channel values differ: {', '.join(differ)}"
    if dict(want.metadata) != dict(got.metadata):
        return "metadata differs"
    if sorted(map(repr, want.pending_writes or [])) != sorted(map(repr, got.pending_writes or [])):
        return "pending writes differ"
    return ""
