"""One trace for a run started in one process, paused, and resumed and finished in another,
with every span's attributes checked against the GenAI conventions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import tether.models
from tests.models._server import FakeServer, chat_chunks
from tether.agent import AgentLoop
from tether.models import LLMConfig, OpenAIChatModel
from tether.state import RunStatus
from tether.stores import open_store
from tether.tools import LocalSession
from tether.tracing import RunTracer, TracedModel, run_trace_id

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from tether.agent import AgentLoop
    from tether.models import ScriptedModel
    from tether.stores import open_store
    from tether.tools import LocalSession
    from tether.tracing import RunTracer, TracedModel

    url, run_id, work, out = sys.argv[1:5]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    question = {"action": "ask_user", "question": "Which port?", "options": ["80", "8080"]}
    model = TracedModel(ScriptedModel([{"action": "execute", "command": "echo one"}, question]), provider=provider)

    async def main():
        async with open_store(url) as store:
            tracer = RunTracer(provider)
            result = await AgentLoop(model, LocalSession(cwd=work), store, on_event=tracer.on_event).start(run_id, "g")
            assert str(result.status) == "PAUSED", result.status
            tracer.shutdown()

    asyncio.run(main())
    spans = [
        {"name": s.name, "trace": s.context.trace_id, "span": s.context.span_id,
         "parent": s.parent.span_id if s.parent else None, "kind": s.kind.name, "attrs": dict(s.attributes)}
        for s in exporter.get_finished_spans()
    ]
    open(out, "w").write(json.dumps(spans))
    """
)

OPERATIONS = {"invoke_workflow", "invoke_agent", "chat", "execute_tool"}


def check_conventions(attrs: dict, kind: str) -> None:
    """Every span names its operation; chat spans their provider, model and conversation."""
    op = attrs["gen_ai.operation.name"]
    assert op in OPERATIONS
    if op in ("invoke_workflow", "invoke_agent", "chat"):
        assert attrs["gen_ai.conversation.id"].startswith("trace-run-")
    if op == "chat":
        assert (
            attrs["gen_ai.provider.name"] and attrs["gen_ai.request.model"] and attrs["gen_ai.response.model"]
        )
        assert attrs["gen_ai.provider.name"] == attrs["gen_ai.system"]  # the default: both names
        assert attrs["gen_ai.usage.input_tokens"] > 0 and attrs["gen_ai.output.type"] == "json"
    if op == "invoke_workflow":
        assert attrs["gen_ai.workflow.name"] == "agent"


@pytest.mark.slow
async def test_one_trace_across_a_pause_and_a_second_process(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path}/trace.db"
    run_id = "trace-run-1"
    out = tmp_path / "spans.json"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    env.pop("OTEL_SEMCONV_STABILITY_OPT_IN", None)
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    subprocess.run([sys.executable, "-c", CHILD, url, run_id, str(tmp_path), str(out)], env=env, check=True)
    first = json.loads(out.read_text())

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    monkeypatch.setattr(tether.models, "ALLOW_MODEL_REQUESTS", False)  # loopback only
    server = FakeServer().start()
    try:
        reply = json.dumps({"action": "done", "message": "on 8080"})
        server.script(chat_chunks([reply[:9], reply[9:]], model="gpt-4o-mini"))  # the loop streams
        cfg = LLMConfig(
            provider="openai-compatible", model="gpt-4o-mini", endpoint=f"{server.url}/v1", max_retries=0
        )
        async with open_store(url) as store, OpenAIChatModel(cfg) as remote:
            tracer = RunTracer(provider)
            model = TracedModel(remote, provider=provider, meter_provider=meters)
            loop = AgentLoop(model, LocalSession(cwd=tmp_path), store, on_event=tracer.on_event)
            result = await loop.answer(run_id, "8080")
            tracer.shutdown()
    finally:
        server.stop()
    assert result.status is RunStatus.COMPLETED, result.state.get("last_error")
    second = exporter.get_finished_spans()

    trace_id, root = run_trace_id(run_id)
    assert {s["trace"] for s in first} == {trace_id} == {s.context.trace_id for s in second}
    segments = [s for s in first if s["attrs"]["gen_ai.operation.name"] == "invoke_workflow"]
    segments += [
        {"parent": s.parent.span_id, "attrs": dict(s.attributes)}
        for s in second
        if s.attributes["gen_ai.operation.name"] == "invoke_workflow"
    ]
    assert [s["attrs"]["tether.segment"] for s in segments] == ["started", "resumed"]
    assert all(s["parent"] == root for s in segments)  # both under the run's root
    for s in first:
        check_conventions(s["attrs"], s["kind"])
    for s in second:
        check_conventions(dict(s.attributes), s.kind.name)
    local = [s for s in first if s["attrs"]["gen_ai.operation.name"] == "chat"]
    assert local and all(
        s["kind"] == "INTERNAL" and s["attrs"]["gen_ai.provider.name"] == "scripted" for s in local
    )
    (chat,) = [s for s in second if s.attributes["gen_ai.operation.name"] == "chat"]
    assert chat.kind is SpanKind.CLIENT and chat.attributes["server.address"] == "127.0.0.1"
    assert chat.attributes["gen_ai.provider.name"] == "openai-compatible"
    names = {
        m.name
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} <= names


async def test_latest_conventions_drop_the_old_provider_attribute(monkeypatch):
    """With the opt-in, only gen_ai.provider.name is set; a failure records error.type."""
    from tether.errors import ModelUnavailable
    from tether.models import ScriptedModel

    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "http,gen_ai_latest_experimental")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    model = TracedModel(ScriptedModel(["ok", ModelUnavailable("down")]), provider=provider)
    await model.complete([{"role": "user", "content": "hi"}])
    try:
        await model.complete([{"role": "user", "content": "again"}])
    except ModelUnavailable:
        pass
    ok, failed = exporter.get_finished_spans()
    assert "gen_ai.system" not in ok.attributes and ok.attributes["gen_ai.provider.name"] == "scripted"
    assert failed.attributes["error.type"] == "ModelUnavailable" and not failed.status.is_ok
