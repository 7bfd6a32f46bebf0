"""OpenTelemetry spans for runs, in the GenAI semantic conventions.

A run is an ``invoke_workflow`` span; each step an ``invoke_agent`` span inside it;
each command a step runs an ``execute_tool`` span; each model call made through
:class:`TracedModel` a ``chat`` span. tether's own attributes (``tether.run_id``,
``tether.step``, ``tether.version``, ``tether.context.*``) ride along, and usage
crossings, compressions, rollbacks and decisions are span events.

One run is one trace, across pauses, resumes and processes: its trace id is derived
from the run id, so every segment of the run (the first start, each resume, in any
process) is a span of the same trace under the same remote parent, and the caller's
active span, if any, is linked. Each chat span carries ``gen_ai.conversation.id`` (the
run id), is a CLIENT span for a remote model (with ``server.address``/``server.port``),
names its provider as the conventions do (``openai``, ``anthropic``, ``gcp.gemini``) and
records ``error.type`` when the call fails. The GenAI metrics
``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration`` are recorded
on the global (or given) meter provider.

Conventions version: by default both ``gen_ai.provider.name`` and the older
``gen_ai.system`` are set; with ``OTEL_SEMCONV_STABILITY_OPT_IN`` containing
``gen_ai_latest_experimental`` only the newest names are.

Needs the ``otel`` extra; nothing is imported until a tracer is built, and nothing
is exported unless :func:`configure_exporter` (or your own SDK set-up) says where::

    tracer = RunTracer(configure_exporter("console"))
    runner = Runner(workflow, store, on_event=tracer.on_event)

:func:`configure_from_env` does the same from the standard ``OTEL_TRACES_EXPORTER`` and
``OTEL_SERVICE_NAME`` variables (the CLI and the server call it).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from tether.runtime.events import Event

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider

    from tether.models.base import ChatModel, DeltaSink, ModelReply, OutputSchema
    from tether.runtime.workflow import Workflow

__all__ = [
    "RunTracer",
    "TracedModel",
    "configure_exporter",
    "configure_from_env",
    "latest_conventions",
    "run_trace_id",
    "trace_models",
]

RUN_KEY = "tether.run_id"
"""The OpenTelemetry context key holding the run of the step being traced."""


def latest_conventions(environ: Mapping[str, str] | None = None) -> bool:
    """True when ``OTEL_SEMCONV_STABILITY_OPT_IN`` asks for the latest GenAI conventions."""
    env = os.environ if environ is None else environ
    values = {v.strip() for v in env.get("OTEL_SEMCONV_STABILITY_OPT_IN", "").split(",")}
    return "gen_ai_latest_experimental" in values


def _provider_attrs(name: str) -> dict[str, str]:
    if latest_conventions():
        return {"gen_ai.provider.name": name}
    return {"gen_ai.provider.name": name, "gen_ai.system": name}


def run_trace_id(run_id: str) -> tuple[int, int]:
    """The trace id of a run and the span id of its (virtual) root, from the run id alone:
    every process that traces the run finds the same trace without reading anything."""
    digest = hashlib.sha256(f"tether-run:{run_id}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


logger = logging.getLogger(__name__)

_END = {"completed": "COMPLETED", "paused": "PAUSED", "cancelled": "CANCELLED", "failed": "FAILED"}
_MARKS = {
    "usage_crossed",
    "compressed",
    "decision",
    "rollback_action",
    "rollback_failed",
    "state_restored",
    "replanned",
    "stop_requested",
    "phase_done",
    "state_updated",
}


def configure_exporter(kind: Literal["console", "otlp"]) -> TracerProvider:
    """An SDK tracer provider exporting to the console or to OTLP over HTTP (configured by
    the standard ``OTEL_EXPORTER_OTLP_*`` variables)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider as SdkProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    env = os.environ
    named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    provider = SdkProvider(resource=Resource.create({} if named else {"service.name": "tether"}))
    exporter: SpanExporter
    if kind == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    else:
        exporter = ConsoleSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def configure_from_env(environ: Mapping[str, str] | None = None) -> TracerProvider | None:
    """A tracer provider as the standard variables ask (``OTEL_TRACES_EXPORTER`` =
    ``console`` or ``otlp``; ``OTEL_SERVICE_NAME``; ``OTEL_EXPORTER_OTLP_*``), made the
    global one; None when tracing is not asked for (unset or ``none``)."""
    env = os.environ if environ is None else environ
    kind = env.get("OTEL_TRACES_EXPORTER", "").strip().split(",")[0].strip().lower()
    if kind not in ("console", "otlp"):
        return None
    from opentelemetry import trace

    provider = configure_exporter(kind)  # type: ignore[arg-type]
    trace.set_tracer_provider(provider)
    return provider


