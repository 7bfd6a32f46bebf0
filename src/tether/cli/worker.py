"""``tether worker`` and ``tether submit``: runs executed by Celery workers.

``tether worker`` consumes one queue of a broker (RabbitMQ ``amqp://`` or Redis
``redis://``) and executes the runs it names on the shared store; ``tether submit``
stores a run and puts it on that queue, printing its id at once.
"""

from __future__ import annotations

import os
import socket
import uuid
from typing import Annotated, Any

import typer

BrokerOpt = Annotated[
    str | None,
    typer.Option("--broker", help="Broker URL: amqp://… or redis://… (default: TETHER_BROKER_URL)."),
]
QueueOpt = Annotated[str, typer.Option("--queue", "-Q", help="The queue to consume.")]
WorkflowOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--workflow", "-w", help="[NAME=]module:attribute of a Workflow this worker may run (repeat)."
    ),
]


def _broker(broker: str | None) -> str:
    from tether.cli._common import EXIT_USAGE, STATE, fail
    from tether.errors import TetherError
    from tether.settings import broker_url_problem, load_settings

    if broker:
        url: str | None = broker
    else:
        try:
            url = load_settings(_env_file=STATE.get("env_file")).broker_url  # (checked there)
        except TetherError as exc:
            if STATE.get("debug"):
                raise
            raise fail(str(exc), EXIT_USAGE) from None  # a bad setting, like a bad flag: exit 2
    if not url:
        raise typer.BadParameter("give --broker URL (amqp://… or redis://…) or set TETHER_BROKER_URL")
    problem = broker_url_problem(url)
    if problem:  # before anything is stored or started
        raise typer.BadParameter(f"--broker {problem}: give amqp://… (RabbitMQ) or redis://… (Redis)")
    from tether.tools.redact import _url_passwords, default_redactor

    default_redactor().add(*_url_passwords(url))  # a broker password never reaches a log line
    return url


def _queue(queue: str) -> str:
    from tether.settings import queue_name_problem

    problem = queue_name_problem(queue)
    if problem:  # before anything is stored or started
        raise typer.BadParameter(f"--queue {problem}: give a name such as tether")
    return queue


def _registry(workflows: list[str] | None) -> Any:
    from tether.errors import ConfigError
    from tether.workers import Registry

    try:
        return Registry(workflows or [], model=_model_factory)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from None


def _model_factory(spec: Any) -> Any:
    """A bundled agent's model: the worker's TETHER_MODEL_* environment (as `tether deploy`
    reads it), the run's ``model`` input (provider, model, endpoint, temperature) winning."""
    from tether.models import LLMConfig, create_model

    wanted = {k: spec.get(k) for k in ("provider", "model", "endpoint", "temperature")}
    return create_model(LLMConfig.from_env(os.environ, **wanted))


def worker(
    store: Annotated[
        str | None, typer.Option("--store", help="Store URL (default: TETHER_STORE_URL).")
    ] = None,
    broker: BrokerOpt = None,
    concurrency: Annotated[int, typer.Option(help="Runs executed at once by this process (threads).")] = 1,
    queue: QueueOpt = "tether",
    workflow: WorkflowOpt = None,
    lease: Annotated[
        float, typer.Option(help="Lease seconds: a dead worker's run is taken over after it.")
    ] = 30.0,
    max_crashes: Annotated[
        int, typer.Option(help="Times a step may kill its worker before the run ends FAILED.")
    ] = 3,
    drain_timeout: Annotated[
        float, typer.Option(help="On SIGTERM, seconds to let the current step finish before stopping it.")
    ] = 10.0,
    sweep_interval: Annotated[
        float, typer.Option(help="Seconds between sweeps for runs without a message (0: never).")
    ] = 2.0,
    sweep_grace: Annotated[
        float, typer.Option(help="A PENDING or INTERRUPTED run is swept once unchanged this long.")
    ] = 2.0,
    loglevel: Annotated[str, typer.Option(help="Celery's log level.")] = "INFO",
    events: Annotated[bool, typer.Option("--events/--no-events", help="Send task events (Flower).")] = False,
) -> None:
    """Execute runs from a broker queue: resumes the runs of dead workers by itself."""
    from tether.cli._common import settings
    from tether.workers.app import WorkerConfig, create_celery_app

    _queue(queue)
    if concurrency < 1:
        raise typer.BadParameter("--concurrency must be >= 1")
    if lease <= 0:
        raise typer.BadParameter("--lease must be > 0 seconds")
    if max_crashes < 1:
        raise typer.BadParameter("--max-crashes must be >= 1")
    for flag, seconds in (
        ("--drain-timeout", drain_timeout),
        ("--sweep-interval", sweep_interval),
        ("--sweep-grace", sweep_grace),
    ):
        if not seconds >= 0:  # (NaN too)
            raise typer.BadParameter(f"{flag} must be >= 0 seconds")
    url, options = settings(store)
    config = WorkerConfig(
        store_url=url,
        store_options=options,
        registry=_registry(workflow),
        lease_ttl=lease,
        max_crashes=max_crashes,
        drain_timeout=drain_timeout,
        sweep_interval=sweep_interval,
        sweep_grace=sweep_grace,
        on_event=_tracer(),
    )
    broker_url = _broker(broker)
    _reachable(url, options)
    app = create_celery_app(broker_url, queue=queue, config=config)
    argv = [
        "worker",
        "--pool=threads",
        f"--concurrency={concurrency}",
        f"--queues={queue}",
        f"--loglevel={loglevel}",
        f"--hostname=tether-{os.getpid()}-{uuid.uuid4().hex[:4]}@{socket.gethostname()}",
        "--without-mingle",
        "--without-gossip",
        *(["--task-events"] if events else []),
    ]
    app.worker_main(argv)


