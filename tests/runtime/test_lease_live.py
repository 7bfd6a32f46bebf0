"""A lease is live from the moment it is stored, in the process that holds it.

A worker running several runs at once (Celery's thread pool) has threads that read a run
another thread of the same process is taking: a lease held by this very process counts as
live only while its drive is active, so the drive must be active before its lease is in
the store, or a read in between takes the run over and its first step runs twice.
"""

from __future__ import annotations

from typing import Any

from tests.stores.conftest import new_id
from tether.runtime import Runner, Step, Workflow
from tether.runtime.lease import lease_is_dead
from tether.state import RunStatus
from tether.state.reserved import runtime_get
from tether.stores.base import CheckpointStore


class _Watching:
    """The store, with a look at the lease each commit stores, as another thread of this
    process would read it right after the commit and before the runner goes on."""

    def __init__(self, store: CheckpointStore) -> None:
        self._store = store
        self.seen: list[tuple[RunStatus, bool]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def commit(self, ctx: Any, **kwargs: Any) -> int:
        version = await self._store.commit(ctx, **kwargs)
        loaded = await self._store.load_run(ctx.run_id)
        assert loaded is not None
        info, stored = loaded
        lease = runtime_get(stored, "lease")
        if lease:
            self.seen.append((info.status, lease_is_dead(lease, until=info.lease_until)))
        return version


async def test_a_lease_is_live_as_soon_as_it_is_stored(store: CheckpointStore) -> None:
    watching = _Watching(store)

    async def step(sc: Any) -> dict[str, int]:
        return {"n": 1}

    runner = Runner(Workflow([Step(id="s1", fn=step)]), watching)  # type: ignore[arg-type]
    result = await runner.start(new_id("live"))
    assert result.status is RunStatus.COMPLETED
    assert watching.seen, "no commit stored a lease"
    # the take's commit first: before the fix, its lease read as a dead drive's
    assert watching.seen[0] == (RunStatus.RUNNING, False)
    assert all(not dead for _, dead in watching.seen)