class _Metrics:
    """The GenAI client metrics (token usage and operation duration)."""

    def __init__(self, meter_provider: MeterProvider | None) -> None:
        from opentelemetry import metrics

        meter = (meter_provider or metrics.get_meter_provider()).get_meter("tether")
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens used per model call"
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="Duration of a model call"
        )


class RunTracer:
    """Turns a run's events into spans; pass :meth:`on_event` as a Runner's ``on_event``."""

    def __init__(self, provider: TracerProvider | None = None, *, workflow: str | None = None) -> None:
        from opentelemetry import trace

        self._trace = trace
        self._provider = provider
        self._tracer = (provider or trace.get_tracer_provider()).get_tracer("tether")
        self.workflow = workflow
        self._runs: dict[str, Span] = {}
        self._steps: dict[tuple[str, str], tuple[Span, Any]] = {}
        self._tools: dict[tuple[str, str], Span] = {}

    def on_event(self, event: Event) -> None:
        try:
            self._handle(event)
        except Exception:  # tracing must never break a run
            logger.exception("tracing failed on %s", event.kind)

    def _run_span(self, event: Event) -> Span:
        span = self._runs.get(event.run_id)
        if span is None:
            name = self.workflow or event.detail.get("workflow") or "workflow"
            from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags

            trace_id, root_id = run_trace_id(event.run_id)
            root = SpanContext(trace_id, root_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
            caller = self._trace.get_current_span().get_span_context()
            links = [Link(caller)] if caller.is_valid and caller.trace_id != trace_id else []
            span = self._tracer.start_span(
                f"invoke_workflow {name}",
                context=self._trace.set_span_in_context(NonRecordingSpan(root)),
                links=links,
                attributes={
                    "gen_ai.operation.name": "invoke_workflow",
                    "gen_ai.workflow.name": str(name),
                    "gen_ai.conversation.id": event.run_id,
                    "tether.run_id": event.run_id,
                    "tether.segment": "resumed" if event.kind == "run_resumed" else "started",
                },
            )
            self._runs[event.run_id] = span
        return span

    def _handle(self, event: Event) -> None:
        kind, run_id, d = event.kind, event.run_id, event.detail
        if kind in ("run_started", "run_resumed"):
            span = self._run_span(event)
            span.add_event(kind, {k: str(v) for k, v in d.items()})
        elif kind == "step_started" and event.step:
            parent = self._trace.set_span_in_context(self._run_span(event))
            span = self._tracer.start_span(
                f"invoke_agent {d.get('name') or event.step}",
                context=parent,
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": str(d.get("name") or event.step),
                    "gen_ai.agent.id": event.step,
                    "gen_ai.conversation.id": run_id,
                    "tether.run_id": run_id,
                    "tether.step": event.step,
                },
            )
            # current while the step runs, so chat and tool spans nest under it
            from opentelemetry import context

            ctx = context.set_value(RUN_KEY, run_id, self._trace.set_span_in_context(span))
            token = context.attach(ctx)
            self._steps[(run_id, event.step)] = (span, token)
        elif kind in ("step_done", "step_failed") and event.step:
            self._end_step(event)
        elif kind == "step_retry" and event.step:
            found = self._steps.get((run_id, event.step))
            if found:
                found[0].add_event(
                    "retry", {"attempt": int(d.get("attempt", 0)), "error": str(d.get("error"))}
                )
        elif kind == "command":
            step_span = self._current(run_id, event.step)
            self._tools[(run_id, event.step or "")] = self._tracer.start_span(
                "execute_tool shell",
                context=self._trace.set_span_in_context(step_span) if step_span else None,
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "shell",
                    "gen_ai.tool.type": "function",
                    "tether.run_id": run_id,
                    "tether.command": str(d.get("command", ""))[:500],
                },
            )
        elif kind == "command_result":
            tool = self._tools.pop((run_id, event.step or ""), None)
            if tool is not None:
                code = int(d.get("exit_code", 0) or 0)
                tool.set_attribute("tether.exit_code", code)
                if code != 0:
                    tool.set_status(self._trace.StatusCode.ERROR, f"exit {code}")
                tool.end()
        elif kind == "context_usage":
            target = self._current(run_id, None) or self._runs.get(run_id)
            if target is not None:
                target.set_attribute("tether.context.tokens", int(d.get("tokens", 0)))
                target.set_attribute("tether.context.budget", int(d.get("budget", 0)))
                target.set_attribute("tether.context.ratio", float(d.get("ratio", 0.0)))
        elif kind in _MARKS:
            target = self._runs.get(run_id)
            if target is not None:
                target.add_event(kind, {k: str(v) for k, v in d.items()})
        elif kind in _END:
            ended = self._runs.pop(run_id, None)
            if ended is not None:
                span = ended
                span.set_attribute("tether.status", _END[kind])
                if "version" in d:
                    span.set_attribute("tether.version", int(d["version"]))
                if kind == "failed":
                    span.set_status(self._trace.StatusCode.ERROR, "run failed")
                span.end()

    def _current(self, run_id: str, step: str | None) -> Span | None:
        if step is not None and (run_id, step) in self._steps:
            return self._steps[(run_id, step)][0]
        for (rid, _s), (span, _t) in reversed(self._steps.items()):
            if rid == run_id:
                return span
        return None

    def _end_step(self, event: Event) -> None:
        assert event.step is not None
        found = self._steps.pop((event.run_id, event.step), None)
        if found is None:
            return
        span, token = found
        from opentelemetry import context

        try:
            context.detach(token)
        except Exception:  # detached from another context: the span still ends
            pass
        d = event.detail
        if "version" in d:
            span.set_attribute("tether.version", int(d["version"]))
        if "attempts" in d:
            span.set_attribute("tether.attempts", int(d["attempts"]))
        if event.kind == "step_failed":
            span.set_attribute("error.type", str(d.get("failure", "error")))
            span.set_status(self._trace.StatusCode.ERROR, str(d.get("error", ""))[:200])
        span.end()

    def shutdown(self) -> None:
        """End open spans and flush the provider (when it is an SDK one)."""
        for span, _token in self._steps.values():
            span.end()
        for span in self._runs.values():
            span.end()
        self._steps.clear()
        self._runs.clear()
        if self._provider is not None and hasattr(self._provider, "shutdown"):
            self._provider.shutdown()


