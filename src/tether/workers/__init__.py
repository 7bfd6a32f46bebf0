"""Runs executed by a fleet of Celery workers (``pip install 'tether[celery]'``).

``submit()`` stores a run and puts its id on the broker; any ``tether worker`` takes the
message, resolves the run's workflow in its registry and executes the run under a lease.
A worker that dies leaves the run to another one (broker redelivery, else the sweeper);
the lease, not the broker, decides who executes a run, so a duplicate message is harmless.
See ``docs/scale-out.md``.

Celery is imported only by :mod:`tether.workers.app` (and when a Dispatcher is made).
"""

from __future__ import annotations

from tether.workers.dispatch import (
    TASK,
    BrokerUnavailable,
    Dispatcher,
    first_state,
    hand_to_workers,
    store_for_message,
    store_pending,
    submit,
)
from tether.workers.execute import DRAINING, Outcome, RunExecutor
from tether.workers.registry import QUEUE_KEY, WORKFLOW_KEY, Entry, Registry, UnknownWorkflow

__all__ = [
    "DRAINING",
    "QUEUE_KEY",
    "TASK",
    "WORKFLOW_KEY",
    "BrokerUnavailable",
    "Dispatcher",
    "Entry",
    "Outcome",
    "Registry",
    "RunExecutor",
    "UnknownWorkflow",
    "first_state",
    "hand_to_workers",
    "store_for_message",
    "store_pending",
    "submit",
]
