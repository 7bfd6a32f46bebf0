"""``tether rekey``: re-encrypt stored runs under the newest key (see ``tether.stores.rekey``)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from tether.cli._common import STATE, StoreOpt, fail, print_json, run_async


def rekey(
    run_ids: Annotated[
        list[str] | None, typer.Argument(help="Runs to re-key (default: every run of the store).")
    ] = None,
    store: StoreOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """Re-encrypt runs under the newest key, online, so an old key can be dropped.

    Configure every key, newest first (TETHER_ENCRYPTION_KEY="NEW,OLD"), in every
    process that writes to the store, then run this. Every row still under an old key is
    re-encrypted under NEW in place, every version and its history kept, atomically per
    run: interrupted, every run still loads; run it again to finish. Exit code 1 if a run
    could not be re-keyed (listed).
    """
    from tether.cli._common import declare_secrets
    from tether.errors import TetherError
    from tether.settings import load_settings
    from tether.stores.rekey import rekey as rekey_store

    try:
        loaded = load_settings(_env_file=STATE["env_file"], **({} if store is None else {"store_url": store}))
    except TetherError as exc:
        raise fail(str(exc)) from None
    declare_secrets(loaded)
    if loaded.encryption_key is None:
        raise fail("no encryption key: set TETHER_ENCRYPTION_KEY=NEW,OLD (newest first) to re-key")
    options: dict[str, Any] = {k: v for k, v in loaded.store_options().items() if k != "codec"}

    def progress(run_id: str, outcome: str) -> None:
        if not as_json:
            typer.echo(f"{outcome.split(':')[0]:8s} {run_id}")
            sys.stdout.flush()

    report = run_async(
        lambda: rekey_store(
            loaded.store_url,
            encryption_key=loaded.encryption_key.get_secret_value(),  # type: ignore[union-attr]
            run_ids=run_ids or None,
            on_run=progress,
            **options,
        )
    )
    if as_json:
        print_json({"rekeyed": report.rekeyed, "current": report.current, "failed": report.failed})
    else:
        typer.echo(
            f"{len(report.rekeyed)} re-keyed, {len(report.current)} already under the newest key, "
            f"{len(report.failed)} failed"
        )
        for run_id, why in report.failed.items():
            typer.echo(f"  {run_id}: {why}", err=True)
    if not report.ok:
        raise typer.Exit(1)
