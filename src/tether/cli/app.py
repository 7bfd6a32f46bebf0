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

from tether.cli import agents
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


def _on_store(store: str | None, fn: Callable[[Any], Awaitable[T]]) -> T:
    """Open the configured store, run ``fn(store)``, close it; TetherErrors as one line."""
    url, options = _settings(store)

    async def go() -> T:
        from tether.stores import open_store

        async with open_store(url, **options) as s:
            return await fn(s)

    return _run(go)


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
    crash_in: Annotated[str, typer.Option(help="Step inside which the worker kills itself.")] = "build",
) -> None:
    """Run a 6-step workflow in a worker that is SIGKILLed mid-step, then resume it here."""
    from tether.cli import demo as d

    url, options = _settings(store)
    if crash_in not in d.STEPS:
        raise typer.BadParameter(f"--crash-in must be one of {', '.join(d.STEPS)}")
    console = _console()
    run_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10_000:04d}"
    console.print(f"[bold]tether demo[/] run [cyan]{run_id}[/] on [cyan]{url}[/]")
    console.print(f"1. a worker process runs the workflow and is killed inside step '{crash_in}':")
    proc = d.spawn_worker(url, run_id, crash_in)
    console.print(proc.stdout.rstrip())
    if proc.returncode != -9:
        console.print(f"[red]worker exited with {proc.returncode}, expected SIGKILL[/]\n{proc.stderr}")
        raise typer.Exit(1)
    console.print(f"   worker died: [red]SIGKILL[/] (exit {proc.returncode}) inside '{crash_in}'")

    async def resume() -> None:
        from tether.cli.progress import LiveView
        from tether.runtime import Runner
        from tether.stores import open_store

        async with open_store(url, **options) as s:
            ctx = await s.load_context(run_id)
            if ctx is None:
                raise TetherError(f"nothing was checkpointed for {run_id}")
            console.print("2. the latest checkpoint holds:")
            console.print(f"   version      v{ctx.version} (after step '{ctx.node_id}')")
            console.print(f"   executed     {', '.join(ctx.executed_node_ids)}")
            console.print(f"   messages     {len(ctx.get('messages', []))} restored")
            console.print(f"   state keys   {', '.join(sorted(k for k in ctx if not k.startswith('_')))}")
            console.print("3. resuming in this process (steps already executed are skipped):")
            view = LiveView(d.demo_workflow(), console, plain=True)
            result = await Runner(d.demo_workflow(), s, on_event=view).resume(run_id)
            ran = [h["node"] for h in result.state["execution_history"]]
            console.print(
                f"4. [green]{result.status}[/]: each step ran once ({', '.join(ran)}); "
                f"{len(await s.history(run_id))} checkpoints stored"
            )
            if ran != d.STEPS:
                raise TetherError(f"resume went wrong: steps ran {ran}")

    _run(resume)


@app.command()
def run(
    workflow: Annotated[
        str, typer.Argument(help="module:attribute of a Workflow (or a function returning one).")
    ],
    store: StoreOpt = None,
    run_id: Annotated[str | None, typer.Option(help="Run id (default: generated).")] = None,
    inputs: Annotated[str, typer.Option("--input", help="Initial state as a JSON object.")] = "{}",
    plain: Annotated[bool, typer.Option(help="Print events as lines instead of a live table.")] = False,
) -> None:
    """Start a run of a workflow with a live progress view."""
    data = _json_object(inputs, "--input")
    wf = _workflow(workflow)
    url, options = _settings(store)
    rid = run_id or f"{wf.name}-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10_000:04d}"
    data.setdefault("_origin", {"kind": "workflow", "workflow": workflow})  # for `tether resume RUN`
    _drive(wf, url, options, lambda r: r.start(rid, data), plain=plain, title=f"run {rid}")


@app.command()
def resume(
    target: Annotated[
        str, typer.Argument(help="The run id (or, for old runs, module:attribute of its Workflow).")
    ],
    run_id: Annotated[
        str | None, typer.Argument(help="The run id, when the first argument is a workflow.")
    ] = None,
    store: StoreOpt = None,
    decision: Annotated[
        str | None, typer.Option(help="Answer a pending failure: retry, skip, replan or abort.")
    ] = None,
    answer: agents.AnswerOpt = None,
    script: agents.ScriptOpt = None,
    force: Annotated[bool, typer.Option(help="Take over a lease even if its holder looks alive.")] = False,
    plain: bool = False,
) -> None:
    """Continue a paused or crashed run (a workflow, a deploy or a plan).

    What started the run is recorded in it, so the run id is enough; --answer answers
    the question an agent run waits on, --decision the failure a run paused on.
    """
    agents._check_decision(decision)
    if run_id is None:
        agents.resume_run_id(
            target, store=store, script=script, answer=answer, decision=decision, force=force, plain=plain
        )
        return
    resume_workflow(target, run_id, store=store, decision=decision, force=force, plain=plain)


def resume_workflow(
    workflow: str, run_id: str, *, store: str | None, decision: str | None, force: bool, plain: bool
) -> None:
    """Resume a workflow run with the workflow found at ``module:attribute``."""
    wf = _workflow(workflow)
    url, options = _settings(store)
    _drive(
        wf,
        url,
        options,
        lambda r: r.resume(run_id, decision=decision, force=force),
        plain=plain,
        title=f"resume {run_id}",
        run_id=run_id,
    )


