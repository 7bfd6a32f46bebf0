"""Checkpoint stores: one interface, a backend per database, opened from a URL.

Backends are imported lazily: ``import tether.stores`` never imports a driver.
"""

from __future__ import annotations

from tether.stores.base import CheckpointStore, CompactionPolicy, ExpiryPolicy, RetryPolicy
from tether.stores.registry import BACKENDS, create_store, open_store

__all__ = [
    "BACKENDS",
    "CheckpointStore",
    "CompactionPolicy",
    "ExpiryPolicy",
    "RetryPolicy",
    "create_store",
    "open_store",
]
