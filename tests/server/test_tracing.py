"""Runs as OpenTelemetry spans in the GenAI conventions, caught by an in-memory exporter."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.server.conftest import new_id
from tether.models import ScriptedModel
from tether.runtime import DataError, PolicyDecisions, Runner, Step, StepContext, Workflow
from tether.runtime.failures import FailureKind
from tether.runtime.report import Decision
from tether.stores import open_store
from tether.tracing import RunTracer, TracedModel


def provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    p = TracerProvider()
    p.add_span_processor(SimpleSpanProcessor(exporter))
    return p, exporter


async def test_workflow_agent_chat_and_tool_spans_nest(tmp_path):
    """invoke_workflow > invoke_agent > chat / execute_tool, with tether's attributes."""
    prov, exporter = provider()
    tracer = RunTracer(prov, workflow="deploy")
    model = TracedModel(ScriptedModel(["hello"]), provider=prov)

    async def think(sc: StepContext) -> dict:
        reply = await model.complete([{"role": "user", "content": "hi"}])
        tracer.on_event(type_event("command", sc.run_id, sc.step.id, command="ls"))
        tracer.on_event(type_event("command_result", sc.run_id, sc.step.id, exit_code=0))
        return {"think_output": reply.text}

    def boom(sc: StepContext) -> dict:
        raise DataError("missing")

    wf = Workflow([Step(id="think", fn=think), Step(id="fetch", fn=boom)], name="deploy")
    async with open_store(f"sqlite:///{tmp_path}/t.db") as store:
        runner = Runner(
            wf,
            store,
            on_event=tracer.on_event,
            decisions=PolicyDecisions({FailureKind.DATA: Decision.SKIP}),
        )
        result = await runner.start(new_id("otel"))
    assert str(result.status) == "COMPLETED"
    spans = {s.name: s for s in exporter.get_finished_spans()}
    run = spans["invoke_workflow deploy"]
    step = spans["invoke_agent think"]
    chat = next(s for n, s in spans.items() if n.startswith("chat "))
    tool = spans["execute_tool shell"]
    assert run.attributes["gen_ai.operation.name"] == "invoke_workflow"
    assert run.attributes["tether.run_id"] == result.run_id and run.attributes["tether.status"] == "COMPLETED"
    assert step.parent.span_id == run.context.span_id
    assert (
        step.attributes["gen_ai.operation.name"] == "invoke_agent" and step.attributes["tether.version"] >= 2
    )
    assert chat.parent.span_id == step.context.span_id
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert tool.parent.span_id == step.context.span_id and tool.attributes["gen_ai.tool.name"] == "shell"
    failed = spans["invoke_agent fetch"]
    assert failed.status.status_code.name == "ERROR" and failed.attributes["error.type"] == "data"
    assert any(e.name == "decision" for e in run.events)


def type_event(kind, run_id, step, **detail):
    from tether.runtime import Event

    return Event(kind=kind, run_id=run_id, step=step, detail=detail)


def test_importing_tether_does_not_import_opentelemetry():
    """OpenTelemetry is an optional extra: plain `import tether` leaves it alone."""
    import subprocess
    import sys

    code = "import sys, tether, tether.tracing; print('opentelemetry' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
