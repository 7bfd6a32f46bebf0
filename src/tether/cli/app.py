"""``tether`` command line: the demo, running workflows, and inspecting/operating runs in
a store (``cli/runs.py``).

Every command takes ``--store URL`` (default from ``TETHER_STORE_URL``, else
``sqlite:///.tether/tether.db``). A user's mistake becomes one ``error:`` line and exit
code 1 (``--debug`` shows the traceback); ``run`` and ``resume`` exit with a code per
final status (see ``_common.EXIT_FOR_STATUS``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import typer

from tether.cli import agents
from tether.cli import runs as _runs
from tether.cli._common import (
    EXIT_CTRL_C,
    EXIT_FOR_STATUS,
    STATE,
    ResultJsonOpt,
    StoreOpt,
    console,
    continue_hint,
    on_store,
    print_json,
    progress_console,
    result_json,
    run_async,
    settings,
)
from tether.cli.runs import json_object
from tether.errors import TetherError

app = typer.Typer(
    help="tether: durable execution and context management for long-running agents.",
    no_args_is_help=True,
    add_completion=True,  # tether --install-completion bash|zsh|fish
    pretty_exceptions_enable=False,
)


@app.callback(invoke_without_command=True)
def _main(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at INFO.")] = False,
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
    env_file: Annotated[
        str | None,
        typer.Option(
            "--env-file", help="Read TETHER_* settings from this file (never implicitly from ./.env)."
        ),
    ] = None,
) -> None:
    if version:
        from importlib.metadata import version as installed

        typer.echo(f"tether {installed('tether')}")
        raise typer.Exit(0)
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    STATE["debug"] = debug
    if env_file is not None and not os.path.isfile(env_file):
        raise typer.BadParameter(f"{env_file!r} is not a file", param_hint="--env-file")
    STATE["env_file"] = env_file
    level = logging.DEBUG if debug else logging.INFO if verbose else logging.WARNING
    from tether.tools.redact import install_log_redaction, redact_handlers

    install_log_redaction()  # every record, at every level, and a --debug traceback
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    redact_handlers()  # and records a library builds by hand, on their way to the console


_run = run_async  # the names the other command modules use
_settings = settings
_console = console
_on_store = on_store


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
        from tether.cli.streaming import traced_events
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
            result = await Runner(d.demo_workflow(), s, on_event=traced_events(view)).resume(run_id)
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
    plain: Annotated[
        bool, typer.Option(help="Print events as lines instead of a live table (always when piped).")
    ] = False,
    as_json: ResultJsonOpt = False,
) -> None:
    """Start a run of a workflow with a live progress view.

    Exit code: 0 COMPLETED, 3 FAILED, 4 PAUSED (waits for a decision, an answer or a
    review), 5 CANCELLED, 6 INTERRUPTED (left for resume), 130 Ctrl-C, 1 an error.
    """
    data = json_object(inputs, "--input")
    wf = _workflow(workflow)
    url, options = _settings(store)
    rid = run_id or f"{wf.name}-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10_000:04d}"
    data.setdefault("_origin", {"kind": "workflow", "workflow": workflow})  # for `tether resume RUN`
    _drive(
        wf,
        url,
        options,
        lambda r: r.start(rid, data),
        plain=plain,
        title=f"run {rid}",
        run_id=rid,
        as_json=as_json,
    )


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
    as_json: ResultJsonOpt = False,
) -> None:
    """Continue a paused, interrupted or crashed run (a workflow, a deploy or a plan).

    What started the run is recorded in it, so the run id is enough; --answer answers
    the question an agent run waits on, --decision the failure a run paused on. Exit
    codes as for ``run``.
    """
    agents._check_decision(decision)
    if run_id is None:
        agents.resume_run_id(
            target,
            store=store,
            script=script,
            answer=answer,
            decision=decision,
            force=force,
            plain=plain,
            as_json=as_json,
        )
        return
    resume_workflow(target, run_id, store=store, decision=decision, force=force, plain=plain, as_json=as_json)


def resume_workflow(
    workflow: str,
    run_id: str,
    *,
    store: str | None,
    decision: str | None,
    force: bool,
    plain: bool,
    as_json: bool = False,
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
        seed=True,
        as_json=as_json,
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
    run_id: str,
    seed: bool = False,
    as_json: bool = False,
) -> None:
    out = progress_console() if as_json else _console()
    out.print(f"{title} on {url}", markup=False)

    async def go() -> Any:
        from tether.cli.progress import LiveView
        from tether.cli.streaming import traced_events, traced_workflow
        from tether.runtime import Runner
        from tether.stores import open_store

        asyncio.get_running_loop().set_default_executor(_NoWaitExecutor())
        async with open_store(url, **options) as s:
            view = LiveView(wf, out, plain=plain or not out.is_terminal)
            if seed and (ctx := await s.load_context(run_id)) is not None:
                from tether.state.reserved import runtime_get

                view.seed(runtime_get(ctx, "todo", {}))
            with view:
                return await call(
                    Runner(traced_workflow(wf), s, on_event=traced_events(view, workflow=wf.name))
                )

    try:
        result = _run(go)
    except KeyboardInterrupt:
        _where(url, options, run_id)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_CTRL_C)  # a sync step's thread cannot be stopped: do not wait for it

    status = str(result.status)
    if as_json:
        print_json(result_json(run_id, result))
        raise typer.Exit(EXIT_FOR_STATUS.get(status, 1))
    from tether.state.reserved import runtime_get

    out.print(f"status: {status} at version {result.version}", markup=False)
    if result.report is not None:
        out.print(result.report.render(), markup=False)
    reason = runtime_get(result.state, "pause_reason")
    if reason and status in ("PAUSED", "INTERRUPTED"):
        out.print(f"reason: {reason}", markup=False)
    hint = continue_hint(run_id, result.state, status)
    if hint:
        out.print(f"continue with: {hint}", markup=False)
    raise typer.Exit(EXIT_FOR_STATUS.get(status, 1))


class _NoWaitExecutor(ThreadPoolExecutor):
    """The loop's default executor, whose shutdown does not wait for a step still running
    in a thread (after Ctrl-C the run is already committed INTERRUPTED)."""

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait=False, cancel_futures=cancel_futures)


def _where(url: str, options: dict[str, Any], run_id: str) -> None:
    """After Ctrl-C: where the run was left and the command that continues it."""

    async def look() -> tuple[Any, Any]:
        from tether.stores import open_store

        async with open_store(url, **options) as s:
            return await s.get_run(run_id), await s.load(run_id)

    try:
        info, cp = run_async(look)
    except BaseException:  # a second Ctrl-C, a store away: say what we know
        info = cp = None
    if info is None or cp is None:
        typer.echo(f"\ninterrupted: run {run_id} was not checkpointed; nothing to resume", err=True)
        return
    after = f" after step '{info.node_id}'" if info.node_id else ""
    hint = continue_hint(run_id, cp.state, "INTERRUPTED")
    typer.echo(f"\ninterrupted: run {run_id} left {info.status} at version {info.version}{after}", err=True)
    typer.echo(f"continue with: {hint}", err=True)


@app.command()
def report(
    run_id: str, store: StoreOpt = None, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """Show a run's last failure report (or --json)."""
    from tether.errors import RunNotFound
    from tether.runtime import FailureReport
    from tether.state.reserved import runtime_get

    url, options = _settings(store)

    async def go() -> dict[str, Any] | None:
        from tether.stores import open_store

        async with open_store(url, **options) as s:
            cp = await s.load(run_id)
            if cp is None:
                raise RunNotFound(run_id)
            found = runtime_get(cp.state, "failure_report")
            return found if isinstance(found, dict) else None

    data = _run(go)
    if as_json:
        typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return
    if data is None:
        typer.echo(f"{run_id}: no failure report")
        return
    typer.echo(FailureReport.from_dict(data).render())


