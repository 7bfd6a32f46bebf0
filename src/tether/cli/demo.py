"""The main job: a multi-step run that is killed mid-step and resumed from its checkpoint.

It shows tether's first promise end to end with nothing but SQLite: a worker process
runs a small deployment-like workflow, checkpointing after every node; partway
through a node it sends itself SIGKILL (no cleanup, no flush). The parent then
resumes from the latest checkpoint: it restores the state, skips every node already
executed, and finishes the run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tether.state import ExecutionContext, RunStatus
from tether.stores import CheckpointStore, open_store

__all__ = ["NODES", "run_nodes", "run_worker", "spawn_worker"]


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    name: str
    work: Callable[[ExecutionContext], dict[str, Any]]


def _plan(ctx: ExecutionContext) -> dict[str, Any]:
    steps = [n.id for n in NODES]
    return {
        "plan_output": {"steps": steps},
        "todo": [{"id": s, "status": "pending"} for s in steps],
    }


def _say(text: str) -> Callable[[ExecutionContext], dict[str, Any]]:
    def work(ctx: ExecutionContext) -> dict[str, Any]:
        n = len(ctx.get("messages", []))
        return {"messages": [{"role": "assistant", "content": f"[{n}] {text}"}]}

    return work


def _build(ctx: ExecutionContext) -> dict[str, Any]:
    return {"build_output": {"image": "demo-app:1.0", "size_mb": 42}, **_say("built image")(ctx)}


NODES: list[Node] = [
    Node("plan", "Plan the deployment", _plan),
    Node("analyze", "Analyse the repository", _say("python app, uvicorn entry point")),
    Node("configure", "Write configuration", _say("wrote .env with PORT=8000")),
    Node("build", "Build the image", _build),
    Node("deploy", "Start the service", _say("service started on :8000")),
    Node("verify", "Health-check", _say("GET /health -> 200")),
]


async def run_nodes(
    store: CheckpointStore,
    ctx: ExecutionContext,
    *,
    crash_in: str | None = None,
    on_step: Callable[[Node, int], None] | None = None,
) -> None:
    """Run every node not yet executed, checkpointing after each one."""
    done = set(ctx.executed_node_ids)
    for node in NODES:
        if node.id in done:
            continue
        update = node.work(ctx)
        if node.id == crash_in:  # die mid-node: its work is lost, the checkpoints are not
            os.kill(os.getpid(), signal.SIGKILL)
        ctx.merge(update)
        ctx.merge({"execution_history": [{"node": node.id, "name": node.name}]})
        ctx.mark_executed(node.id)
        version = await store.commit(ctx, node_id=node.id, metadata={"node_name": node.name})
        if on_step is not None:
            on_step(node, version)
    await store.set_status(ctx.run_id, RunStatus.COMPLETED)


async def run_worker(store_url: str, run_id: str, crash_in: str | None, options: dict[str, Any]) -> None:
    """The worker process: start the run and (normally) die inside ``crash_in``."""
    async with open_store(store_url, **options) as store:
        ctx = ExecutionContext(run_id, {"user_input": "deploy the demo app", "messages": []})
        ctx.merge({"messages": [{"role": "user", "content": "deploy the demo app"}]})

        def report(node: Node, version: int) -> None:
            print(f"  worker: {node.id:<10} done, checkpoint v{version}", flush=True)

        await run_nodes(store, ctx, crash_in=crash_in, on_step=report)


def spawn_worker(store_url: str, run_id: str, crash_in: str) -> subprocess.CompletedProcess[str]:
    """Run the worker in a child process that will kill itself with SIGKILL."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tether.cli.app",
            "demo-worker",
            store_url,
            run_id,
            "--crash-in",
            crash_in,
        ],
        text=True,
        capture_output=True,
        check=False,
        env=os.environ.copy(),
    )
