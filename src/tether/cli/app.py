"""``tether`` command line: the demo, and inspecting/operating runs in a store.

Every command takes ``--store URL`` (default from ``TETHER_STORE_URL``, else
``sqlite:///.tether/tether.db``). TetherErrors become a one-line message and exit
code 1; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer

from tether.errors import TetherError

app = typer.Typer(
    help="tether: durable execution and context management for long-running agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

T = TypeVar("T")
StoreOpt = Annotated[
    str | None, typer.Option("--store", help="Store URL (default: TETHER_STORE_URL or SQLite).")
]
_state: dict[str, bool] = {"debug": False}


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at INFO.")] = False,
) -> None:
    _state["debug"] = debug
    level = logging.DEBUG if debug else logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


def _run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    try:
        return asyncio.run(coro_fn())  # type: ignore[arg-type]
    except TetherError as exc:
        if _state["debug"]:
            raise
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from None


def _settings(store: str | None) -> tuple[str, dict[str, Any]]:
    from tether.settings import Settings

    settings = Settings() if store is None else Settings(store_url=store)
    return settings.store_url, settings.store_options()


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False)


@app.command()
def demo(
    store: StoreOpt = None,
    crash_in: Annotated[str, typer.Option(help="Node inside which the worker kills itself.")] = "build",
) -> None:
    """Run a 6-node workflow in a worker that is SIGKILLed mid-node, then resume it here."""
    from tether.cli import demo as d

    url, options = _settings(store)
    if crash_in not in {n.id for n in d.NODES}:
        raise typer.BadParameter(f"--crash-in must be one of {', '.join(n.id for n in d.NODES)}")
    console = _console()
    run_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10_000:04d}"
    console.print(f"[bold]tether demo[/] run [cyan]{run_id}[/] on [cyan]{url}[/]")
    console.print(f"1. worker process runs the workflow and is killed inside node '{crash_in}':")
    proc = d.spawn_worker(url, run_id, crash_in)
    console.print(proc.stdout.rstrip())
    if proc.returncode != -9:
        console.print(f"[red]worker exited with {proc.returncode}, expected SIGKILL[/]\n{proc.stderr}")
        raise typer.Exit(1)
    console.print(f"   worker died: [red]SIGKILL[/] (exit {proc.returncode}) while running '{crash_in}'")

    async def resume() -> None:
        from tether.stores import open_store

        async with open_store(url, **options) as s:
            ctx = await s.load_context(run_id)
            if ctx is None:
                raise TetherError(f"nothing was checkpointed for {run_id}")
            console.print("2. resumed from the latest checkpoint:")
            console.print(f"   version      v{ctx.version} (after node '{ctx.node_id}')")
            console.print(f"   executed     {', '.join(ctx.executed_node_ids)}")
            console.print(f"   messages     {len(ctx.get('messages', []))} restored")
            console.print(f"   state keys   {', '.join(sorted(ctx.keys()))}")
            console.print("3. continuing, skipping what already ran:")

            def report(node: d.Node, version: int) -> None:
                console.print(f"  resumed: {node.id:<10} done, checkpoint v{version}")

            await d.run_nodes(s, ctx, on_step=report)
            final = await s.load(run_id)
            assert final is not None
            ran = [h["node"] for h in final.state["execution_history"]]
            console.print(
                f"4. [green]{await s.get_status(run_id)}[/]: each node ran once "
                f"({', '.join(ran)}); {len(await s.history(run_id))} checkpoints stored"
            )
            if sorted(ran) != sorted(n.id for n in d.NODES) or len(ran) != len(set(ran)):
                raise TetherError(f"resume went wrong: nodes ran {ran}")

    _run(resume)


@app.command("demo-worker", hidden=True)
def demo_worker(store_url: str, run_id: str, crash_in: Annotated[str, typer.Option()] = "build") -> None:
    from tether.cli import demo as d

    _, options = _settings(store_url)
    _run(lambda: d.run_worker(store_url, run_id, crash_in, options))


@app.command()
def runs(
    store: StoreOpt = None,
    status: Annotated[str | None, typer.Option(help="Only runs with this status.")] = None,
    limit: int = 50,
) -> None:
    """List runs, most recently updated first."""
    from rich.table import Table

    from tether.state import RunStatus

    url, options = _settings(store)

    async def go() -> list[Any]:
        from tether.stores import open_store

        async with open_store(url, **options) as s:
            return await s.list_runs(status=RunStatus(status.upper()) if status else None, limit=limit)

    table = Table("status", "version", "node", "updated")
    table.add_column("run", no_wrap=True)
    for r in _run(go):
        table.add_row(
            str(r.status),
            str(r.version),
            r.node_id or "",
            f"{r.updated_at:%Y-%m-%d %H:%M:%S}",
            r.run_id,
        )
    _console().print(table)


@app.command()
def show(run_id: str, store: StoreOpt = None, version: int | None = None) -> None:
    """Print a run's snapshot (or one version's checkpoint) as JSON."""
    url, options = _settings(store)

    async def go() -> dict[str, Any]:
        from tether.stores import open_store

        async with open_store(url, **options) as s:
            if version is None:
                snap = await s.snapshot(run_id)
                if snap is None:
                    raise TetherError(f"run {run_id!r} not found")
                return {
                    "run_id": snap.run_id,
                    "status": str(snap.status),
                    "version": snap.version,
                    "current_node_id": snap.current_node_id,
                    "current_node_name": snap.current_node_name,
                    "timestamp": snap.timestamp.isoformat(),
                    "state": snap.state,
                }
            cp = await s.load(run_id, version)
            if cp is None:
                raise TetherError(f"version {version} of run {run_id!r} not found")
            return {
                "run_id": run_id,
                "version": cp.version,
                "node_id": cp.node_id,
                "state": cp.state,
            }

    typer.echo(json.dumps(_run(go), indent=2, default=_json_default, ensure_ascii=False))


def _json_default(obj: Any) -> Any:
    if isinstance(obj, bytes):
        return {"$bytes": len(obj)}
    return str(obj)


@app.command()
def history(run_id: str, store: StoreOpt = None, limit: int = 20, before: int | None = None) -> None:
    """List a run's checkpoints, newest first."""
    from rich.table import Table

    url, options = _settings(store)

    async def go() -> list[Any]:
        from tether.stores import open_store

        async with open_store(url, **options) as s:
            return await s.history(run_id, before=before, limit=limit)

    table = Table("version", "node", "status", "kind", "bytes", "time")
    for h in _run(go):
        table.add_row(
            str(h.version),
            h.node_id or "",
            str(h.status),
            h.kind,
            str(h.size),
            f"{h.timestamp:%H:%M:%S.%f}",
        )
    _console().print(table)


