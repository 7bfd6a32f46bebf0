"""Every CLI entry point turns tracing on from the standard OTEL_* variables, as the server
does: ``tether run`` and ``tether orchestrate`` print their spans with the console exporter
(``tether worker``: tests/workers/test_worker_tracing.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WORKFLOW = textwrap.dedent(
    """
    from tether.models import ScriptedModel
    from tether.runtime import Step, Workflow


    class Ask:
        def __init__(self):
            self.model = ScriptedModel(["hello from the model"], model="scripted-1")

        async def __call__(self, ctx):
            reply = await self.model.complete([{"role": "user", "content": "hi"}])
            return {"ask_output": reply.text}


    def shout(ctx):
        return {"shout_output": "HI"}


    workflow = Workflow.plan([Step(id="ask", fn=Ask()), Step(id="shout", fn=shout)], name="greeter")
    """
)


def cli(tmp_path: Path, *args: str, exporter: str = "console") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TETHER_"))}
    env |= {
        "OTEL_TRACES_EXPORTER": exporter,
        "OTEL_SERVICE_NAME": "tether-cli-test",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "src"), env.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "tether.cli.app", *args, "--store", f"sqlite:///{tmp_path}/cli.db"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def spans(stdout: str) -> list[dict]:
    """The JSON objects the console exporter printed, among the command's own lines."""
    decoder = json.JSONDecoder()
    out, i = [], 0
    while (i := stdout.find("{\n", i)) != -1:
        try:
            obj, end = decoder.raw_decode(stdout, i)
        except json.JSONDecodeError:
            i += 1
            continue
        if isinstance(obj, dict) and "context" in obj and "name" in obj:
            out.append(obj)
        i = end
    return out


def test_tether_run_prints_one_trace_with_workflow_step_and_chat_spans(tmp_path):
    """`tether run` with OTEL_TRACES_EXPORTER=console: the run, its steps and the model call
    are spans of one trace, under the service name OTEL_SERVICE_NAME gives."""
    (tmp_path / "greeter.py").write_text(WORKFLOW)
    out = cli(tmp_path, "run", "greeter:workflow", "--run-id", "greet-1", "--plain")
    assert out.returncode == 0, out.stdout + out.stderr
    found = spans(out.stdout)
    names = {s["name"] for s in found}
    assert "invoke_workflow greeter" in names, names
    assert {"invoke_agent ask", "invoke_agent shout"} <= names, names
    chat = [s for s in found if s["name"].startswith("chat")]
    assert len(chat) == 1, names
    assert chat[0]["attributes"]["gen_ai.conversation.id"] == "greet-1"
    assert chat[0]["attributes"]["gen_ai.request.model"] == "scripted-1"
    assert len({s["context"]["trace_id"] for s in found}) == 1
    assert {s["resource"]["attributes"]["service.name"] for s in found} == {"tether-cli-test"}
    workflow = next(s for s in found if s["name"] == "invoke_workflow greeter")
    assert workflow["attributes"]["gen_ai.workflow.name"] == "greeter"


def test_tether_run_prints_no_span_when_tracing_is_off(tmp_path):
    """OTEL_TRACES_EXPORTER=none: the same run prints no span."""
    (tmp_path / "greeter.py").write_text(WORKFLOW)
    out = cli(tmp_path, "run", "greeter:workflow", "--run-id", "greet-2", "--plain", exporter="none")
    assert out.returncode == 0, out.stdout + out.stderr
    assert spans(out.stdout) == []


def test_tether_orchestrate_prints_the_runs_spans(tmp_path):
    """`tether orchestrate` (offline demo) with the console exporter: one trace for the run,
    with a span per stage the orchestrator ran."""
    work = tmp_path / "work"
    out = cli(tmp_path, "orchestrate", "--demo", "--workdir", str(work), "--run-id", "orch-trace")
    assert out.returncode == 0, out.stdout + out.stderr
    found = spans(out.stdout)
    assert found, out.stdout[-2000:]
    assert len({s["context"]["trace_id"] for s in found}) == 1
    workflow = [s for s in found if s["name"].startswith("invoke_workflow")]
    assert len(workflow) == 1
    assert workflow[0]["attributes"]["gen_ai.conversation.id"] == "orch-trace"
    assert sum(s["name"].startswith("invoke_agent") for s in found) >= 2
    assert {s["resource"]["attributes"]["service.name"] for s in found} == {"tether-cli-test"}
