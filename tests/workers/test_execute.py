"""The run executor in this process (no Celery): what a message leads to, by run status,
and the server's two modes (enqueue on a broker; recover its own runs on start)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.workers.conftest import STEPS, broker_url, done_steps
from tests.workers.flows import five
from tether.errors import ConfigError
from tether.runtime.lease import HOST
from tether.runtime.stream import EventBroadcaster
from tether.server.executor import Executor
from tether.state import ExecutionContext, RunStatus
from tether.state.reserved import runtime_get, runtime_update
from tether.stores import CheckpointStore, open_store
from tether.workers import QUEUE_KEY, WORKFLOW_KEY, Dispatcher, Registry, RunExecutor, submit


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    async with open_store(f"sqlite:///{tmp_path}/t.db") as s:
        yield s


def _executor(store: CheckpointStore, **kw: Any) -> RunExecutor:
    return RunExecutor(store, Registry([five()]), lease_ttl=3, **kw)


async def _pending(store: CheckpointStore, **inputs: Any) -> str:
    rid = f"r-{uuid.uuid4().hex[:8]}"
    ctx = ExecutionContext(rid, {**inputs, WORKFLOW_KEY: "five", QUEUE_KEY: "q"})
    await store.commit(ctx, status=RunStatus.PENDING)
    return rid


async def _held(store: CheckpointStore, owner: str) -> tuple[str, ExecutionContext]:
    """A RUNNING run whose lease ``owner``, a live process on another host, holds for a minute."""
    rid = await _pending(store)
    ctx = await store.load_context(rid)
    assert ctx is not None
    lease = {"owner": owner, "host": "another-host", "pid": 1, "expires_at": time.time() + 60}
    ctx.merge(runtime_update(lease=lease))
    await store.commit(ctx, status=RunStatus.RUNNING, _require_status=RunStatus.PENDING)
    return rid, ctx


async def test_a_pending_run_gets_its_todo_list_and_completes(store: CheckpointStore) -> None:
    rid = await _pending(store, label="a")
    out = await _executor(store).execute(rid)
    assert (out.action, out.status) == ("executed", "COMPLETED")
    cp = await store.load(rid)
    assert cp is not None and done_steps(cp.state) == STEPS
    assert set(runtime_get(cp.state, "todo")) == set(STEPS)


async def test_messages_for_finished_paused_or_held_runs_are_dropped(store: CheckpointStore) -> None:
    ex = _executor(store)
    done = await _pending(store)
    await ex.execute(done)
    assert (await ex.execute(done)).action == "dropped"  # finished

    paused = await _pending(store)
    await store.set_status(paused, RunStatus.PAUSED)
    out = await ex.execute(paused)
    assert (out.action, out.status) == ("dropped", "PAUSED")  # paused runs stay paused
    assert (await store.get_run(paused)).status is RunStatus.PAUSED  # type: ignore[union-attr]

    held, ctx = await _held(store, "elsewhere")
    out = await ex.execute(held)
    assert out.action == "dropped" and "elsewhere" in out.reason
    assert (await store.get_run(held)).version == ctx.version  # type: ignore[union-attr]  # untouched


async def _crashed(store: CheckpointStore, deaths: int) -> str:
    """A RUNNING run whose holder (a dead pid on this host) died after s1, ``deaths`` times."""
    rid = await _pending(store)
    ctx = await store.load_context(rid)
    assert ctx is not None
    events = [
        {"kind": "interrupted", "step": None, "detail": {"reason": "its process stopped", "after": "s1"}}
        for _ in range(deaths)
    ]
    todo = {
        s: {"name": s, "phase": "main", "status": "done" if s == "s1" else "pending", "attempts": 0}
        for s in STEPS
    }
    dead = {"owner": "gone", "host": HOST, "pid": 2**22 + 7, "expires_at": time.time() + 60}
    ctx.merge(runtime_update(todo=todo, lease=dead, event_log=events))
    ctx.mark_executed("s1")
    await store.commit(ctx, node_id="s1", status=RunStatus.RUNNING, _require_status=RunStatus.PENDING)
    return rid


async def test_a_run_that_keeps_killing_its_worker_ends_failed_with_a_report(store: CheckpointStore) -> None:
    rid = await _crashed(store, deaths=2)
    out = await _executor(store, max_crashes=3).execute(rid)
    assert (out.action, out.status) == ("failed", "FAILED")
    cp = await store.load(rid)
    assert cp is not None
    report = runtime_get(cp.state, "failure_report")
    assert report["error_type"] == "WorkerLost" and report["item_id"] == "s2" and report["attempts"] == 3
    assert (
        runtime_get(cp.state, "lease") is None and runtime_get(cp.state, "todo")["s2"]["status"] == "failed"
    )


async def test_below_the_bound_a_dead_holders_run_is_resumed(store: CheckpointStore) -> None:
    rid = await _crashed(store, deaths=1)
    out = await _executor(store, max_crashes=3).execute(rid)
    assert (out.action, out.status) == ("executed", "COMPLETED")
    cp = await store.load(rid)
    assert cp is not None and done_steps(cp.state) == STEPS[1:]  # s1 was done before: not again


async def test_an_unknown_workflow_fails_the_run_with_a_clear_report(store: CheckpointStore) -> None:
    rid = f"r-{uuid.uuid4().hex[:8]}"
    await store.commit(ExecutionContext(rid, {WORKFLOW_KEY: "nope"}), status=RunStatus.PENDING)
    out = await _executor(store).execute(rid)
    assert out.status == "FAILED" and "no workflow named 'nope'" in out.reason and "--workflow" in out.reason


async def test_two_executors_racing_for_one_run_execute_it_once(
    store: CheckpointStore, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.log"
    rid = await _pending(store, trace=str(trace), delay=0.05)
    outs = await asyncio.gather(_executor(store).execute(rid), _executor(store).execute(rid))
    assert sorted(o.action for o in outs) == ["dropped", "executed"]
    assert len(trace.read_text().splitlines()) == len(STEPS)


async def test_the_server_enqueues_on_a_broker_and_recovers_its_own_runs(store: CheckpointStore) -> None:
    url = broker_url("amqp")
    queue = f"tether-test-{uuid.uuid4().hex[:10]}"
    dispatcher = Dispatcher.from_url(url, queue=queue)
    try:
        ex = Executor(store, EventBroadcaster(), [five()], dispatcher=dispatcher)
        await ex.start("five", "srv-1", {"label": "x"})
        info = await store.get_run("srv-1")
        assert info is not None and info.status is RunStatus.PENDING and not ex.executing("srv-1")
        assert dispatcher.waiting() == 1
    finally:
        dispatcher.purge()
        with dispatcher.app.connection_for_write() as conn:
            conn.default_channel.queue_delete(queue)
        dispatcher.close()


async def test_the_server_without_a_broker_resumes_its_own_runs_on_start(store: CheckpointStore) -> None:
    dead = {"owner": "gone", "host": HOST, "pid": 2**22 + 9, "expires_at": time.time() + 60}
    for rid, status in (
        ("crashed", RunStatus.RUNNING),
        ("stopped", RunStatus.INTERRUPTED),
        ("held", RunStatus.PAUSED),
    ):
        ctx = ExecutionContext(rid, {"label": rid, WORKFLOW_KEY: "five"})
        ctx.merge(runtime_update(lease=dead if status is RunStatus.RUNNING else None))
        await store.commit(ctx, status=status)
    cli = ExecutionContext("cli-run", {"label": "c"})  # not started by the server: left alone
    await store.commit(cli, status=RunStatus.INTERRUPTED)
    local = Executor(store, EventBroadcaster(), [five()])
    assert sorted(await local.recover()) == ["crashed", "stopped"]
    for rid in ("crashed", "stopped"):
        await local.join(rid)
        cp = await store.load(rid)
        assert cp is not None and done_steps(cp.state) == STEPS
        assert (await store.get_run(rid)).status is RunStatus.COMPLETED  # type: ignore[union-attr]
    assert (await store.get_run("held")).status is RunStatus.PAUSED  # type: ignore[union-attr]
    assert (await store.get_run("cli-run")).status is RunStatus.INTERRUPTED  # type: ignore[union-attr]


async def test_a_broker_that_is_down_leaves_a_consistent_pending_run(store: CheckpointStore) -> None:
    from tether.workers import BrokerUnavailable

    dispatcher = Dispatcher.from_url("redis://127.0.0.1:1/0", queue="nowhere")
    try:
        with pytest.raises(BrokerUnavailable) as caught:
            await submit(store, dispatcher, "five", {"label": "z"}, run_id="offline-1")
    finally:
        dispatcher.close()
    assert "offline-1" in str(caught.value) and "sweeper" in str(caught.value)
    info = await store.get_run("offline-1")
    assert info is not None and info.status is RunStatus.PENDING  # the sweeper sends it later


@pytest.mark.slow
async def test_the_bundled_orchestrator_runs_on_a_worker(store: CheckpointStore, tmp_path: Path) -> None:
    from tether.workers import store_pending

    registry = Registry()
    rid = await store_pending(
        store, "orchestrate-demo", {"workdir": str(tmp_path / "proj")}, registry=registry
    )
    out = await RunExecutor(store, registry).execute(rid)
    assert (out.action, out.status) == ("executed", "COMPLETED")
    cp = await store.load(rid)
    assert cp is not None and cp.state["metrics"] and (tmp_path / "proj" / "stats.py").exists()


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"max_crashes": 0}, "max_crashes"),
        ({"max_crashes": 2.5}, "max_crashes"),
        ({"lease_ttl": 0}, "lease_ttl"),
        ({"lease_ttl": float("inf")}, "lease_ttl"),
        ({"drain_timeout": -1}, "drain_timeout"),
        ({"sweep_interval": float("nan")}, "sweep_interval"),
        ({"sweep_grace": "2"}, "sweep_grace"),
    ],
)
def test_a_worker_config_refuses_a_bad_setting_before_any_message(
    setting: dict[str, Any], named: str
) -> None:
    """Found when the worker is made, not by the first message it takes (which would fail
    every run it was given)."""
    from tether.workers.app import WorkerConfig

    with pytest.raises(ConfigError, match=named):
        WorkerConfig(store_url="sqlite:///unused.db", **setting)


async def test_zero_seconds_are_taken_where_they_mean_never_or_at_once(store: CheckpointStore) -> None:
    """A sweep interval of 0 (this worker never sweeps) and a drain timeout of 0 (stop at
    once) are settings, not mistakes; an executor refuses max_crashes below 1 itself."""
    from tether.workers.app import WorkerConfig

    config = WorkerConfig(store_url="sqlite:///unused.db", sweep_interval=0, drain_timeout=0, sweep_grace=0)
    assert (config.sweep_interval, config.drain_timeout, config.lease_ttl) == (0, 0, 30.0)
    with pytest.raises(ConfigError, match="max_crashes"):
        RunExecutor(store, Registry([five()]), max_crashes=0)


@pytest.mark.parametrize(
    "flags",
    [
        ["--max-crashes", "0"],
        ["--drain-timeout", "-1"],
        ["--sweep-interval", "-0.5"],
        ["--sweep-grace", "nan"],
        ["--lease", "0"],
        ["--concurrency", "0"],
        ["--queue", ""],
        ["--queue", "amq.direct"],
    ],
)
def test_tether_worker_refuses_a_bad_flag_before_it_connects(tmp_path: Path, flags: list[str]) -> None:
    """Exit 2 naming the flag, and no store or broker touched (the broker here is unreachable)."""
    from typer.testing import CliRunner

    from tether.cli.app import app

    db = tmp_path / "w.db"
    result = CliRunner().invoke(
        app, ["worker", "--store", f"sqlite:///{db}", "--broker", "amqp://guest:guest@127.0.0.1:1//", *flags]
    )
    assert result.exit_code == 2, result.output
    assert flags[0] in result.output
    assert not db.exists()


@pytest.mark.parametrize(
    ("command", "broker", "why"),
    [
        ("worker", "sqs://key:hunter2@", "unknown broker scheme 'sqs'"),
        ("submit", "http://127.0.0.1:1/", "unknown broker scheme 'http'"),
        ("submit", "redis://127.0.0.1:6379/abc", "the Redis database must be a number"),
        ("submit", "127.0.0.1:5672", "has no scheme"),
    ],
)
def test_a_broker_url_tether_cannot_use_is_refused_before_anything_is_stored(
    tmp_path: Path, command: str, broker: str, why: str
) -> None:
    """Exit 2 naming --broker and what is wrong, before the store is opened: Celery finds
    such a URL only when it first connects, and `tether submit` had stored its run by then."""
    from typer.testing import CliRunner

    from tether.cli.app import app

    db = tmp_path / "w.db"
    args = ["submit", "deploy"] if command == "submit" else ["worker"]
    result = CliRunner().invoke(app, [*args, "--store", f"sqlite:///{db}", "--broker", broker])
    assert result.exit_code == 2, result.output
    assert "--broker" in result.output and why in result.output
    assert "hunter2" not in result.output
    assert not db.exists()


def test_a_bad_broker_url_in_the_environment_is_named_and_nothing_is_stored(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tether.cli.app import app
    from tether.server.config import load_server_settings

    db = tmp_path / "w.db"
    env = {"TETHER_BROKER_URL": "nats://127.0.0.1:4222"}
    for args in (["submit", "deploy"], ["worker"]):
        result = CliRunner().invoke(app, [*args, "--store", f"sqlite:///{db}"], env=env)
        assert result.exit_code == 2, result.output
        assert "TETHER_BROKER_URL" in result.output and "unknown broker scheme 'nats'" in result.output
    assert not db.exists()
    # the server refuses it when its settings are read, before it serves or enqueues anything
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TETHER_BROKER_URL", "nats://127.0.0.1:4222")
        with pytest.raises(ConfigError, match="TETHER_BROKER_URL='nats://127.0.0.1:4222'"):
            load_server_settings()


def test_a_dispatcher_refuses_a_broker_it_cannot_use_without_showing_its_password() -> None:
    with pytest.raises(ConfigError, match="unknown broker scheme 'kafka'") as caught:
        Dispatcher.from_url("kafka://user:hunter2@127.0.0.1:9092")
    assert "hunter2" not in str(caught.value)


def test_resend_refuses_a_message_every_worker_would_drop_and_hands_the_others_over(tmp_path: Path) -> None:
    """`tether submit --resend` says why instead of printing the id of a message sent for
    nothing (a mistyped id, a finished run, a failed one without a decision); a run a worker
    would pick up gets its message (on the run's own queue unless --queue says otherwise), and a
    paused one is handed over as the server's resume hands it (INTERRUPTED first, which a worker
    resumes)."""
    from typer.testing import CliRunner

    from tether.cli.app import app

    url = f"sqlite:///{tmp_path}/t.db"
    queue = f"test-resend-{uuid.uuid4().hex[:8]}"

    async def runs() -> tuple[str, ...]:
        async with open_store(url) as s:
            done = await _pending(s)
            await _executor(s).execute(done)
            failed, paused = await _pending(s), await _pending(s)
            await s.set_status(failed, RunStatus.FAILED)
            await s.set_status(paused, RunStatus.PAUSED)
            own = f"r-{uuid.uuid4().hex[:8]}"  # submitted to this test's queue: resent there
            await s.commit(
                ExecutionContext(own, {WORKFLOW_KEY: "five", QUEUE_KEY: queue}), status=RunStatus.PENDING
            )
            return done, failed, paused, await _pending(s), own

    done, failed, paused, pending, own = asyncio.run(runs())

    def resend(run_id: str, broker: str, *more: str) -> Any:
        args = ["submit", "five", "--store", url, "--broker", broker, "--resend", "--run-id", run_id]
        return CliRunner().invoke(app, [*args, *more])

    nowhere = "amqp://guest:guest@127.0.0.1:1//"  # a refusal never reaches the broker
    for run_id, said in (
        ("r-nosuch", "no run 'r-nosuch' in the store"),
        (done, "is COMPLETED: a worker would drop its message, it has finished"),
        (failed, "is FAILED: a worker would drop its message, it waits for a person"),
    ):
        result = resend(run_id, nowhere)
        assert result.exit_code == 1, result.output
        assert said in result.output and "nothing sent" in result.output
    assert "(give --decision)" in result.output

    broker = broker_url("amqp")
    dispatcher = Dispatcher.from_url(broker, queue=queue)
    try:
        for run_id, more in ((pending, ()), (paused, ()), (failed, ("--decision", "retry"))):
            result = resend(run_id, broker, "--queue", queue, *more)
            assert result.exit_code == 0 and result.output.strip() == run_id, result.output
        assert dispatcher.waiting(queue) == 3
        result = resend(own, broker)  # no --queue: the run's own, not the default one
        assert result.exit_code == 0, result.output
        assert dispatcher.waiting(queue) == 4
    finally:
        with dispatcher.app.connection_for_write() as conn:
            conn.default_channel.queue_delete(queue)
        dispatcher.close()

    async def statuses() -> list[RunStatus]:
        async with open_store(url) as s:
            return [(await s.get_run(r)).status for r in (paused, failed, pending)]  # type: ignore[union-attr]

    assert asyncio.run(statuses()) == [RunStatus.INTERRUPTED, RunStatus.FAILED, RunStatus.PENDING]


async def test_a_run_paused_and_resumed_through_the_server_is_continued_by_a_worker(
    store: CheckpointStore,
) -> None:
    """A message alone is dropped by a worker when the run is PAUSED (it may be an old copy):
    the server's resume of a paused run records it in the store first, so the worker
    that gets the message continues the run to its end."""
    queue = f"tether-test-{uuid.uuid4().hex[:10]}"
    dispatcher = Dispatcher.from_url(broker_url("amqp"), queue=queue)
    try:
        server = Executor(store, EventBroadcaster(), [five()], dispatcher=dispatcher)
        await server.start("five", "paused-1", {"label": "p"})
        assert await server.stop("paused-1", RunStatus.PAUSED) == "PAUSED"
        old_copy = await _executor(store).execute("paused-1")  # its start message, late
        assert (old_copy.action, old_copy.status) == ("dropped", "PAUSED")
        await server.resume("paused-1")
        assert (await store.get_run("paused-1")).status is RunStatus.INTERRUPTED  # type: ignore[union-attr]
        assert dispatcher.waiting() == 2  # the start message and the resume's
        out = await _executor(store).execute("paused-1")
        assert (out.action, out.status) == ("executed", "COMPLETED")
        cp = await store.load("paused-1")
        assert cp is not None and done_steps(cp.state) == STEPS
    finally:
        dispatcher.purge()
        with dispatcher.app.connection_for_write() as conn:
            conn.default_channel.queue_delete(queue)
        dispatcher.close()


def test_a_decision_the_broker_did_not_take_is_said_to_be_still_waiting() -> None:
    from tether.workers import BrokerUnavailable

    dispatcher = Dispatcher.from_url("amqp://guest:guest@127.0.0.1:1//")
    try:
        with pytest.raises(BrokerUnavailable) as caught:
            dispatcher.send("r-1", decision="retry")
    finally:
        dispatcher.close()
    said = str(caught.value)
    assert "the decision 'retry' for run 'r-1' could not be sent" in said
    assert "the run still waits for a decision" in said and "sweeper" not in said


async def test_the_api_answers_503_when_the_broker_does_not_take_a_run(store: CheckpointStore) -> None:
    """A broker that is down is a 503 with the run's id (the run is stored PENDING), not the
    500 of a server fault."""
    import httpx

    from tether.server.app import create_app
    from tether.server.config import ServerSettings

    settings = ServerSettings(broker_url="amqp://guest:guest@127.0.0.1:1//")
    app = create_app(settings, store=store, workflows=[five()])
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            answer = await client.post("/api/runs", json={"workflow": "five", "runId": "api-offline"})
    assert answer.status_code == 503, answer.text
    body = answer.json()
    assert body["type"].endswith("/broker-unavailable") and body["run_id"] == "api-offline"
    assert (await store.get_run("api-offline")).status is RunStatus.PENDING  # type: ignore[union-attr]


@pytest.mark.parametrize("queue", ["", " tether", "amq.gen-1", "q" * 201])
def test_a_queue_name_no_worker_could_share_is_refused_before_anything_is_stored(
    tmp_path: Path, queue: str
) -> None:
    """An empty name would have RabbitMQ invent one per declaration: the run's message would
    go where no worker listens."""
    from typer.testing import CliRunner

    from tether.cli.app import app
    from tether.server.config import load_server_settings

    db = tmp_path / "w.db"
    args = [
        "submit",
        "deploy",
        "--store",
        f"sqlite:///{db}",
        "--broker",
        "amqp://127.0.0.1:1//",
        "--queue",
        queue,
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "--queue" in result.output, result.output
    assert not db.exists()
    with pytest.raises(ConfigError, match="queue name"):
        Dispatcher.from_url("amqp://127.0.0.1:1//", queue=queue)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TETHER_BROKER_QUEUE", queue)
        with pytest.raises(ConfigError, match="TETHER_BROKER_QUEUE"):
            load_server_settings()


async def test_a_run_paused_while_its_step_runs_is_not_handed_over_under_its_holder(
    store: CheckpointStore,
) -> None:
    """Paused by a person while a worker runs its step, a run stays held until that step's
    checkpoint: a resume then is refused, and nothing is written under the holder."""
    from tether.errors import RunInProgress
    from tether.workers import hand_to_workers

    rid, ctx = await _held(store, "w-1")
    await store.set_status(rid, RunStatus.PAUSED)  # what the pause route stores
    nowhere = Dispatcher.from_url("amqp://guest:guest@127.0.0.1:1//")
    try:
        with pytest.raises(RunInProgress, match="w-1"):
            await hand_to_workers(store, nowhere, rid)
    finally:
        nowhere.close()
    info = await store.get_run(rid)
    assert info is not None and info.status is RunStatus.PAUSED and info.version == ctx.version
