"""Durable retries and interrupted side effects, with real processes killed by SIGKILL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.models._server import FakeServer, chat_completion, openai_error
from tests.stores.conftest import new_id
from tether.models import Backoff, LLMConfig, OpenAIChatModel
from tether.runtime import FailureKind, RetryPolicy, Runner, Step, Workflow
from tether.state import RunStatus
from tether.state.reserved import runtime_state

ROOT = Path(__file__).resolve().parents[2]


def flow(url: str, run_id: str, mode: str, log: Path, scenario: str, decision: str = ""):
    args = [sys.executable, "-m", "tests.runtime._attempts_flow", url, run_id, mode, str(log), scenario]
    return subprocess.run(
        [*args, *([decision] if decision else [])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def url(backend: str, store_url: str) -> str:
    if backend == "memory":
        pytest.skip("a memory store does not outlive its process")
    return store_url


@pytest.mark.parametrize(("scenario", "status"), [("flaky", "COMPLETED"), ("always", "PAUSED")])
async def test_a_crash_during_attempt_2_of_3_leaves_one_attempt_for_the_resume(
    url, store, tmp_path, scenario, status
):
    """The attempt count is checkpointed before each retry: 3 attempts in all, never 5."""
    run_id, log = new_id(), tmp_path / "log"
    killed = flow(url, run_id, "start", log, scenario)
    assert killed.returncode == -9, killed.stderr
    assert log.read_text().split() == ["prepare:1", "call:1", "call:2"]
    resumed = flow(url, run_id, "resume", log, scenario)
    assert resumed.stdout.strip() == status, resumed.stderr
    calls = [line for line in log.read_text().split() if line.startswith("call:")]
    assert calls == ["call:1", "call:2", "call:3"]
    cp = await store.load(run_id)
    if status == "PAUSED":
        report = runtime_state(cp.state)["failure_report"]
        assert report["attempts"] == 3 and report["kind"] == "transient"
    else:
        assert runtime_state(cp.state)["todo"]["call"]["attempts"] == 3
    kinds = [e["kind"] for e in runtime_state(cp.state)["event_log"]]
    assert "interrupted" in kinds  # the crash inside attempt 2 is on record


async def test_a_non_idempotent_step_cut_by_a_crash_pauses_instead_of_running_again(url, store, tmp_path):
    run_id, log = new_id(), tmp_path / "log"
    assert flow(url, run_id, "start", log, "charge").returncode == -9
    assert log.read_text().split() == ["prepare:1", "charge:1"]
    resumed = flow(url, run_id, "resume", log, "charge")
    assert resumed.stdout.strip() == "PAUSED", resumed.stderr
    assert log.read_text().split() == ["prepare:1", "charge:1"]  # not charged twice
    cp = await store.load(run_id)
    report = runtime_state(cp.state)["failure_report"]
    assert report["item_id"] == "charge"
    assert "step 'charge' may have partly run; retry, skip or inspect" in report["error"]
    assert report["options"] == ["retry", "skip", "takeover", "abort"]
    assert [e for e in runtime_state(cp.state)["event_log"] if e["kind"] == "interrupted"][-1][
        "step"
    ] == "charge"
    skipped = flow(url, run_id, "resume", log, "charge", "skip")
    assert skipped.stdout.strip() == "COMPLETED", skipped.stderr
    assert log.read_text().split() == ["prepare:1", "charge:1", "notify:1"]
    assert runtime_state((await store.load(run_id)).state)["todo"]["charge"]["status"] == "skipped"


async def test_provider_retries_and_runner_retries_share_one_budget(store):
    """A model that answers 503 forever: 3 requests for a step allowed 3 attempts (was 3 x 6)."""
    server = FakeServer().start()
    try:
        down = [True]
        server.script(
            *[lambda req: openai_error(503, "overloaded") if down[0] else chat_completion("fine")] * 20
        )
        config = LLMConfig.model_validate(
            {
                "provider": "openai-compatible",
                "model": "m",
                "api_key": "sk-test",
                "endpoint": f"{server.url}/v1",
                "max_retries": 5,
            }
        )
        async with OpenAIChatModel(config, backoff=Backoff(initial=0.01, max_wait=0.02, jitter=0.0)) as model:

            async def ask(sc):
                reply = await model.complete([{"role": "user", "content": "hi"}])
                return {"answer": reply.text}

            policy = RetryPolicy(attempts=3, initial=0.01, maximum=0.02, jitter=0)
            result = await Runner(Workflow.plan([Step(id="ask", fn=ask)]), store, retry=policy).start(
                new_id()
            )
            assert result.status is RunStatus.PAUSED
            assert result.report.kind is FailureKind.TRANSIENT and result.report.attempts == 3
            assert len(server.requests) == 3
            down[0] = False
            done = await Runner(Workflow.plan([Step(id="ask", fn=ask)]), store).resume(
                result.run_id, decision="retry"
            )
            assert done.status is RunStatus.COMPLETED and done.state["answer"] == "fine"
    finally:
        server.stop()
