"""``Runner.resume(only=...)``: a worker starts a run submitted PENDING without a read of its
own, and must never continue a run that was paused (or started) meanwhile."""

from __future__ import annotations

import pytest

from tests.stores.conftest import new_id
from tether.errors import WrongRunStatus
from tether.runtime import Runner, Step, Workflow
from tether.state import ExecutionContext, RunStatus


def plan() -> Workflow:
    return Workflow.plan([Step(id=s, fn=lambda sc: {"n": 1}) for s in ("a", "b")])


async def test_only_pending_starts_a_pending_run(store):
    """A run stored PENDING is taken and completed."""
    rid = new_id()
    await store.commit(ExecutionContext(rid, {"x": 1}), status=RunStatus.PENDING)
    result = await Runner(plan(), store).resume(rid, only=RunStatus.PENDING)
    assert result.status is RunStatus.COMPLETED


async def test_only_pending_refuses_a_paused_run_and_writes_nothing(store):
    """A run paused meanwhile stays as it is: no lease, no new version."""
    rid = new_id()
    version = await store.commit(ExecutionContext(rid, {"x": 1}), status=RunStatus.PAUSED)
    with pytest.raises(WrongRunStatus, match="PAUSED"):
        await Runner(plan(), store).resume(rid, only=RunStatus.PENDING)
    info = await store.get_run(rid)
    assert info is not None and info.status is RunStatus.PAUSED and info.version == version