app.command()(agents.deploy)
app.command()(agents.plan)
app.command()(agents.approve)
app.command()(agents.decide)


def _register_rekey() -> None:
    from tether.cli import rekey

    app.command()(rekey.rekey)


_register_rekey()


@app.command()
def keygen() -> None:
    """Print a new encryption key for TETHER_ENCRYPTION_KEY."""
    from tether.state.serde import generate_key

    typer.echo(generate_key())


_runs.register(app)


def _register_orchestrate() -> None:
    from tether.cli.orchestrate import orchestrate  # its own module: heavy imports stay lazy

    app.command(name="orchestrate")(orchestrate)


_register_orchestrate()


def _register_serve() -> None:
    from tether.cli import serve as serve_cmd  # fastapi and uvicorn load only when it runs

    serve_cmd.register(app)


_register_serve()


def _register_worker() -> None:
    from tether.cli import worker  # Celery loads only when a worker starts or a run is submitted

    worker.register(app)


_register_worker()


def _register_langgraph() -> None:
    from tether.cli import langgraph  # its own module: LangGraph is imported when the command runs

    langgraph.register(app)


_register_langgraph()


def _register_prompts() -> None:
    from tether.cli import prompts  # tether prompt / tether replay: a run's recorded model calls

    prompts.register(app)
    from tether.cli import evals  # tether eval: what compression keeps of your own runs

    evals.register(app)


_register_prompts()


def main() -> None:
    """The ``tether`` command: a usage mistake is one ``error:`` line and exit 2 (no boxed
    panel), so it reads the same in a terminal, a CI log and a script's captured stderr."""
    try:
        code = app(prog_name="tether", standalone_mode=False)
    except typer.Abort:  # Ctrl-C at a prompt
        typer.echo("aborted", err=True)
        sys.exit(EXIT_CTRL_C)
    except typer.TyperException as exc:  # click's usage errors, as typer ships them
        render = getattr(exc, "format_message", None)
        message = " ".join((render() if callable(render) else str(exc)).split())
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        typer.secho(f"error: {message}{hint}", fg=typer.colors.RED, err=True)
        sys.exit(int(getattr(exc, "exit_code", 2)))
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
