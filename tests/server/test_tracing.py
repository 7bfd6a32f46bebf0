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


class Planner:
    """A step owner keeping its model in an attribute, as AgentLoop does."""

    def __init__(self, model):
        self.model = model

    async def think(self, sc):
        reply = await self.model.complete([{"role": "user", "content": f"plan {sc.run_id}"}])
        return {"think_output": reply.text}


async def test_runs_the_server_drives_trace_their_model_calls_without_code_changes(tmp_path):
    """With a tracer provider the server wraps the workflow's models: each model call of a
    run it drives is a chat span inside the step's invoke_agent span."""
    import asyncio

    import httpx

    from tether.server import ServerSettings, create_app

    prov, exporter = provider()
    planner = Planner(ScriptedModel(["first plan", "second plan"]))
    wf = Workflow([Step(id="think", fn=planner.think)], name="planning")
    async with open_store(f"sqlite:///{tmp_path}/t.db") as store:
        app = create_app(ServerSettings(), store=store, workflows=[wf], tokens=[], tracer_provider=prov)
        async with app.router.lifespan_context(app):
            assert isinstance(planner.model, TracedModel)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
                for rid in ("otel-a", "otel-b"):
                    r = await client.post("/api/runs", json={"workflow": "planning", "runId": rid})
                    assert r.status_code == 202
                    result = await asyncio.wait_for(app.state.executor.join(rid), 10)
                    assert str(result.status) == "COMPLETED"
    spans = exporter.get_finished_spans()
    chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    steps = {s.context.span_id: s for s in spans if s.name == "invoke_agent think"}
    runs = {s.attributes["tether.run_id"]: s for s in spans if s.name.startswith("invoke_workflow")}
    assert len(chats) == 2 and set(runs) == {"otel-a", "otel-b"}
    for chat in chats:
        step = steps[chat.parent.span_id]
        assert step.attributes["tether.run_id"] in runs
        assert step.parent.span_id == runs[step.attributes["tether.run_id"]].context.span_id
        assert chat.attributes["gen_ai.provider.name"] == "scripted"


def test_trace_models_wraps_once_and_keeps_the_models_attributes():
    """A second call wraps nothing; the wrapper answers for the wrapped model's attributes."""
    from tether.tracing import trace_models

    prov, _ = provider()
    inner = ScriptedModel(["x"])
    planner = Planner(inner)
    wf = Workflow([Step(id="a", fn=planner.think), Step(id="b", fn=planner.think)], name="twice")
    assert trace_models(wf, prov) == 1 and trace_models(wf, prov) == 0
    assert planner.model.wrapped is inner and planner.model.usage is inner.usage
