"""LangGraph's checkpointer operations over one tether store, as coroutines.

Each namespace run is guarded by a lock of this process and written through an
:class:`ExecutionContext`, so a put is one atomic tether commit whose delta is what
changed: the items a list channel gained, the channels LangGraph bumped, the new
checkpoint record and index entry. Another process writing the same namespace makes
the commit raise ``VersionConflict``; the namespace is then reloaded and the put redone.

The work is split by job: ``Spaces`` (the cache of namespaces, their locks and loading),
``PendingWrites`` (task writes and the lock discipline), ``Puts``, ``Reads`` and
``Maintenance`` (whole threads). ``Threads`` puts them together for the saver.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tether.integrations.langgraph._maintenance import Maintenance
from tether.integrations.langgraph._pending import PendingWrites
from tether.integrations.langgraph._put import Puts
from tether.integrations.langgraph._reads import Reads
from tether.integrations.langgraph._spaces import Spaces

__all__ = ["Threads"]


class Threads:
    """The saver's operations. In the default mode they run on the store's event loop;
    with ``inline=True`` they run to completion in the calling thread (``run_inline``) on
    ``store``, whose awaits never suspend, and waiting writes are swept on ``home_loop``."""

    def __init__(
        self,
        store: Any,
        serde: Any,
        *,
        cache_size: int = 256,
        flush_delay: float | None = 0.02,
        prefix: str = "lg",
        inline: bool = False,
        home_loop: asyncio.AbstractEventLoop | None = None,
        spaces: Spaces | None = None,
    ) -> None:
        self.spaces = spaces or Spaces(
            store, serde, cache_size=cache_size, prefix=prefix, inline=inline, home_loop=home_loop
        )
        self.pending = PendingWrites(self.spaces, flush_delay)
        self.reads = Reads(self.spaces, self.pending)
        self.puts = Puts(self.spaces, self.pending, self.reads)
        self.maintenance = Maintenance(self.spaces, self.pending, self.reads)
        # the operations the saver calls
        self.put = self.puts.put
        self.writes_batch = self.pending.writes_batch
        self.defer = self.pending.defer
        self.store_writes = self.pending.store_writes
        self.put_writes = self.pending.put_writes
        self.flush = self.pending.flush
        self.get_tuple = self.reads.get_tuple
        self.select = self.reads.select
        self.tuple_of = self.reads.tuple_of
        self.namespaces = self.spaces.namespaces
        self.delete_thread = self.maintenance.delete_thread
        self.prune = self.maintenance.prune
        self.copy_thread = self.maintenance.copy_thread
        self.delete_for_runs = self.maintenance.delete_for_runs

    @property
    def store(self) -> Any:
        return self.spaces.store

    @property
    def inline(self) -> bool:
        return self.spaces.inline

    def with_serde(self, serde: Any) -> Threads:
        """The same store, cache and locks, with another serializer (``with_allowlist``)."""
        return Threads(None, None, flush_delay=self.pending.flush_delay, spaces=self.spaces.with_serde(serde))