def _reachable(url: str, options: dict[str, Any]) -> None:
    """Open the store once before taking any message, so that a worker whose store is away
    or mistyped exits at once, saying why (a supervisor restarts it), rather than report
    ready and fail every run it takes."""
    from tether.cli._common import run_async

    async def go() -> None:
        from tether.stores import open_store

        async with open_store(url, **options):
            pass

    run_async(go)


def _tracer() -> Any:
    """A RunTracer's ``on_event`` when the standard OTEL_* variables turn tracing on."""
    from tether.cli.streaming import run_tracer

    tracer = run_tracer()
    return None if tracer is None else tracer.on_event


def submit(
    workflow: Annotated[str, typer.Argument(help="The registered name of the workflow to run.")],
    store: Annotated[
        str | None, typer.Option("--store", help="Store URL (default: TETHER_STORE_URL).")
    ] = None,
    broker: BrokerOpt = None,
    queue: Annotated[
        str | None,
        typer.Option(
            "--queue", "-Q", help="The queue to send to (default: tether; with --resend, the run's own)."
        ),
    ] = None,
    inputs: Annotated[str, typer.Option("--input", help="Initial state as a JSON object.")] = "{}",
    run_id: Annotated[str | None, typer.Option(help="Run id (default: generated).")] = None,
    resend: Annotated[
        bool,
        typer.Option(
            help="Have the workers continue a stored run (--run-id): a message again, or a "
            "paused run resumed; refused, saying why, when every worker would drop it."
        ),
    ] = False,
    decision: Annotated[
        str | None, typer.Option(help="With --resend: the decision for a run waiting on a failure.")
    ] = None,
    register: WorkflowOpt = None,
) -> None:
    """Store a run of WORKFLOW and put it on the broker; prints the run id at once."""
    from tether.cli._common import on_store
    from tether.cli.runs import json_object
    from tether.workers import Dispatcher
    from tether.workers import submit as submit_run

    data = json_object(inputs, "--input")
    dispatcher = Dispatcher.from_url(_broker(broker), queue=_queue("tether" if queue is None else queue))
    registry = _registry(register) if register else None
    try:
        if resend:
            if not run_id:
                raise typer.BadParameter("--resend needs --run-id")
            on_store(store, lambda st: _resend(st, dispatcher, run_id, decision, queue))
            typer.echo(run_id)
            return
        rid = on_store(
            store,
            lambda st: submit_run(
                st, dispatcher, workflow, data, run_id=run_id, registry=registry, queue=dispatcher.queue
            ),
        )
    finally:
        dispatcher.close()
    typer.echo(rid)


async def _resend(store: Any, dispatcher: Any, run_id: str, decision: str | None, queue: str | None) -> None:
    """Send a run's message again, as the server's resume does: to the run's own queue
    unless ``queue`` is given (another pool's workers may not have its workflow), and a
    PAUSED run handed to the workers (``hand_to_workers``). A message every worker would drop
    (a mistyped id, a finished run, a failed one without a decision, one another worker
    holds) is refused, saying why, rather than its id printed as if it were on its way."""
    from tether.cli._common import fail
    from tether.state import RunStatus
    from tether.workers import QUEUE_KEY, hand_to_workers
    from tether.workers.execute import nothing_to_do

    loaded = await store.load_run(run_id)
    if loaded is None:
        raise fail(f"no run {run_id!r} in the store (check --run-id and --store); nothing sent")
    info, ctx = loaded
    why = nothing_to_do(info, ctx, decision)
    if why is not None and not (info.status is RunStatus.PAUSED and decision is None):
        hint = " (give --decision)" if info.status is RunStatus.FAILED else ""
        raise fail(
            f"run {run_id!r} is {info.status}: a worker would drop its message, {why}{hint}; nothing sent"
        )
    own = ctx.get(QUEUE_KEY)
    target = queue if queue is not None else (own if isinstance(own, str) and own else None)
    await hand_to_workers(store, dispatcher, run_id, decision=decision, queue=target, loaded=loaded)


def register(app: typer.Typer) -> None:
    app.command()(worker)
    app.command(name="submit")(submit)


__all__ = ["register", "submit", "worker"]
