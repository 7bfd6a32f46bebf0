"""``tether serve``: the HTTP API and the dashboard (needs the ``server`` extra)."""

from __future__ import annotations

import errno
import socket
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
    from tether.cli._common import EXIT_MISSING_EXTRA, STATE, fail, run_async
    from tether.cli._common import settings as base_settings

    try:
        import uvicorn

        from tether.server.config import SCOPES, is_loopback, load_server_settings
        from tether.server.config import new_token as make_token
    except ImportError as exc:  # fastapi/uvicorn missing
        raise fail(
            f"tether serve needs the server extra: pip install 'tether[server]' (missing: {exc.name})",
            EXIT_MISSING_EXTRA,
        ) from None

    if new_token:
        chosen = next((s for s in SCOPES if s == scope), None)
        if chosen is None:
            raise typer.BadParameter(f"--scope must be one of {', '.join(SCOPES)}, not {scope!r}")
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
    from tether.errors import TetherError

    try:
        settings = load_server_settings(STATE["env_file"], **overrides)
        tokens = settings.tokens()
    except TetherError as exc:
        raise fail(str(exc), EXIT_USAGE_SETTING) from None
    url, options = base_settings(settings.store_url)  # the key, TTLs: checked now, not at first write
    if not tokens and not is_loopback(settings.host):
        raise fail(
            f"refusing to listen on {settings.host} without tokens: anyone who can reach it could read "
            "and change every run. Configure tokens (tether serve --new-token) or listen on 127.0.0.1.",
            EXIT_USAGE_SETTING,
        )
    from tether.cli.progress import load_workflow

    try:
        flows = [load_workflow(target) for target in workflow or []]
        replanners = dict(_replanner(spec) for spec in replan or [])
    except TetherError as exc:
        raise typer.BadParameter(str(exc)) from None

    async def probe() -> None:  # an unreachable store or a wrong key: one line now, not a traceback later
        from tether.stores import open_store

        async with open_store(url, **options):
            pass

    run_async(probe)
    sock = _bind(settings.host, settings.port)
    from tether.server import create_app

    try:
        app = create_app(
            settings, workflows=flows, tokens=tokens, replanners=replanners, store_options=options
        )
    except TetherError as exc:
        sock.close()
        raise typer.BadParameter(str(exc)) from None
    bound = sock.getsockname()[1]
    shown = f"[{settings.host}]" if ":" in settings.host else settings.host
    where = f"http://{shown}:{bound}"
    typer.echo(f"tether serve: {where}/ui/runs (API {where}/api/docs) on {url}", err=True)
    if settings.host in ("0.0.0.0", "::") and not settings.hosts():
        typer.echo(
            "note: requests are answered only for loopback names; set TETHER_ALLOWED_HOSTS to the "
            "name clients use (see docs/server.md)",
            err=True,
        )
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    server.run(sockets=[sock])


EXIT_USAGE_SETTING = 2
"""A setting or flag with a bad value: the same code as a malformed command line."""


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything is printed: a busy port is one error line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        from tether.cli._common import fail

        if exc.errno == errno.EADDRINUSE:
            raise fail(
                f"port {port} on {host} is already in use (another tether serve?); choose another with "
                "--port or TETHER_PORT",
            ) from None
        raise fail(f"cannot listen on {host}:{port}: {exc.strerror}; check --host and --port") from None
    sock.set_inheritable(True)
    return sock


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
