"""Re-encrypt stored runs under the newest key, online, so that an old key can be dropped.

With several keys configured (``TETHER_ENCRYPTION_KEY="NEW,OLD"``) the newest encrypts
every new row and all of them read; the rows written before stay under the old key. A
rekey rewrites each run's latest state as one full row under the newest key and drops the
versions before it (they were encrypted under old keys), in one atomic step of the store
(the same step as ``prune(keep=1)``): a process killed at any moment leaves every run
loadable, either as it was (old key) or re-keyed (new key), and running it again finishes
the work. A run already under the newest key (every version loads with it alone) is
left as it is, history included, so a rerun only reads the runs finished before.

The latest version keeps its number, so a runner that holds a run keeps committing to it
during a rekey. Every writer must have the new key first in its list before the rekey
starts, or its next rows are under the old key again (a rerun reports those runs).
Only the public store API is used, so every backend is re-keyed the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from tether.errors import CheckpointCorrupt, ConfigError, RunNotFound, VersionConflict
from tether.state.model import Checkpoint
from tether.stores.base import CheckpointStore

__all__ = ["RekeyReport", "rekey", "rekey_runs"]

_PAGE = 500
_ATTEMPTS = 3
"""Tries per run when a writer commits to it meanwhile (a version conflict)."""


@dataclass(slots=True)
class RekeyReport:
    """What a rekey did, run by run."""

    rekeyed: list[str] = field(default_factory=list)
    """Runs now stored under the newest key alone."""
    current: list[str] = field(default_factory=list)
    """Runs that already were (nothing written)."""
    failed: dict[str, str] = field(default_factory=dict)
    """Runs left as they were, and why (run it again once the cause is gone)."""

    @property
    def ok(self) -> bool:
        return not self.failed


async def rekey_runs(
    store: CheckpointStore,
    check: CheckpointStore,
    run_ids: Iterable[str] | None = None,
    *,
    on_run: Callable[[str, str], None] | None = None,
) -> RekeyReport:
    """Re-key ``run_ids`` (every run of the store when None).

    Args:
        store: the store, its codec configured with every key (newest first).
        check: the same store opened with the newest key alone: a run that loads from it
            whole is already re-keyed.
        on_run: called with ``(run_id, outcome)`` after each run (``rekeyed``,
            ``current`` or ``failed: why``), e.g. to print progress.
    """
    if not store.codec.encrypted or not check.codec.encrypted:
        raise ConfigError("a rekey needs encryption keys: TETHER_ENCRYPTION_KEY=NEW,OLD (newest first)")
    ids = list(run_ids) if run_ids is not None else await _all_run_ids(store)
    report = RekeyReport()
    for run_id in ids:
        try:
            outcome = await _rekey_run(store, check, run_id)
        except (CheckpointCorrupt, ConfigError, RunNotFound, VersionConflict) as exc:
            report.failed[run_id] = f"{type(exc).__name__}: {exc}"
            outcome = f"failed: {report.failed[run_id]}"
        else:
            (report.rekeyed if outcome == "rekeyed" else report.current).append(run_id)
        if on_run is not None:
            on_run(run_id, outcome)
    return report


async def _all_run_ids(store: CheckpointStore) -> list[str]:
    """Every run id, read before anything is rewritten (a rewrite reorders the listing)."""
    ids: list[str] = []
    while page := await store.list_runs(limit=_PAGE, offset=len(ids)):
        ids += [info.run_id for info in page]
        if len(page) < _PAGE:
            break
    return list(dict.fromkeys(ids))


async def _rekey_run(store: CheckpointStore, check: CheckpointStore, run_id: str) -> str:
    for _ in range(_ATTEMPTS):
        versions = await store.history(run_id, limit=2)
        if not versions:
            raise RunNotFound(run_id)
        if await _loads_with_newest(check, run_id):  # its history stays whole
            return "current"
        if len(versions) == 1:  # one row under an old key: a rewrite needs a version to rebase on
            cp = await store.load(run_id)
            if cp is None:
                raise RunNotFound(run_id)
            try:
                await store.save(
                    Checkpoint(
                        run_id=run_id,
                        node_id=cp.node_id,
                        state=cp.state,
                        executed_node_ids=list(cp.executed_node_ids),
                        status=cp.status,
                        metadata={**cp.metadata, "rekeyed_from": cp.version},
                    ),
                    expected_version=cp.version,
                )
            except VersionConflict:
                continue  # a writer committed meanwhile: it has two versions now
        await store.prune(run_id, keep=1)  # the latest as one full row under the newest key
        if await _loads_with_newest(check, run_id):
            return "rekeyed"
    raise ConfigError(
        f"run {run_id!r} kept receiving rows under another key: give every writer the new key "
        "first (TETHER_ENCRYPTION_KEY=NEW,OLD), then rekey again"
    )


async def _loads_with_newest(check: CheckpointStore, run_id: str) -> bool:
    """Whether every stored version decodes with the newest key alone."""
    try:
        versions = [info.version for info in await check.history(run_id)]
        for version in versions:
            if await check.load(run_id, version) is None:
                return False
    except CheckpointCorrupt:  # DecryptionError: a row under an older key
        return False
    return True


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
    keys = (
        [k.strip() for k in encryption_key.split(",")]
        if isinstance(encryption_key, str)
        else list(encryption_key)
    )
    keys = [k for k in keys if k]
    if not keys:
        raise ConfigError("a rekey needs encryption keys: TETHER_ENCRYPTION_KEY=NEW,OLD (newest first)")
    async with _pair(url, keys, options) as (store, check):
        return await rekey_runs(store, check, run_ids, on_run=on_run)


@asynccontextmanager
async def _pair(
    url: str, keys: list[str], options: dict[str, Any]
) -> AsyncIterator[tuple[CheckpointStore, CheckpointStore]]:
    from tether.state.serde import Codec
    from tether.stores.registry import open_store

    options = {k: v for k, v in options.items() if k != "codec"}
    async with (
        open_store(url, codec=Codec(encryption_key=keys), **options) as store,
        open_store(url, codec=Codec(encryption_key=keys[0]), setup=False, **options) as check,
    ):
        yield store, check
