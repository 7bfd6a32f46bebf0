"""``create_app(settings)``: the API, the dashboard and the OpenAPI document as one ASGI app.

The store, the event broadcaster and the executor are opened in the app's lifespan and
reached through dependencies, so a test builds an app on a temporary SQLite file and
calls it through ``httpx.ASGITransport``. Nothing is built at import time.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.context import Thresholds
from tether.errors import ConfigError
from tether.runtime import Workflow
from tether.runtime.runner import Replanner
from tether.runtime.stream import EventBroadcaster
from tether.server.config import ApiToken, ServerSettings
from tether.server.deps import SnapshotCache
from tether.server.executor import Executor
from tether.server.problems import install_problem_handlers, problem
from tether.server.security import CLIENT_HEADER, RequestGuard
from tether.state import ReducerRegistry
from tether.stores.base import CheckpointStore

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["create_app"]

logger = logging.getLogger(__name__)


def create_app(
    settings: ServerSettings | None = None,
    *,
    store: CheckpointStore | None = None,
    workflows: Sequence[Workflow] = (),
    tokens: Sequence[ApiToken] | None = None,
    reducers: ReducerRegistry | None = None,
    thresholds: Thresholds | None = None,
    dashboard: bool = True,
    replanners: Mapping[str, Replanner] | None = None,
    tracer_provider: TracerProvider | None = None,
    recover: bool | None = None,
    store_options: Mapping[str, Any] | None = None,
) -> FastAPI:
    """Build the service.

    Args:
        settings: where the store is, tokens, limits (default: from ``TETHER_*``).
        store: an open store to use instead of opening ``settings.store_url`` (the
            caller keeps ownership and closes it).
        workflows: the workflows the server may start and resume runs of.
        tokens: bearer tokens (default: from the settings); none means open access,
            which ``tether serve`` allows only on a loopback address.
        replanners: by workflow name, what a ``replan`` decision calls to make the new
            remaining steps of that workflow's runs; without one, ``replan`` is not
            offered for them and deciding it answers 409.
        tracer_provider: an OpenTelemetry tracer provider for the runs' spans (default:
            the one ``settings.otel_exporter`` configures, none when that is ``none``).
            With one, the chat models of the registered workflows' steps are wrapped in
            ``TracedModel`` so every model call of a run the server drives is a span.
        recover: without a broker, resume at start the runs this server's workflows were
                executing when it last stopped (default: when the app opens its own store,
                as ``tether serve`` does; an app given ``store`` leaves them to its caller).
        store_options: keyword arguments for ``open_store`` (codec, expiry) when the app opens
            ``settings.store_url`` itself (default: from the ``TETHER_*`` settings).
    """
    from tether.tools.redact import install_log_redaction

    install_log_redaction()  # the server's logs (uvicorn's included) never carry a secret
    cfg = settings or ServerSettings()
    unknown = sorted(set(replanners or {}) - {wf.name for wf in workflows})
    if unknown:
        raise ConfigError(f"replanners for workflows that are not registered: {', '.join(unknown)}")
    known = list(cfg.tokens() if tokens is None else tokens)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            opened = store
            if opened is None:
                from tether.settings import Settings
                from tether.stores import open_store

                chosen = (
                    dict(store_options)
                    if store_options is not None
                    else Settings(store_url=cfg.store_url).store_options()
                )
                opened = await stack.enter_async_context(open_store(cfg.store_url, **chosen))
            events = EventBroadcaster()
            dispatcher = _dispatcher(cfg, stack)
            executor = Executor(
                opened,
                events,
                workflows,
                reducers=reducers,
                thresholds=thresholds,
                replanners=replanners,
                dispatcher=dispatcher,
            )
            app.state.store = opened
            app.state.events = events
            app.state.executor = executor
            from tether.server.api_events import relay_store_changes

            await stack.enter_async_context(relay_store_changes(opened, events))  # runs run anywhere
            provider = tracer_provider
            if provider is None and cfg.otel_exporter != "none":
                from tether.tracing import configure_exporter

                provider = configure_exporter(cfg.otel_exporter)
            if provider is None:  # the standard OTEL_TRACES_EXPORTER / OTEL_SERVICE_NAME variables
                from tether.tracing import configure_from_env

                provider = configure_from_env()
            if provider is not None:
                from tether.tracing import RunTracer, trace_models

                tracer = RunTracer(provider)
                stack.callback(tracer.shutdown)
                executor.taps.append(tracer.on_event)
                for wf in workflows:
                    wrapped = trace_models(wf, provider)
                    logger.info("workflow %s: %d chat model(s) traced", wf.name, wrapped)
            if dispatcher is None and (store is None if recover is None else recover):
                await executor.recover()  # one process, no broker: continue what it was executing
            try:
                yield
            finally:
                await executor.aclose()

    app = FastAPI(
        title="tether",
        summary="Runs, checkpoints, context and failures of long-running agents.",
        version="1",
        lifespan=lifespan,
        openapi_url="/api/openapi.json",
        docs_url=None,  # served from the package, never a CDN (tether.server.apidocs)
        redoc_url=None,
    )
    app.state.tokens = {t.digest: t for t in known}
    app.state.snapshots = SnapshotCache(cfg.snapshot_cache_bytes)
    app.state.settings = cfg
    install_problem_handlers(app)
    from tether.server.apidocs import mount_docs

    mount_docs(app, "/api/openapi.json")

    from tether.server import (
        api_checkpoints,
        api_context,
        api_events,
        api_failures,
        api_orchestrator,
        api_prompts,
        api_runs,
        api_workers,
    )

    for module in (
        api_runs,
        api_checkpoints,
        api_context,
        api_failures,
        api_events,
        api_prompts,
        api_orchestrator,
        api_workers,
    ):
        app.include_router(module.router)
    if dashboard:
        from tether.server import dashboard as pages

        pages.mount(app)
    from tether.server.fastpath import SnapshotFastPath

    app.add_middleware(SnapshotFastPath)  # inside CORS and the guard: they still see every read
    origins = cfg.origins()
    if origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST", "PATCH"],
            allow_headers=[
                "Authorization",
                "Content-Type",
                "Last-Event-ID",
                "If-None-Match",
                "A-IM",
                CLIENT_HEADER,
            ],
            expose_headers=["ETag", "IM", "Delta-Base"],  # what a delta-reading client keeps
        )
    app.add_middleware(BodyLimit, limit=cfg.max_body_bytes)
    # outermost: a rebound Host or a cross-site post is refused before anything else runs
    app.add_middleware(RequestGuard, listen=cfg.host, allowed_hosts=cfg.hosts(), origins=origins)
    return app


class BodyLimit:
    """413 for a body over ``limit`` bytes, declared or streamed (chunked)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._refuse(scope, receive, send)
            return
        seen = 0
        refused = False

        async def limited() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request" and not refused:
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    refused = True
                    await self._refuse(scope, receive, send)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            if not refused:  # the 413 already went out: drop what the app answers
                await send(message)

        await self.app(scope, limited, guarded_send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem(
            413, "body-too-large", "Request body too large", f"the limit is {self.limit} bytes"
        )
        await response(scope, receive, send)


def _dispatcher(cfg: ServerSettings, stack: AsyncExitStack) -> Any:
    """With ``TETHER_BROKER_URL``, runs are enqueued for ``tether worker`` (Celery loads only then)."""
    if not cfg.broker_url:
        return None
    from tether.workers import Dispatcher

    dispatcher = Dispatcher.from_url(cfg.broker_url, queue=cfg.broker_queue)
    stack.callback(dispatcher.close)
    return dispatcher
