"""The snapshot read without the framework's per-request work, for the readers that poll it.

Dashboards re-read a run's snapshot after every event, so ``GET /api/runs/{id}/snapshot``
is the request a busy server answers most, and mostly with a 304 or a small delta. Through
FastAPI most of such an answer's CPU goes to solving the route's dependencies (profiled under
benchmarks/bench_server.py, whose section in benchmarks/README.md has the figures); fifty
readers in a queue wait for fifty of those.

This middleware answers that one route itself when the request is the plain case: a GET,
no query or only ``keys=camel|snake``, a token (or open access) that may read the run.
It calls the same :func:`tether.server.api_runs.answer_snapshot` as the route, after the
same checks in the same order (the token from ``Authorization: Bearer`` or the dashboard's
cookie through :func:`tether.server.auth.authenticate`, the ``read`` scope, the token's
namespace). Every other case (no or a wrong token, a run outside the namespace or not
found, an error) is passed on untouched to the route, which gives the problem response it
always gave: this path only ever serves what the route would have served. It sits inside
the Host / cross-site guard and CORS, so those still see every request.
"""

from __future__ import annotations

import logging
import re

from fastapi.security.utils import get_authorization_scheme_param
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from tether.server.auth import authenticate
from tether.server.problems import ApiProblem

__all__ = ["SnapshotFastPath"]

logger = logging.getLogger(__name__)

_PATH = re.compile(r"/api/runs/([^/]+)/snapshot")
"""The route's path, its run id as Starlette's default ``str`` convertor matches it."""

_QUERIES = {b"": "camel", b"keys=camel": "camel", b"keys=snake": "snake"}


class SnapshotFastPath:
    """Serve plain snapshot reads directly; pass everything else to ``app``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or scope.get("root_path"):
            await self.app(scope, receive, send)
            return
        keys = _QUERIES.get(scope.get("query_string", b""))
        found = _PATH.fullmatch(scope["path"]) if keys is not None else None
        if found is None or keys is None:
            await self.app(scope, receive, send)
            return
        response = await self._answer(scope, found.group(1), keys)
        if response is None:
            await self.app(scope, receive, send)  # the route answers, with its problem responses
            return
        await response(scope, receive, send)

    async def _answer(self, scope: Scope, run_id: str, keys: str) -> Response | None:
        from tether.server.api_runs import answer_snapshot  # the router imports its deps lazily too

        headers = Headers(scope=scope)
        scheme, credentials = get_authorization_scheme_param(headers.get("authorization"))
        presented = credentials if scheme.lower() == "bearer" and credentials else None
        state = scope["app"].state
        try:
            token = authenticate(Request(scope), presented)
        except ApiProblem:
            return None
        if not token.allows("read") or not token.owns(run_id):
            return None
        try:
            return await answer_snapshot(
                state.snapshots, state.store, state.executor, run_id, keys, headers.get("a-im"), headers
            )
        except Exception:  # not found, store down: the route answers it as it always did
            logger.debug("snapshot fast path passed %s on to the route", run_id, exc_info=True)
            return None
