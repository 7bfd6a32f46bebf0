"""Re-encrypt stored runs under the newest key, online, so that an old key can be dropped.

With several keys configured (``TETHER_ENCRYPTION_KEY="NEW,OLD"``) the newest encrypts
every new row and all of them read; the rows written before stay under the key that wrote
them. A rekey re-encrypts, run by run, every stored row still under an older key, in
place: each version keeps its number, its history entry and its place in the chain (full
row, delta, segment), so every old version still loads and a rollback to it still works.
Only each row's frame changes (key id, nonce, tag); the body inside, and so what the row
means, is the same bytes (``Codec.reencrypt``).

Per run it reads every row and the run's latest version, re-encrypts the rows that need
it, and writes them back in one atomic step of the store
(:meth:`~tether.stores.base.CheckpointStore.rewrite_rows`) on condition that the run is
still at that version; a writer that committed meanwhile makes it read again (a writer is
never blocked longer than that one step). A process killed at any moment therefore leaves
each run either as it was or re-keyed, every row readable with ``NEW,OLD``, and running it
again finishes the work: rows already under the newest key are not written again.

Every writer must have the new key first in its list before the rekey starts, or its next
rows are under the old key again (a rerun re-keys them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.errors import CheckpointCorrupt, ConfigError, RunNotFound
from tether.stores.base import CheckpointStore

__all__ = ["RekeyReport", "rekey", "rekey_runs"]

_PAGE = 500
_ATTEMPTS = 8
"""Reads of a run when writers keep committing to it between the read and the rewrite."""


@dataclass(slots=True)
class RekeyReport:
    """What a rekey did, run by run."""

    rekeyed: list[str] = field(default_factory=list)
    """Runs whose rows under older keys were re-encrypted: now under the newest key alone."""
    current: list[str] = field(default_factory=list)
    """Runs that already were (nothing written)."""
    failed: dict[str, str] = field(default_factory=dict)
    """Runs left as they were, and why (run it again once the cause is gone)."""
    rows: int = 0
    """Rows re-encrypted, over every run."""

    @property
    def ok(self) -> bool:
        return not self.failed


async def rekey_runs(
    store: CheckpointStore,
    run_ids: Iterable[str] | None = None,
    *,
    on_run: Callable[[str, str], None] | None = None,
) -> RekeyReport:
    """Re-key ``run_ids`` (every run of the store when None).

    Args:
        store: the store, its codec configured with every key (newest first).
        on_run: called with ``(run_id, outcome)`` after each run (``rekeyed``,
            ``current`` or ``failed: why``), e.g. to print progress.
    """
    if not store.codec.encrypted:
        raise ConfigError("a rekey needs encryption keys: TETHER_ENCRYPTION_KEY=NEW,OLD (newest first)")
    ids = list(run_ids) if run_ids is not None else await _all_run_ids(store)
    report = RekeyReport()
    for run_id in ids:
        try:
            rewritten = await rekey_run(store, run_id)
        except (CheckpointCorrupt, ConfigError, RunNotFound) as exc:
            report.failed[run_id] = f"{type(exc).__name__}: {exc}"
            outcome = f"failed: {report.failed[run_id]}"
        else:
            outcome = "rekeyed" if rewritten else "current"
            (report.rekeyed if rewritten else report.current).append(run_id)
            report.rows += rewritten
        if on_run is not None:
            on_run(run_id, outcome)
    return report


async def _all_run_ids(store: CheckpointStore) -> list[str]:
    """Every run id, read before anything is rewritten (a writer reorders the listing)."""
    ids: list[str] = []
    while page := await store.list_runs(limit=_PAGE, offset=len(ids)):
        ids += [info.run_id for info in page]
        if len(page) < _PAGE:
            break
    return list(dict.fromkeys(ids))


async def rekey_run(store: CheckpointStore, run_id: str) -> int:
    """Re-encrypt every row of ``run_id`` still under an older key; returns how many rows
    were rewritten (0: the run already was under the newest key alone).

    Raises RunNotFound for no run, :class:`~tether.errors.DecryptionError` for a row under
    no configured key (or a plaintext row), ConfigError when writers kept committing to
    the run through every attempt.
    """
    codec = store.codec
    rewritten = 0
    for attempt in range(_ATTEMPTS):
        info, rows = await store.read_rows(run_id)
        if info is None:
            raise RunNotFound(run_id)
        payloads: dict[int, bytes] = {}
        for row in rows:
            new = codec.reencrypt(bytes(row.payload), run_id=run_id, version=row.version)
            if new is not None:
                payloads[row.version] = new
        if not payloads:
            return rewritten
        if await store.rewrite_rows(run_id, payloads, info.version):
            return rewritten + len(payloads)
        await asyncio.sleep(0.01 * 2**attempt)  # a writer committed meanwhile: read again
    raise ConfigError(
        f"run {run_id!r} kept receiving commits through {_ATTEMPTS} attempts to re-key it; "
        "rekey it again when it is quieter"
    )


async def rekey(
    url: str,
    *,
    encryption_key: str | Sequence[str],
    run_ids: Iterable[str] | None = None,
    on_run: Callable[[str, str], None] | None = None,
    **options: Any,
) -> RekeyReport:
    """Open the store at ``url`` and re-key ``run_ids`` (every run when None).

    ``encryption_key``: every key, newest first (a comma-separated string or a list).
    ``options``: more keyword arguments for :func:`~tether.stores.open_store` (not
    ``codec``).
    """
    from tether.state.serde import Codec
    from tether.stores.registry import open_store

    keys = (
        [k.strip() for k in encryption_key.split(",")]
        if isinstance(encryption_key, str)
        else list(encryption_key)
    )
    keys = [k for k in keys if k]
    if not keys:
        raise ConfigError("a rekey needs encryption keys: TETHER_ENCRYPTION_KEY=NEW,OLD (newest first)")
    options = {k: v for k, v in options.items() if k != "codec"}
    async with open_store(url, codec=Codec(encryption_key=keys), **options) as store:
        return await rekey_runs(store, run_ids, on_run=on_run)