def _workflow(target: str) -> Any:
    from tether.cli.progress import load_workflow

    try:
        return load_workflow(target)
    except TetherError as exc:
        raise typer.BadParameter(str(exc)) from None


def _drive(
    wf: Any,
    url: str,
    options: dict[str, Any],
    call: Any,
    *,
    plain: bool,
    title: str,
    run_id: str | None = None,
) -> None:
    console = _console()
    console.print(f"[bold]{title}[/] on {url}")

    async def go() -> Any:
        from tether.cli.progress import LiveView
        from tether.runtime import Runner
        from tether.stores import open_store

        async with open_store(url, **options) as s:
            view = LiveView(wf, console, plain=plain)
            if run_id is not None and (ctx := await s.load_context(run_id)) is not None:
                view.seed(ctx.get("todo") or {})
            with view:
                return await call(Runner(wf, s, on_event=view))

    result = _run(go)
    console.print(f"status: [bold]{result.status}[/] at version {result.version}")
    if result.report is not None:
        console.print(result.report.render(), highlight=False)
    if str(result.status) in {"FAILED", "CANCELLED"}:
        raise typer.Exit(3)


@app.command()
def report(
    run_id: str, store: StoreOpt = None, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """Show a run's last failure report (seed 004 template, or --json)."""
    from tether.runtime import FailureReport

    url, options = _settings(store)

    async def go() -> dict[str, Any] | None:
        from tether.stores import open_store

        async with open_store(url, **options) as s:
            cp = await s.load(run_id)
            if cp is None:
                raise TetherError(f"run {run_id!r} not found")
            found = cp.state.get("failure_report")
            return found if isinstance(found, dict) else None

    data = _run(go)
    if data is None:
        typer.echo(f"{run_id}: no failure report")
        return
    typer.echo(
        json.dumps(data, indent=2, ensure_ascii=False) if as_json else FailureReport.from_dict(data).render()
    )


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"{what} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise typer.BadParameter(f"{what} must be a JSON object")
    return data


app.command()(agents.deploy)
app.command()(agents.plan)


@app.command()
def runs(
    store: StoreOpt = None,
    status: Annotated[str | None, typer.Option(help="Only runs with this status.")] = None,
    limit: int = 50,
) -> None:
    """List runs, most recently updated first."""
    from rich.table import Table

    from tether.state import RunStatus

    result = _on_store(
        store, lambda s: s.list_runs(status=RunStatus(status.upper()) if status else None, limit=limit)
    )

    table = Table("status", "version", "node", "updated")
    table.add_column("run", no_wrap=True)
    for r in result:
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

    result = _on_store(store, lambda s: s.history(run_id, before=before, limit=limit))

    table = Table("version", "node", "status", "kind", "bytes", "time")
    for h in result:
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

    try:
        st = RunStatus(new_status.upper())
    except ValueError:
        raise typer.BadParameter(f"status must be one of {', '.join(RunStatus)}") from None

    _on_store(store, lambda s: s.set_status(run_id, st))

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
    patch = _json_object(data, "the update")
    result = _on_store(store, lambda s: s.update_state(run_id, patch))

    typer.echo(f"{run_id}: updated, version {result}")


@app.command()
def prune(
    run_id: str,
    keep: Annotated[int, typer.Option(help="Versions to keep.")],
    store: StoreOpt = None,
) -> None:
    """Drop all but the latest KEEP versions of a run (safe with deltas)."""
    result = _on_store(store, lambda s: s.prune(run_id, keep=keep))

    typer.echo(f"{run_id}: removed {result} versions")


@app.command()
def copy(run_id: str, new_run_id: str, store: StoreOpt = None, version: int | None = None) -> None:
    """Fork a run (at VERSION, default latest) into NEW_RUN_ID."""
    _on_store(store, lambda s: s.copy(run_id, new_run_id, version=version))

    typer.echo(f"{new_run_id}: forked from {run_id}")


@app.command()
def delete(run_id: str, store: StoreOpt = None) -> None:
    """Delete a run and all its checkpoints."""
    result = _on_store(store, lambda s: s.delete(run_id))

    typer.echo(f"{run_id}: {'deleted' if result else 'not found'}")


@app.command()
def purge(store: StoreOpt = None) -> None:
    """Delete expired runs now (SQL stores; Redis expires keys by itself)."""
    result = _on_store(store, lambda s: s.purge_expired())

    typer.echo(f"purged {result} expired runs")


@app.command()
def keygen() -> None:
    """Print a new encryption key for TETHER_ENCRYPTION_KEY."""
    from tether.state.serde import generate_key

    typer.echo(generate_key())


def _register_orchestrate() -> None:
    from tether.cli.orchestrate import orchestrate  # its own module: heavy imports stay lazy

    app.command(name="orchestrate")(orchestrate)


_register_orchestrate()


def _register_langgraph() -> None:
    from tether.cli import langgraph  # its own module: LangGraph is imported when the command runs

    langgraph.register(app)


_register_langgraph()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
