"""`tether worker` turns tracing on from the standard OTEL_* variables, like every entry point."""

from __future__ import annotations

import signal
import uuid

import pytest

from tests.observe.test_cli_tracing import spans
from tests.workers.conftest import STEPS, broker_url, opened, store_url, wait_status
from tether.state import RunStatus
from tether.workers import Dispatcher, submit


@pytest.mark.slow
async def test_tether_worker_prints_the_spans_of_the_runs_it_executes(
    fleet_factory,
    tmp_path,
    queue,
    monkeypatch,
):
    """`tether worker` with OTEL_TRACES_EXPORTER=console: the run it takes from the broker
    is one trace with a span per step, under OTEL_SERVICE_NAME."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "tether-worker-test")
    store_at, broker_at = store_url("redis"), broker_url("redis")
    async with opened(store_at) as store:
        fleet = fleet_factory(store_at, broker_at)
        fleet.start(1, "--lease", "3", "--sweep-interval", "0")
        dispatcher = Dispatcher.from_url(broker_at, queue=queue)
        inputs = {"label": uuid.uuid4().hex[:6], "trace": str(tmp_path / "trace.log"), "delay": 0.01}
        run_id = await submit(store, dispatcher, "five", inputs)
        assert (
            await wait_status(store, run_id, {RunStatus.COMPLETED, RunStatus.FAILED}) is RunStatus.COMPLETED
        )
        dispatcher.close()
        for proc in fleet.procs:  # a warm shutdown flushes the spans (fleet.stop() kills -9)
            proc.send_signal(signal.SIGTERM)
        for proc in fleet.procs:
            proc.wait(timeout=60)
    found = [s for s in spans(fleet.logs()) if s["attributes"].get("gen_ai.conversation.id") == run_id]
    names = {s["name"] for s in found}
    assert any(n.startswith("invoke_workflow") for n in names), names
    assert {f"invoke_agent {step}" for step in STEPS} <= names, names
    assert len({s["context"]["trace_id"] for s in found}) == 1
    assert {s["resource"]["attributes"]["service.name"] for s in found} == {"tether-worker-test"}
