"""``open_store(url)``: pick a backend from the URL scheme, importing only that one.

memory://[name]                    InMemoryStore (same name: shared in-process)
sqlite:///relative/path.db         SqliteStore (sqlite:////abs/path.db for absolute;
                                   ?synchronous=, busy_timeout=, checkpoint_bytes=)
redis://host:6379/0                RedisStore          (pip install 'tether[redis]')
postgresql://user@host/db          PostgresStore       (pip install 'tether[postgres]')
mysql://user:pw@host/db            MySQLStore          (pip install 'tether[mysql]')
tiered+redis://host/0?sql=<url>    TieredStore: Redis primary, SQL persistence
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from tether.errors import ConfigError
from tether.stores.base import CheckpointStore

__all__ = ["BACKENDS", "create_store", "open_store", "public_url"]

BACKENDS: dict[str, str] = {
    "memory": "tether.stores.memory:InMemoryStore",
    "sqlite": "tether.stores.sqlite:SqliteStore",
    "redis": "tether.stores.redis:RedisStore",
    "rediss": "tether.stores.redis:RedisStore",
    "postgres": "tether.stores.postgres:PostgresStore",
    "postgresql": "tether.stores.postgres:PostgresStore",
    "mysql": "tether.stores.mysql:MySQLStore",
    "mariadb": "tether.stores.mysql:MySQLStore",
    "tiered+redis": "tether.stores.tiered:TieredStore",
}


def _load(target: str) -> type[CheckpointStore]:
    module, _, name = target.partition(":")
    cls = getattr(importlib.import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, CheckpointStore)):
        raise ConfigError(f"{target} is not a CheckpointStore")
    return cls


def create_store(url: str, **options: Any) -> CheckpointStore:
    """Build (but do not set up) the store for ``url``; options go to the backend."""
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise ConfigError(f"store URL {url!r} has no scheme; e.g. sqlite:///tether.db")
    target = BACKENDS.get(scheme.lower())
    if target is None:
        raise ConfigError(f"unknown store scheme {scheme!r}; known: {', '.join(sorted(BACKENDS))}")
    cls = _load(target)
    store = cls.from_url(url, **dict(options))
    store.public_url = public_url(url)
    if scheme.lower() != "memory":  # (a memory store lives in this process only)
        store.remember_url(url, options)
    return store


_SECRET_PARAMS = frozenset({"password", "passwd", "pass", "sslpassword", "token"})


def public_url(url: str) -> str:
    """``url`` without credentials (user, password, secret query parameters, the same in a
    nested ``sql=`` URL): names the database without revealing how to log in to it."""
    parts = urlsplit(url)
    scheme = "postgresql" if parts.scheme.lower() == "postgres" else parts.scheme.lower()
    query = [
        (k, public_url(v) if k == "sql" else v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
        if k.lower() not in _SECRET_PARAMS
    ]
    netloc = parts.netloc.rpartition("@")[2]
    return f"{scheme}://{netloc}{parts.path}" + (f"?{urlencode(query)}" if query else "")


@asynccontextmanager
async def open_store(url: str, *, setup: bool = True, **options: Any) -> AsyncIterator[CheckpointStore]:
    """Open a store from a URL, set it up (idempotent), and close it afterwards.

    >>> async with open_store("sqlite:///tether.db") as store:  # doctest: +SKIP
    ...     await store.commit(ctx)
    """
    store = create_store(url, **options)
    try:
        if setup:
            await store.setup()
        yield store
    finally:
        await store.aclose()
