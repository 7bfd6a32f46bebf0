"""The main job: a workflow that is SIGKILLed mid-step and resumed from its checkpoint.

It shows tether's first promise end to end with nothing but SQLite: a worker process
runs a small deployment-like workflow with the :class:`~tether.runtime.Runner`, which
checkpoints after every step; partway through a step the worker sends itself SIGKILL
(no cleanup, no flush). The parent then resumes from the latest checkpoint: the state
is restored, every step already executed is skipped, and the run finishes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

from tether.runtime import Phase, Step, StepContext, Workflow

__all__ = ["STEPS", "demo_workflow", "spawn_worker"]

STEPS = ["plan", "analyze", "configure", "build", "deploy", "verify"]
_CRASH_ENV = "TETHER_DEMO_CRASH_IN"


def _say(step_id: str, text: str) -> Any:
    def work(sc: StepContext) -> dict[str, Any]:
        if os.environ.get(_CRASH_ENV) == step_id:  # die mid-step: its work is lost, checkpoints are not
            os.kill(os.getpid(), signal.SIGKILL)
        n = len(sc.get("messages", []))
        return {"messages": [{"role": "assistant", "content": f"[{n}] {text}"}], f"{step_id}_output": text}

    return work


def demo_workflow() -> Workflow:
    """Six steps in three phases, as a deployment agent's plan would be."""
    texts = {
        "plan": "plan: analyze, configure, build, deploy, verify",
        "analyze": "python app, uvicorn entry point",
        "configure": "wrote .env with PORT=8000",
        "build": "built image demo-app:1.0",
        "deploy": "service started on :8000",
        "verify": "GET /health -> 200",
    }
    phase = {"plan": "prepare", "analyze": "prepare", "configure": "build", "build": "build"}
    return Workflow.plan(
        [Step(id=s, name=s.capitalize(), fn=_say(s, texts[s]), phase=phase.get(s, "ship")) for s in STEPS],
        name="demo",
        phases=[
            Phase(id="prepare", name="Prepare"),
            Phase(id="build", name="Build"),
            Phase(id="ship", name="Ship"),
        ],
    )


def spawn_worker(store_url: str, run_id: str, crash_in: str) -> subprocess.CompletedProcess[str]:
    """Start the run in a child process that kills itself inside ``crash_in``."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tether.cli.app",
            "run",
            "tether.cli.demo:demo_workflow",
            "--run-id",
            run_id,
            "--store",
            store_url,
            "--input",
            '{"user_input": "deploy the demo app"}',
            "--plain",
        ],
        text=True,
        capture_output=True,
        check=False,
        env={**os.environ, _CRASH_ENV: crash_in},
    )
