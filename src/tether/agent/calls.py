"""The agent loop's model call, as recorded and as asked: the I/O-free half of it.

* :class:`CallLog` turns each call into a prompt record (a delta against the run's previous
  call, see :mod:`tether.context.records`) that the loop appends to the state's
  ``prompt_log``, so ``tether prompt`` and ``tether replay`` can show and re-run it.
* :meth:`CallLog.options` says what to ask the model for beyond the messages: the action's
  JSON schema (native structured outputs where the provider has them) and, when someone
  listens to the run's events, a stream of ``model_delta`` events while the reply is
  written. A model whose ``complete`` predates those keywords is called without them.
* :func:`stream_events_to` lets whoever drives a loop's workflow without owning the loop
  (the server's executor, a worker) receive those ``model_delta`` events too.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tether.agent.actions import AgentAction
from tether.context.records import PROMPT_LOG_KEY, PromptRecorder
from tether.context.window import LAYER_TITLES, ContextWindow
from tether.models.base import ChatModel, ModelReply, OutputSchema
from tether.runtime import Event
from tether.state import ExecutionContext

__all__ = ["ACTION_SCHEMA", "DELTA_EVENT", "CallLog", "accepted_keywords", "provider_of", "stream_events_to"]

ACTION_SCHEMA = OutputSchema.from_model(
    AgentAction,
    name="agent_action",
    description="The agent's next action: run a command, read an artifact, ask the user, or finish.",
)
DELTA_EVENT = "model_delta"
"""The event kind of a piece of a reply as it streams (never checkpointed)."""


_SINK: contextvars.ContextVar[Callable[[Event], None] | None] = contextvars.ContextVar(
    "tether_delta_sink", default=None
)


@contextlib.contextmanager
def stream_events_to(sink: Callable[[Event], None]) -> Iterator[None]:
    """Send the ``model_delta`` events of every agent loop that calls its model inside this
    block (in this task and the tasks it starts) to ``sink`` as well as to the loop's own
    ``on_event``.

    A server runs registered workflows whose loops were built without its event bus; the
    runner's events reach the bus, but a reply's pieces come from inside a step. Setting
    the sink around the run's task is how they reach the API's SSE and the dashboard.
    """
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)


def provider_of(model: Any) -> str:
    """The provider's name in the OpenTelemetry GenAI vocabulary (``openai``,
    ``anthropic``, ``gcp.gemini``, …), else the client's own name for itself."""
    name = getattr(model, "provider_name", None)
    if isinstance(name, str) and name:
        return name
    wrapped = getattr(model, "wrapped", None)
    if wrapped is not None and wrapped is not model:
        return provider_of(wrapped)
    return type(model).__name__.removesuffix("Model").lower() or "unknown"


def accepted_keywords(model: Any) -> frozenset[str]:
    try:
        params = inspect.signature(model.complete).parameters
    except (TypeError, ValueError):
        return frozenset()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return frozenset({"schema", "on_delta"})
    return frozenset(params)


class CallLog:
    """Records a loop's model calls and says how to make them; one per :class:`AgentLoop`.

    Args:
        model: the loop's chat model (read for its name, provider and keywords).
        redact: applied to the reply before it is stored (prompts are already redacted).
        structured: ask for the action's schema natively (False: plain JSON mode only).
    """

    def __init__(
        self, model: ChatModel, *, redact: Callable[[str], str] = str, structured: bool = True
    ) -> None:
        self.model = model
        self.redact = redact
        self.structured = structured
        self._recorder = PromptRecorder()
        self._keywords = accepted_keywords(model)

    def options(self, run_id: str, step: str, emit: Callable[[Event], None] | None) -> dict[str, Any]:
        """Keywords for ``model.complete`` besides the messages and ``json_mode``."""
        out: dict[str, Any] = {}
        if self.structured and "schema" in self._keywords:
            out["schema"] = ACTION_SCHEMA
        sink = _SINK.get()
        sinks = [s for s in (emit, sink if sink is not emit else None) if s is not None]
        if sinks and "on_delta" in self._keywords:
            seq = [0]

            def delta(text: str) -> None:
                seq[0] += 1
                event = Event(
                    kind=DELTA_EVENT, run_id=run_id, step=step, detail={"seq": seq[0], "text": text}
                )
                for listener in sinks:
                    try:
                        listener(event)
                    except Exception:  # a listener's failure must not cut the model's reply
                        pass

            out["on_delta"] = delta
        return out

    def record(
        self,
        run_id: str,
        state: Mapping[str, Any] | ExecutionContext,
        window: ContextWindow,
        reply: ModelReply,
        *,
        iteration: int,
    ) -> dict[str, Any]:
        """The prompt record of the call that just returned ``reply`` from ``window``.

        The window must be as it was sent (the loop records before it adds the turn's
        items), so its messages are exactly what the model received.
        """
        items = window.items()
        messages = window.to_messages("openai")  # one message per item: meta lines up
        meta = [{"id": i.id, "layer": int(i.layer), "kind": i.kind, "tokens": i.tokens} for i in items]
        usage = window.usage()
        fields: dict[str, Any] = {
            "iteration": iteration,
            "ts": dt.datetime.now(dt.UTC).isoformat(),
            "provider": provider_of(self.model),
            "model": str(getattr(self.model, "model", "") or reply.model),
            "responseModel": reply.model,
            "settings": self._settings(),
            "tokens": usage.tokens,
            "rawTokens": usage.raw_tokens,
            "budget": usage.budget,
            "layers": {LAYER_TITLES[layer]: lu.tokens for layer, lu in usage.layers.items()},
            "reply": self.redact(reply.text),
            "finishReason": reply.finish_reason,
        }
        if reply.usage is not None:
            fields["usage"] = {"input": reply.usage.prompt_tokens, "output": reply.usage.completion_tokens}
        records = state.get(PROMPT_LOG_KEY) or []
        return self._recorder.record(run_id, records, messages, meta, **fields)

    def _settings(self) -> dict[str, Any]:
        config = getattr(self.model, "config", None)
        settings: dict[str, Any] = {"jsonMode": True}
        if self.structured and "schema" in self._keywords:
            settings["schema"] = ACTION_SCHEMA.name
        for name in ("temperature", "max_tokens"):
            value = getattr(config, name, None)
            if value is not None:
                settings[name] = value
        return settings
