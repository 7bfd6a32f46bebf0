"""The Celery app: one task, ``tether.execute_run(run_id, decision=None)``.

Settings, and why:

* ``acks_late`` + ``reject_on_worker_lost``: a message is acknowledged after its run
  stopped here, so a worker killed mid-run gives it back to the broker (RabbitMQ
  redelivers as soon as the connection drops).
* ``worker_prefetch_multiplier = 1``: a worker holds only the messages it executes; a
  slow run never sits on a message another worker could take.
* No broker setting may cap a step's length. A Redis broker re-delivers a message not
  acknowledged within its ``visibility_timeout``: tether sets it to 30 days, and relies
  on the lease and the sweeper, not on the broker, to recover a run. RabbitMQ closes a
  channel whose delivery stays unacknowledged past ``consumer_timeout`` (30 min by
  default; a message stays unacknowledged for as long as its run executes): the queue is
  declared with ``x-consumer-timeout`` at 30 days (honoured from RabbitMQ 3.11.15 and
  3.12; older servers need ``consumer_timeout`` raised in rabbitmq.conf). Even when a
  broker does re-deliver during a long step, the copy finds the run's lease alive and is
  dropped: the step runs once. Where RabbitMQ closes the channel under a run, Celery
  would stop the worker ("Unrecoverable error: PreconditionFailed"); the worker's
  consumer (:func:`consumer_class`) reconnects instead, the run goes on, and its
  message, already handed back, cannot be acknowledged ("Couldn't ack", harmless).
* The ``threads`` pool: one worker process is one lease holder (host, pid); its threads
  execute several runs at once, each on its own event loop and store connection. For
  CPU-heavy steps run one worker process per core instead of more threads.
* Each pool thread's event loop is uvloop's when it is installed (the ``celery`` extra
  brings it); without it, asyncio's, waiting on ``poll`` rather than ``epoll``: a store driver
  adds and removes a reader around each of its statements (psycopg does), which ``epoll``
  turns into two more system calls each time, and a pool thread's loop watches a handful
  of descriptors, where ``poll`` costs no more per wait.
* One INFO line per run: tether's ("run R: COMPLETED at version N", "message dropped:
  why"). Celery's own per-message lines ("Task … received", "… succeeded in …") say less
  and cost as much again (a visible part of what Celery adds to a short run, see
  ``bench_workers`` in benchmarks/README.md): at ``--loglevel INFO`` they are left out, at
  DEBUG they show. The task's result is one short string ("executed COMPLETED",
  "dropped: why") for the same reason: Celery renders it for every message, results
  backend or not, and a dict costs it several times what a string does.
"""

from __future__ import annotations

import asyncio
import logging
import math
import selectors
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.errors import ConfigError
from tether.workers.dispatch import TASK, Dispatcher
from tether.workers.execute import DRAINING, RunExecutor
from tether.workers.registry import Registry

if TYPE_CHECKING:
    from collections.abc import Callable

    from celery import Celery  # type: ignore[import-untyped]

    from tether.runtime import Event

__all__ = ["LONG", "WorkerConfig", "consumer_class", "create_celery_app", "new_event_loop"]

logger = logging.getLogger(__name__)

LONG = 30 * 24 * 3600
"""Seconds: how long a broker may hold an unacknowledged message (far above any step)."""

PER_MESSAGE_LOGGERS = ("celery.worker.strategy", "celery.app.trace")
"""Celery's loggers of one INFO line per message received and per task succeeded."""


@dataclass(slots=True, kw_only=True)
class WorkerConfig:
    """What a worker process needs besides the broker: the store and how to run."""

    store_url: str
    store_options: dict[str, Any] = field(default_factory=dict)
    registry: Registry = field(default_factory=Registry)
    lease_ttl: float = 30.0
    max_crashes: int = 3
    drain_timeout: float = 10.0
    sweep_interval: float = 2.0
    """Seconds between sweeps (0: this worker never sweeps)."""
    sweep_grace: float = 2.0
    on_event: Callable[[Event], None] | None = None
    """Receives every event of the runs this worker executes (``tether worker`` traces with it)."""

    def __post_init__(self) -> None:
        # checked here, not by the first message: a worker started with a bad setting would
        # take runs and fail each one
        if type(self.max_crashes) is not int or self.max_crashes < 1:
            raise ConfigError(f"max_crashes must be a whole number >= 1, got {self.max_crashes!r}")
        for name, least in (
            ("lease_ttl", None),
            ("drain_timeout", 0),
            ("sweep_interval", 0),
            ("sweep_grace", 0),
        ):
            value = getattr(self, name)
            ok = type(value) in (int, float) and math.isfinite(value)
            if not ok or (value <= 0 if least is None else value < least):
                bound = "> 0" if least is None else ">= 0"
                raise ConfigError(f"{name} must be a number of seconds {bound}, got {value!r}")


