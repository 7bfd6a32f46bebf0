"""The SQL stores' schema: what differs between engines (:class:`Dialect`), the migrations
every engine applies (position + 1 is the schema version), and the transaction interface the
shared logic in ``_sql.py`` runs on (:class:`Tx`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Dialect", "Tx"]


class Tx(Protocol):
    """One open transaction; SQL uses ``?`` placeholders (translated per dialect)."""

    async def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Execute; returns the affected row count."""
        ...

    async def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    async def one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Dialect:
    """What differs between SQL engines, and nothing more."""

    text_key: str
    """Type for run ids (indexed)."""
    text: str
    real: str
    bigint: str
    blob: str
    lock: str
    """Suffix that locks selected rows for the transaction (``FOR UPDATE``)."""
    table_suffix: str = ""
    inline_indexes: bool = False
    """MySQL has no CREATE INDEX IF NOT EXISTS: declare indexes inside CREATE TABLE."""
    migrate_lock: str = ""
    """Statement that serialises concurrent ``setup()`` calls from several processes."""
    schema_exists: str = ""
    """Query giving a row when ``tether_schema`` exists, where ``CREATE TABLE IF NOT EXISTS``
    of an existing table makes the driver log a warning (MySQL) on every start."""
    extra: tuple[str, ...] = ()
    """Engine-specific statements of the first schema version (e.g. column compression)."""
    payload_storage: tuple[str, ...] = ()
    """Engine-specific statements of schema version 4: how the payload column is stored."""

    def migrations(self) -> list[list[str]]:
        """Schema versions; position + 1 is the version. Append, never edit."""
        d = self
        run_idx = (
            ", INDEX tether_runs_updated (updated_at), INDEX tether_runs_expires (expires_at)"
            if d.inline_indexes
            else ""
        )
        separate_idx = (
            []
            if d.inline_indexes
            else [
                "CREATE INDEX IF NOT EXISTS tether_runs_updated ON tether_runs (updated_at)",
                "CREATE INDEX IF NOT EXISTS tether_runs_expires ON tether_runs (expires_at)",
            ]
        )
        return [
            [
                f"""CREATE TABLE IF NOT EXISTS tether_runs (
                    run_id {d.text_key} PRIMARY KEY,
                    status {d.text_key} NOT NULL,
                    version {d.bigint} NOT NULL,
                    node_id {d.text},
                    base_version {d.bigint} NOT NULL,
                    base_bytes {d.bigint} NOT NULL,
                    growth_bytes {d.bigint} NOT NULL,
                    rewrite_bytes {d.bigint} NOT NULL,
                    chain_len {d.bigint} NOT NULL,
                    created_at {d.real} NOT NULL,
                    updated_at {d.real} NOT NULL,
                    expires_at {d.real}{run_idx}
                ){d.table_suffix}""",
                f"""CREATE TABLE IF NOT EXISTS tether_checkpoints (
                    run_id {d.text_key} NOT NULL,
                    version {d.bigint} NOT NULL,
                    kind {d.text_key} NOT NULL,
                    node_id {d.text},
                    status {d.text_key} NOT NULL,
                    created_at {d.real} NOT NULL,
                    nbytes {d.bigint} NOT NULL,
                    payload {d.blob} NOT NULL,
                    PRIMARY KEY (run_id, version)
                ){d.table_suffix}""",
                *separate_idx,
                *d.extra,
            ],
            # the id of the run's latest write: a retry after a lost reply recognises its own
            [f"ALTER TABLE tether_runs ADD COLUMN write_id {d.text_key}"],
            # the run's lease: its holder's token (only ever increases) and its deadline
            [
                f"ALTER TABLE tether_runs ADD COLUMN fence {d.bigint} NOT NULL DEFAULT 0",
                f"ALTER TABLE tether_runs ADD COLUMN lease_until {d.real}",
            ],
            list(d.payload_storage),
        ]