@app.command()
def status(run_id: str, new_status: str, store: StoreOpt = None) -> None:
    """Set a run's status (PAUSED to review and update it, RUNNING, CANCELLED…)."""
    from tether.state import RunStatus

    url, options = _settings(store)
    try:
        st = RunStatus(new_status.upper())
    except ValueError:
        raise typer.BadParameter(f"status must be one of {', '.join(RunStatus)}") from None

    async def go() -> None:
        from tether.stores import open_store

        async with open_store(url, **options) as s:
            await s.set_status(run_id, st)

    _run(go)
    typer.echo(f"{run_id}: {st}")


@app.command()
def update(
    run_id: str,
    data: Annotated[
        str, typer.Argument(help='JSON object merged through the reducers, e.g. \'{"goal": "x"}\'')
    ],
    store: StoreOpt = None,
) -> None:
    """Merge a JSON update into a PAUSED run's state."""
    try:
        patch = json.loads(data)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not JSON: {exc}") from None
    if not isinstance(patch, dict):
        raise typer.BadParameter("the update must be a JSON object")
    url, options = _settings(store)

    async def go() -> int:
        from tether.stores import open_store

        async with open_store(url, **options) as s:
            return await s.update_state(run_id, patch)

    typer.echo(f"{run_id}: updated, version {_run(go)}")


@app.command()
def prune(
    run_id: str,
    keep: Annotated[int, typer.Option(help="Versions to keep.")],
    store: StoreOpt = None,
) -> None:
    """Drop all but the latest KEEP versions of a run (safe with deltas)."""
    url, options = _settings(store)

    async def go() -> int:
        from tether.stores import open_store

        async with open_store(url, **options) as s:
            return await s.prune(run_id, keep=keep)

    typer.echo(f"{run_id}: removed {_run(go)} versions")


@app.command()
def copy(run_id: str, new_run_id: str, store: StoreOpt = None, version: int | None = None) -> None:
    """Fork a run (at VERSION, default latest) into NEW_RUN_ID."""
    url, options = _settings(store)

    async def go() -> int:
        from tether.stores import open_store

        async with open_store(url, **options) as s:
            return await s.copy(run_id, new_run_id, version=version)

    _run(go)
    typer.echo(f"{new_run_id}: forked from {run_id}")


@app.command()
def delete(run_id: str, store: StoreOpt = None) -> None:
    """Delete a run and all its checkpoints."""
    url, options = _settings(store)

    async def go() -> bool:
        from tether.stores import open_store

        async with open_store(url, **options) as s:
            return await s.delete(run_id)

    typer.echo(f"{run_id}: {'deleted' if _run(go) else 'not found'}")


@app.command()
def purge(store: StoreOpt = None) -> None:
    """Delete expired runs now (SQL stores; Redis expires keys by itself)."""
    url, options = _settings(store)

    async def go() -> int:
        from tether.stores import open_store

        async with open_store(url, **options) as s:
            return await s.purge_expired()

    typer.echo(f"purged {_run(go)} expired runs")


@app.command()
def keygen() -> None:
    """Print a new encryption key for TETHER_ENCRYPTION_KEY."""
    from tether.state.serde import generate_key

    typer.echo(generate_key())


def main() -> None:
    app()


if __name__ == "__main__":
    main()
