"""What the sweeper looks at: a store shared with a LangGraph graph holds threads that stay
RUNNING and were never leased; the sweeper must neither load them (a thread can hold
megabytes, and a sweep runs every few seconds) nor send them to a worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.workers.conftest import broker_url
from tests.workers.flows import five
from tether.state import RunStatus
from tether.stores import open_store
from tether.workers import Registry, store_pending
from tether.workers.sweeper import Sweeper


class CountingLoads:
    """The store, with every load's run id noted (a public wrapper, not a subclass)."""

    def __init__(self, store: Any) -> None:
        self.store, self.loaded = store, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def load(self, run_id: str, *args: Any, **kwargs: Any) -> Any:
        self.loaded.append(run_id)
        return await self.store.load(run_id, *args, **kwargs)


async def test_the_sweeper_skips_never_leased_running_threads_and_sends_pending_runs(
    tmp_path: Path, queue: str, dispatchers: Any
) -> None:
    from tests.integrations._lg_graph import build
    from tether.integrations.langgraph import TetherSaver

    url = f"sqlite:///{tmp_path}/fleet.db"
    async with TetherSaver.from_url(url) as saver:
        graph = build(turns=2, pause_at=99).compile(checkpointer=saver)
        await graph.ainvoke({"messages": []}, {"configurable": {"thread_id": "chat-1"}})
    dispatcher = dispatchers(broker_url("amqp"))
    async with open_store(url) as store:
        threads = await store.list_runs(status=RunStatus.RUNNING)
        assert threads and all(t.fence == 0 for t in threads)  # the graph's, never leased
        rid = await store_pending(store, "five", {}, registry=Registry([five()], bundled=False), queue=queue)
        counting = CountingLoads(store)
        sweeper = Sweeper(counting, dispatcher, grace=0.0)  # type: ignore[arg-type]
        sent = await sweeper.sweep()
    assert sent == [rid]  # the lost PENDING run goes out again
    assert not {t.run_id for t in threads} & set(counting.loaded)  # no thread was read
