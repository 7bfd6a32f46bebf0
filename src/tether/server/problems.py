"""Errors as RFC 9457 problem details, mapped once from tether's exception tree.

Every error response has ``type``, ``title``, ``status`` and ``detail`` (and
``run_id`` when one is involved), with media type ``application/problem+json``.
Unexpected exceptions become a plain 500 whose body says nothing about the code: the
traceback goes to the server's log only.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tether.errors import (
    CheckpointCorrupt,
    ConfigError,
    ContextError,
    RunInProgress,
    RunNotFound,
    RunNotPaused,
    StateError,
    StoreUnavailable,
    TetherError,
    VersionConflict,
    WrongRunStatus,
)
from tether.server.executor import ReplanUnavailable
from tether.workers.dispatch import BrokerUnavailable

__all__ = ["PROBLEM_RESPONSES", "ApiProblem", "install_problem_handlers", "problem"]

logger = logging.getLogger(__name__)

MEDIA_TYPE = "application/problem+json"
_BASE = "https://tether.dev/problems/"


class ApiProblem(Exception):
    """An error the API reports as it is (authentication, limits, bad requests)."""

    def __init__(self, status: int, title: str, detail: str, *, slug: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.slug = slug
        self.extra = extra


# most specific first: the first match wins
_MAP: list[tuple[type[BaseException], int, str, str]] = [
    (RunNotFound, 404, "run-not-found", "Run not found"),
    (ReplanUnavailable, 409, "replan-unavailable", "This run cannot be replanned by this server"),
    (RunNotPaused, 409, "run-not-paused", "Run is not paused"),
    (WrongRunStatus, 409, "wrong-run-status", "The run's status does not allow this"),
    (RunInProgress, 409, "run-in-progress", "Run is being executed elsewhere"),
    (VersionConflict, 412, "version-conflict", "Another writer saved first"),
    (CheckpointCorrupt, 500, "checkpoint-corrupt", "A stored checkpoint cannot be read"),
    (StoreUnavailable, 503, "store-unavailable", "The checkpoint store is unavailable"),
    (BrokerUnavailable, 503, "broker-unavailable", "The broker did not take the run's message"),
    (ConfigError, 400, "bad-request", "Bad request"),
    (StateError, 422, "invalid-state", "The state refused the value"),
    (ContextError, 422, "context-error", "The context engine refused the request"),
    (TetherError, 500, "tether-error", "tether error"),
]


def problem(status: int, slug: str, title: str, detail: str, **extra: Any) -> JSONResponse:
    body = {"type": _BASE + slug, "title": title, "status": status, "detail": detail, **extra}
    headers = {"WWW-Authenticate": 'Bearer realm="tether"'} if status == 401 else None
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def install_problem_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiProblem)
    async def _api(request: Request, exc: ApiProblem) -> JSONResponse:
        return problem(exc.status, exc.slug, exc.title, exc.detail, **exc.extra)

    @app.exception_handler(TetherError)
    async def _tether(request: Request, exc: TetherError) -> JSONResponse:
        status, slug, title = next((st, sl, ti) for cls, st, sl, ti in _MAP if isinstance(exc, cls))
        run_id = getattr(exc, "run_id", None)
        extra = {"run_id": run_id} if isinstance(run_id, str) and run_id else {}
        if status >= 500:
            logger.error("%s %s failed: %r", request.method, request.url.path, exc, exc_info=exc)
        return problem(status, slug, title, str(exc), **extra)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": e.get("type")}
            for e in exc.errors()
        ]
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"]) or "request"
        return problem(422, "validation-error", "Invalid request", f"{where}: {first['msg']}", errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return problem(exc.status_code, f"http-{exc.status_code}", str(exc.detail), str(exc.detail))

    @app.exception_handler(OverflowError)
    async def _overflow(request: Request, exc: OverflowError) -> JSONResponse:
        # a number the store's 64-bit columns cannot hold reached a query: the client's input
        logger.info("%s %s: number out of range: %s", request.method, request.url.path, exc)
        return problem(
            422, "number-out-of-range", "Number out of range", "a number in the request is too large"
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.error("%s %s crashed", request.method, request.url.path, exc_info=exc)
        return problem(500, "internal", "Internal server error", "the server failed; see its log")


_PROBLEM_SCHEMA = {
    "content": {
        MEDIA_TYPE: {
            "schema": {
                "type": "object",
                "properties": {
                    "type": {"type": "string"},
                    "title": {"type": "string"},
                    "status": {"type": "integer"},
                    "detail": {"type": "string"},
                },
            }
        }
    }
}
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"description": desc, **_PROBLEM_SCHEMA}
    for code, desc in {
        401: "no or unknown bearer token",
        403: "token lacks the scope",
        404: "unknown run or version",
        409: "the run's status does not allow this",
        412: "another writer saved a newer version first (a concurrent change, or a stale "
        "expectedVersion): read the run again and retry",
        413: "body too large",
        422: "invalid request",
        400: "bad request, or a Host this server does not answer to",
    }.items()
}
