"""``tether import-langgraph``: bring a LangGraph checkpoint database into a tether store.

Registered on the main app by ``register(app)``; LangGraph is imported only when the
command runs.
"""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["register"]


def import_langgraph(
    source: Annotated[
        str, typer.Argument(help="LangGraph database: sqlite:///path.db, a file path, or postgresql://...")
    ],
    dest: Annotated[
        str,
        typer.Argument(help="tether store URL: sqlite:///..., postgresql://..., redis://..., mysql://..."),
    ],
    verify: Annotated[
        bool, typer.Option(help="Compare every thread's latest state on both sides afterwards.")
    ] = True,
) -> None:
    """Copy every thread of a LangGraph SqliteSaver / PostgresSaver database into a tether store.

    Checkpoints, metadata, parents and pending writes are copied in order; then the latest
    state of every thread is loaded from both databases and compared (exit 1 on a mismatch).
    """
    from tether.errors import TetherError

    try:
        from tether.integrations.langgraph.importer import import_langgraph as run_import

        def done(thread_id: str, ns: str, count: int) -> None:
            where = f"{thread_id}" + (f" [{ns}]" if ns else "")
            typer.echo(f"  {where}: {count} checkpoints")

        report = run_import(source, dest, verify=verify, on_namespace=done)
    except TetherError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from None
    typer.echo(
        f"imported {report.threads} threads ({report.namespaces} namespaces, "
        f"{report.checkpoints} checkpoints, {report.writes} pending writes)"
        + (f"; {len(report.skipped)} already there" if report.skipped else "")
    )
    if verify:
        for problem in report.mismatches:
            typer.secho(f"mismatch: {problem}", fg=typer.colors.RED, err=True)
        if report.mismatches:
            raise typer.Exit(1)
        typer.echo("verified: every thread's latest state is the same in both")


def register(app: typer.Typer) -> None:
    app.command("import-langgraph")(import_langgraph)