def create_celery_app(
    broker_url: str, *, queue: str = "tether", config: WorkerConfig | None = None
) -> Celery:
    """A Celery app for ``broker_url`` whose task executes runs (with ``config``), or only
    sends them (without: submitters and the server)."""
    from tether.settings import broker_url_problem, check_queue_name

    check_queue_name(queue)
    problem = broker_url_problem(broker_url)
    if problem:
        from tether.tools.redact import default_redactor

        raise ConfigError(
            f"broker URL {default_redactor()(broker_url)!r} {problem}: give amqp://host:5672// "
            "(RabbitMQ) or redis://host:6379/0 (Redis)"
        )
    from celery import Celery
    from kombu import Queue  # type: ignore[attr-defined]

    app = Celery("tether", broker=broker_url, set_as_current=False)
    amqp = broker_url.startswith(("amqp://", "amqps://", "pyamqp://"))
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=queue,
        task_queues=[
            Queue(  # type: ignore[no-untyped-call]
                queue,
                routing_key=queue,
                queue_arguments={"x-consumer-timeout": LONG * 1000} if amqp else None,
            )
        ],
        broker_transport_options={"confirm_publish": True} if amqp else {"visibility_timeout": LONG},
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=5,
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_hijack_root_logger=False,
        task_create_missing_queues=True,
    )
    if config is not None:
        app.conf.update(broker_channel_error_retry=True, worker_consumer=consumer_class())
        _install_task(app, queue, config)
    return app


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A pool thread's event loop (see the module docstring): uvloop's where it is
    installed (the ``celery`` extra brings it: a run's statements, broker frames and
    callbacks cost less CPU on it), else asyncio's on ``poll`` where the platform has it."""
    try:
        import uvloop
    except ImportError:
        poll = getattr(selectors, "PollSelector", None)
        return asyncio.new_event_loop() if poll is None else asyncio.SelectorEventLoop(poll())
    return uvloop.new_event_loop()


class _ThreadState(threading.local):
    loop: asyncio.AbstractEventLoop | None = None
    executor: RunExecutor | None = None
    closers: list[Any] | None = None


def _install_task(app: Celery, queue: str, config: WorkerConfig) -> None:
    from celery import signals
    from celery.exceptions import Reject  # type: ignore[import-untyped]

    local = _ThreadState()
    opened: list[tuple[asyncio.AbstractEventLoop, Any]] = []

    def executor() -> tuple[asyncio.AbstractEventLoop, RunExecutor]:
        """Each pool thread keeps one event loop and one open store for all its runs."""
        if local.loop is None or local.executor is None:
            from tether.stores import open_store

            loop = new_event_loop()
            cm = open_store(config.store_url, **config.store_options)
            store = loop.run_until_complete(cm.__aenter__())
            opened.append((loop, cm))
            local.loop = loop
            local.executor = RunExecutor(
                store,
                config.registry,
                lease_ttl=config.lease_ttl,
                max_crashes=config.max_crashes,
                drain_timeout=config.drain_timeout,
                on_event=config.on_event,
            )
        return local.loop, local.executor

    def execute_run(
        run_id: str,
        decision: str | None = None,
        workflow: str | None = None,
        first: dict[str, Any] | None = None,
    ) -> str:
        loop, ex = executor()
        outcome = loop.run_until_complete(
            ex.execute(run_id, decision=decision, workflow=workflow, first=first)
        )
        if outcome.action == "requeue":  # handed back: another worker takes it at once
            raise Reject(outcome.reason, requeue=True)
        result = f"{outcome.action} {outcome.status}" if outcome.status else outcome.action
        return f"{result}: {outcome.reason}" if outcome.reason else result

    app.task(name=TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)(execute_run)
    sweeper: list[Any] = []

    def _start_sweeper(**_: Any) -> None:
        if config.sweep_interval > 0:
            from tether.workers.sweeper import SweeperThread

            thread = SweeperThread(
                config.store_url,
                config.store_options,
                Dispatcher(app, queue=queue),
                interval=config.sweep_interval,
                grace=config.sweep_grace,
            )
            thread.start()
            sweeper.append(thread)

    def _drain(**_: Any) -> None:
        DRAINING.set()  # runs stop at their next checkpoint, lease released
        for thread in sweeper:
            threading.Thread(target=thread.stop, daemon=True).start()

    def _close(**_: Any) -> None:
        for loop, cm in opened:
            try:
                loop.run_until_complete(cm.__aexit__(None, None, None))
            except Exception:  # closing on the way out
                logger.debug("closing a worker store failed", exc_info=True)

    def _quiet(**_: Any) -> None:
        for name in PER_MESSAGE_LOGGERS:
            celery_logger = logging.getLogger(name)
            if celery_logger.getEffectiveLevel() == logging.INFO:
                celery_logger.setLevel(logging.WARNING)

    signals.celeryd_after_setup.connect(_quiet, weak=False)
    signals.worker_ready.connect(_start_sweeper, weak=False)
    signals.worker_shutting_down.connect(_drain, weak=False)
    signals.worker_shutdown.connect(_close, weak=False)


ACK_TIMED_OUT = "delivery acknowledgement on channel"
"""How RabbitMQ words the channel error of its consumer timeout."""


def consumer_class() -> type:
    """Celery's consumer, except that the channel error RabbitMQ raises when a delivery
    stays unacknowledged past its consumer timeout (a long step on a server without
    ``x-consumer-timeout``) counts as a lost connection: reconnect, and let the run go on.
    Any other channel error (a queue declared with other arguments, access refused) stops
    the worker, as Celery does without ``broker_channel_error_retry``."""
    from celery.worker.consumer import Consumer  # type: ignore[import-untyped]

    class TetherConsumer(Consumer):  # type: ignore[misc]
        def on_connection_error_after_connected(self, exc: BaseException) -> None:
            if isinstance(exc, tuple(self.channel_errors)) and ACK_TIMED_OUT not in str(exc):
                raise exc  # as without the retry: "Unrecoverable error", the worker stops
            super().on_connection_error_after_connected(exc)

    return TetherConsumer
