"""``tether serve``: the HTTP API and the dashboard (needs the ``server`` extra)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

__all__ = ["register"]


def serve(
    store: Annotated[
        str | None, typer.Option("--store", help="Store URL (default: TETHER_STORE_URL or SQLite).")
    ] = None,
    host: Annotated[str | None, typer.Option(help="Address to listen on (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8765).")] = None,
    workflow: Annotated[
        list[str] | None,
        typer.Option("--workflow", "-w", help="module:attribute of a Workflow the server may run (repeat)."),
    ] = None,
    replan: Annotated[
        list[str] | None,
        typer.Option(
            "--replan",
            help="WORKFLOW=module:attribute of a replanner (report, ctx) -> steps: a 'replan' decision "
            "for that workflow's failed runs calls it (repeat).",
        ),
    ] = None,
    tokens_file: Annotated[
        str | None, typer.Option(help="File of hashed token entries (TETHER_API_TOKENS_FILE).")
    ] = None,
    new_token: Annotated[
        bool,
        typer.Option("--new-token", help="Print a new token and its entry for the token file, then exit."),
    ] = False,
    scope: Annotated[str, typer.Option(help="Scope of --new-token: read, operate or admin.")] = "read",
    namespace: Annotated[
        str | None, typer.Option(help="Namespace of --new-token: it sees only runs 'NAMESPACE:…'.")
    ] = None,
) -> None:
    """Serve the HTTP API, the dashboard (/ui/runs) and the OpenAPI document (/api/docs)."""
    try:
        from tether.server.config import SCOPES, ServerSettings, is_loopback
        from tether.server.config import new_token as make_token
    except ImportError as exc:  # fastapi/uvicorn missing
        raise typer.BadParameter(
            f"the server needs its extra: pip install 'tether[server]' ({exc})"
        ) from None

    if new_token:
        chosen = next((s for s in SCOPES if s == scope), None)
        if chosen is None:
            raise typer.BadParameter(f"--scope must be one of {', '.join(SCOPES)}")
        token, entry = make_token(chosen, namespace)
        typer.echo(f"token (give it to the client; it is not stored): {token}")
        typer.echo(f"entry (add it to the token file or TETHER_API_TOKENS): {entry}")
        return
    overrides: dict[str, object] = {}
    for key, value in (
        ("store_url", store),
        ("host", host),
        ("port", port),
        ("api_tokens_file", tokens_file),
    ):
        if value is not None:
            overrides[key] = value
    settings = ServerSettings(**overrides)  # type: ignore[arg-type]
    from tether.errors import TetherError

    try:
        tokens = settings.tokens()
    except TetherError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from None
    if not tokens and not is_loopback(settings.host):
        typer.secho(
            f"error: refusing to listen on {settings.host} without tokens: anyone who can reach it "
            "could read and change every run. Configure tokens (tether serve --new-token) or listen "
            "on 127.0.0.1.",
            fg=typer.colors.RED,
            err=True,
        )
        raise typer.Exit(2)
    from tether.cli.progress import load_workflow

    try:
        flows = [load_workflow(target) for target in workflow or []]
    except TetherError as exc:
        raise typer.BadParameter(str(exc)) from None
    try:
        replanners = dict(_replanner(spec) for spec in replan or [])
    except TetherError as exc:
        raise typer.BadParameter(str(exc)) from None
    import uvicorn

    from tether.server import create_app

    try:
        app = create_app(settings, workflows=flows, tokens=tokens, replanners=replanners)
    except TetherError as exc:
        raise typer.BadParameter(str(exc)) from None
    where = f"http://{settings.host}:{settings.port}"
    typer.echo(f"tether serve: {where}/ui/runs (API {where}/api/docs) on {settings.store_url}", err=True)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning")


def _replanner(spec: str) -> tuple[str, Any]:
    """``WORKFLOW=module:attribute`` -> (workflow name, the callable)."""
    import importlib
    import os
    import sys

    from tether.errors import ConfigError

    name, _, target = spec.partition("=")
    module, _, attr = target.partition(":")
    if not name or not module or not attr:
        raise ConfigError(f"--replan must be 'WORKFLOW=module:attribute', got {spec!r}")
    if os.getcwd() not in sys.path:  # a project's own module, as for --workflow
        sys.path.insert(0, os.getcwd())
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load replanner {target!r}: {exc}") from exc
    if not callable(fn):
        raise ConfigError(f"replanner {target!r} is not callable")
    return name, fn


def register(app: typer.Typer) -> None:
    app.command()(serve)