class TracedModel:
    """A chat model whose every call is a ``chat`` span (GenAI conventions), nested under
    the step that made it, and whose tokens and duration feed the GenAI metrics.

    ``system`` overrides the provider name (default: the model's ``provider_name``).
    """

    def __init__(
        self,
        model: ChatModel,
        *,
        provider: TracerProvider | None = None,
        system: str = "",
        meter_provider: MeterProvider | None = None,
    ) -> None:
        from opentelemetry import trace

        self.wrapped = model
        self._trace = trace
        self._tracer = (provider or trace.get_tracer_provider()).get_tracer("tether")
        self._metrics = _Metrics(meter_provider)
        name = getattr(model, "provider_name", None)
        self.system = system or (name if isinstance(name, str) and name else type(model).__name__.lower())

    @property
    def provider_name(self) -> str:
        return self.system

    def __getattr__(self, name: str) -> Any:
        """Everything but ``complete`` is the wrapped model's (its name, limits, counters)."""
        wrapped = self.__dict__.get("wrapped")
        if wrapped is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(wrapped, name)

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        json_mode: bool = False,
        max_tokens: int | None = None,
        temperature: float | None = None,
        schema: OutputSchema | None = None,
        on_delta: DeltaSink | None = None,
    ) -> ModelReply:
        from opentelemetry import context
        from opentelemetry.trace import SpanKind

        name = str(getattr(self.wrapped, "model", "") or getattr(self.wrapped, "name", "") or "model")
        common: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            **_provider_attrs(self.system),
            "gen_ai.request.model": name,
        }
        attrs = dict(common)
        run_id = context.get_value(RUN_KEY)
        if isinstance(run_id, str):
            attrs["gen_ai.conversation.id"] = run_id
        address = getattr(self.wrapped, "server_address", None)
        kind = SpanKind.INTERNAL
        if isinstance(address, tuple) and address and address[0]:
            kind = SpanKind.CLIENT  # a remote model: the span is the client side of a call
            attrs["server.address"] = address[0]
            if address[1]:
                attrs["server.port"] = address[1]
                common["server.port"] = address[1]
            common["server.address"] = address[0]
        if max_tokens is not None:
            attrs["gen_ai.request.max_tokens"] = max_tokens
        if temperature is not None:
            attrs["gen_ai.request.temperature"] = temperature
        if schema is not None or json_mode:
            attrs["gen_ai.output.type"] = "json"
        kwargs: dict[str, Any] = {
            "json_mode": json_mode,
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        if schema is not None:
            kwargs["schema"] = schema
        if on_delta is not None:
            kwargs["on_delta"] = on_delta
        started = time.monotonic()
        with self._tracer.start_as_current_span(
            f"chat {name}", kind=kind, attributes=attrs, record_exception=True, set_status_on_exception=True
        ) as span:
            try:
                reply = await self.wrapped.complete(messages, **kwargs)
            except Exception as exc:
                span.set_attribute("error.type", type(exc).__qualname__)
                self._metrics.duration.record(
                    time.monotonic() - started, {**common, "error.type": type(exc).__qualname__}
                )
                raise
            span.set_attribute("gen_ai.response.model", reply.model)
            if reply.finish_reason:
                span.set_attribute("gen_ai.response.finish_reasons", [reply.finish_reason])
            measured = {**common, "gen_ai.response.model": reply.model}
            self._metrics.duration.record(time.monotonic() - started, measured)
            if reply.usage is not None:
                span.set_attribute("gen_ai.usage.input_tokens", reply.usage.prompt_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", reply.usage.completion_tokens)
                self._metrics.tokens.record(
                    reply.usage.prompt_tokens, {**measured, "gen_ai.token.type": "input"}
                )
                self._metrics.tokens.record(
                    reply.usage.completion_tokens, {**measured, "gen_ai.token.type": "output"}
                )
            return reply


def trace_models(workflow: Workflow, provider: TracerProvider | None = None) -> int:
    """Make every chat model the workflow's steps call a :class:`TracedModel`, in place.

    A server that drives runs of workflows it was handed cannot change their code, but
    their models are reachable: a step that is a bound method (as ``AgentLoop.workflow()``
    and the plan orchestrator build) or a callable object keeps its model in an attribute
    of its owner, and that attribute is replaced by the traced wrapper. Models already
    traced are left alone, so calling this twice wraps nothing twice. Models captured in
    a plain function's closure are not reached: wrap those in ``TracedModel`` yourself.

    Returns how many models were wrapped.
    """
    from tether.models.base import ChatModel

    wrapped = 0
    seen: set[int] = set()
    for step in workflow.steps:
        owner = getattr(step.fn, "__self__", None)
        if owner is None and not _is_function(step.fn):
            owner = step.fn  # a callable object
        if owner is None or id(owner) in seen:
            continue
        seen.add(id(owner))
        names = list(vars(owner)) if hasattr(owner, "__dict__") else []
        names += [n for n in getattr(type(owner), "__slots__", ()) if isinstance(n, str)]
        for name in names:
            value = getattr(owner, name, None)
            if isinstance(value, ChatModel) and not isinstance(value, TracedModel) and value is not owner:
                try:
                    setattr(owner, name, TracedModel(value, provider=provider))
                except (AttributeError, TypeError):  # a read-only attribute: leave it
                    continue
                wrapped += 1
    return wrapped


def _is_function(fn: Any) -> bool:
    import functools
    import types

    return isinstance(fn, types.FunctionType | types.BuiltinFunctionType | functools.partial)
