"""Putting runs on the broker: :func:`submit` and the :class:`Dispatcher`.

A run is created in the store (PENDING, no lease) *before* its message is sent. If the
broker is down the caller gets :class:`BrokerUnavailable` and the run stays PENDING in
the store, where the sweeper finds it and enqueues it once the broker answers again:
nothing is lost, and nothing is half made.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.errors import RunExists, RunNotFound, TetherError, VersionConflict
from tether.runtime.lease import check_lease
from tether.settings import check_queue_name
from tether.state import ExecutionContext, RunInfo, RunStatus
from tether.state.reserved import check_user_keys, runtime_get, runtime_update
from tether.stores.base import CheckpointStore
from tether.workers.registry import QUEUE_KEY, WORKFLOW_KEY, Registry

if TYPE_CHECKING:
    from celery import Celery  # type: ignore[import-untyped]

logger = logging.getLogger(__name__)

__all__ = [
    "FIRST_STATE_BYTES",
    "TASK",
    "BrokerUnavailable",
    "Dispatcher",
    "first_state",
    "hand_to_workers",
    "store_for_message",
    "store_pending",
    "submit",
]

TASK = "tether.execute_run"
"""The Celery task every message names: a run id, and hints (a decision, the workflow and
first state of a run stored ready to start)."""

FIRST_STATE_BYTES = 16 * 1024
"""A run's first state rides on its message up to this size (as JSON); a bigger one is read
from the store by the worker."""


class BrokerUnavailable(TetherError):
    """The broker did not take a message (down, unreachable, refused the publish)."""

    def __init__(
        self, run_id: str, broker: str, error: BaseException, *, decision: str | None = None
    ) -> None:
        why = f"({type(error).__name__}: {error})"
        if decision:  # a decision travels on its message only: the run still waits for it
            super().__init__(
                f"the decision {decision!r} for run {run_id!r} could not be sent to the broker {broker} "
                f"{why}. Nothing changed: the run still waits for a decision; send it again once the "
                "broker answers."
            )
        else:
            super().__init__(
                f"run {run_id!r} is stored but its message could not be sent to the broker {broker} "
                f"{why}. The run waits in the store: a worker's sweeper enqueues it once the broker "
                f"answers, or send it again with `tether submit --run-id {run_id} --resend`."
            )
        self.run_id = run_id


class Dispatcher:
    """Sends ``tether.execute_run`` messages to one queue of one broker."""

    def __init__(self, app: Celery, *, queue: str = "tether") -> None:
        self.app = app
        self.queue = queue
        self._lock = threading.Lock()
        self._conn: Any = None
        self._producer: Any = None

    @classmethod
    def from_url(cls, broker_url: str, *, queue: str = "tether") -> Dispatcher:
        from tether.workers.app import create_celery_app

        return cls(create_celery_app(broker_url, queue=queue), queue=queue)

    @property
    def broker(self) -> str:
        from tether.tools.redact import default_redactor

        return default_redactor()(str(self.app.conf.broker_url))

    def send(
        self,
        run_id: str,
        *,
        decision: str | None = None,
        queue: str | None = None,
        workflow: str | None = None,
        first: Mapping[str, Any] | None = None,
    ) -> None:
        """Publish one message (blocking; confirmed by RabbitMQ before it returns).

        ``workflow`` names the workflow of a run stored ready to start (its TODO list made
        by the submitter); ``first``, the state it was stored with (:func:`first_state`):
        the worker then takes the run without reading it first, in a write that lands only
        while the run is still PENDING at that first version (else it reads the run)."""
        with self._lock:  # one connection, used by one thread at a time
            try:
                if self._producer is None:
                    self._conn = self.app.connection_for_write()
                    self._producer = self.app.amqp.Producer(self._conn)
                self.app.send_task(
                    TASK,
                    args=[run_id],
                    kwargs={
                        **({"decision": decision} if decision else {}),
                        **({"workflow": workflow} if workflow else {}),
                        **({"first": first} if first is not None and workflow else {}),
                    },
                    queue=queue or self.queue,
                    producer=self._producer,
                    retry=True,
                    retry_policy={"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5},
                )
            except Exception as exc:  # kombu's OperationalError, a socket error, a refused publish
                self._drop_connection()
                raise BrokerUnavailable(run_id, self.broker, exc, decision=decision) from exc

    async def enqueue(
        self,
        run_id: str,
        *,
        decision: str | None = None,
        queue: str | None = None,
        workflow: str | None = None,
        first: Mapping[str, Any] | None = None,
    ) -> None:
        """:meth:`send` from async code (in a thread: a publish blocks)."""
        await asyncio.to_thread(
            self.send, run_id, decision=decision, queue=queue, workflow=workflow, first=first
        )

    def waiting(self, queue: str | None = None) -> int:
        """Messages ready in the queue (not counting those being executed)."""
        name = queue or self.queue
        with self.app.connection_for_write() as conn:
            try:
                ok = conn.default_channel.queue_declare(queue=name, passive=True)
            except Exception as exc:  # a queue never declared (or an empty Redis list) holds nothing
                if "NOT_FOUND" in str(exc) or "404" in str(exc) or "no queue" in str(exc).lower():
                    return 0
                raise
            return int(ok.message_count)

    def purge(self, queue: str | None = None) -> int:
        """Drop every waiting message of the queue (tests, and a queue filled by mistake)."""
        with self.app.connection_for_write() as conn:
            return int(conn.default_channel.queue_purge(queue or self.queue) or 0)

    def close(self) -> None:
        """Close the broker connection this dispatcher opened."""
        with self._lock:
            self._drop_connection()
        self.app.close()

    def _drop_connection(self) -> None:
        conn, self._conn, self._producer = self._conn, None, None
        if conn is not None:
            try:
                conn.release()
            except Exception:  # already broken: nothing to release
                logger.debug("closing the broker connection failed", exc_info=True)


async def store_pending(
    store: CheckpointStore,
    workflow: str,
    inputs: Mapping[str, Any] | None = None,
    *,
    run_id: str | None = None,
    registry: Registry | None = None,
    queue: str = "tether",
) -> str:
    """Store a new run PENDING (what :func:`submit` does before it sends the message);
    returns its id. Raises :class:`~tether.errors.RunExists` for a run id already stored."""
    rid, _ = await store_for_message(store, workflow, inputs, run_id=run_id, registry=registry, queue=queue)
    return rid


async def store_for_message(
    store: CheckpointStore,
    workflow: str,
    inputs: Mapping[str, Any] | None = None,
    *,
    run_id: str | None = None,
    registry: Registry | None = None,
    queue: str = "tether",
) -> tuple[str, dict[str, Any] | None]:
    """:func:`store_pending`, returning also the state its message may carry
    (:func:`first_state`; None when the run is not ready to start or the worker is to read
    it): what :func:`submit` sends with :meth:`Dispatcher.send`."""
    data = dict(inputs or {})
    check_user_keys(data, where="the run's inputs")
    rid = run_id or f"{workflow}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    state: dict[str, Any] = dict(data)
    todo: dict[str, Any] | None = None
    if registry is not None:
        entry = registry.get(workflow)  # UnknownWorkflow: a clear error before anything is stored
        state = entry.initial_state(data)
        from tether.workers.execute import todo_for

        todo = todo_for(entry.steps()) or None
    state.update({WORKFLOW_KEY: workflow, QUEUE_KEY: queue})
    ctx = ExecutionContext(rid, state)
    if todo:
        ctx.merge(runtime_update(todo=todo))
    try:
        await store.commit(ctx, status=RunStatus.PENDING)
    except VersionConflict as exc:
        info = await store.get_run(rid)
        raise RunExists(rid, info.status if info else None) from exc
    ready = registry is not None and registry.get(workflow).prepare is None
    return rid, first_state(ctx.state_view()) if ready else None


def first_state(state: Mapping[str, Any]) -> dict[str, Any] | None:
    """``state`` as a message carries it: plain JSON that reads back equal to it, at most
    :data:`FIRST_STATE_BYTES`; None for anything else (a datetime, a tuple, bytes, a big
    state), which the worker then reads from the store."""
    try:
        text = json.dumps(state, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return None
    if len(text) > FIRST_STATE_BYTES:
        return None
    back: dict[str, Any] = json.loads(text)
    return back if back == state else None


async def submit(
    store: CheckpointStore,
    dispatcher: Dispatcher,
    workflow: str,
    inputs: Mapping[str, Any] | None = None,
    *,
    run_id: str | None = None,
    registry: Registry | None = None,
    queue: str | None = None,
) -> str:
    """Create a run of ``workflow`` (a registered name) and put it on the broker; returns
    its id at once, without waiting for a worker.

    The run is stored PENDING first, so a broker that is down leaves a consistent run the
    sweeper enqueues later (:class:`BrokerUnavailable` says so). ``registry``, when given,
    checks the name here and records the run's TODO list before any worker sees it.
    Raises :class:`~tether.errors.RunExists` for a run id already stored.
    """
    target = check_queue_name(queue or dispatcher.queue)  # (the dispatcher's own was checked)
    rid, first = await store_for_message(
        store, workflow, inputs, run_id=run_id, registry=registry, queue=target
    )
    ready = registry is not None and registry.get(workflow).prepare is None
    await dispatcher.enqueue(rid, queue=target, workflow=workflow if ready else None, first=first)
    return rid


async def hand_to_workers(
    store: CheckpointStore,
    dispatcher: Dispatcher,
    run_id: str,
    *,
    decision: str | None = None,
    queue: str | None = None,
    loaded: tuple[RunInfo, ExecutionContext] | None = None,
) -> None:
    """Have the workers continue a stopped run, as a person's resume or decision asks.
    ``loaded``: the run as the caller just read it (``store.load_run``), not read again.

    A worker drops a message without a decision for a PAUSED run: it may be an old copy,
    delivered after a person paused the run. So a person's resume of a PAUSED run is first
    recorded in the store: the run is set INTERRUPTED, in a write that lands only while it is
    still PAUSED at the version read. Any worker then resumes it on its message (as the
    server would in its own process), and the sweeper enqueues it should the broker be down.
    A decision travels on the message, to the run that waits for it."""
    if decision is None:
        loaded = loaded or await store.load_run(run_id)
        if loaded is None:
            raise RunNotFound(run_id)
        info, ctx = loaded
        if info.status is RunStatus.PAUSED:
            # (a run paused while its step runs stays held until that step's checkpoint:
            # RunInProgress until then, its holder's next write untouched)
            check_lease(run_id, runtime_get(ctx, "lease"), owner="", force=False, until=info.lease_until)
            await store.commit(ctx, status=RunStatus.INTERRUPTED, _require_status=RunStatus.PAUSED)
    await dispatcher.enqueue(run_id, decision=decision, queue=queue)
