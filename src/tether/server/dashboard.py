"""The dashboard: three pages (runs, one run, workers) and one script over the same API the scripts use.

Every asset ships in the package (``static/``), so no CDN is needed. A browser signs in
by posting a token once; it is kept in an HttpOnly, SameSite=Strict cookie, which the
API accepts like a bearer header (EventSource cannot send headers).
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

from tether.server.auth import COOKIE, authenticate

__all__ = ["mount"]


class Login(BaseModel):
    token: str = Field(min_length=1, max_length=500)


def _page(name: str) -> str:
    return resources.files("tether.server").joinpath("static", name).read_text(encoding="utf-8")


def mount(app: FastAPI) -> None:
    static = resources.files("tether.server").joinpath("static")
    app.mount("/static", StaticFiles(directory=str(static)), name="static")
    headers = {
        "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
        "X-Frame-Options": "DENY",
    }

    @app.get("/", include_in_schema=False)
    async def home() -> RedirectResponse:
        return RedirectResponse("/ui/runs")

    @app.get("/ui/runs", include_in_schema=False)
    async def runs_page() -> HTMLResponse:
        return HTMLResponse(_page("runs.html"), headers=headers)

    @app.get("/ui/workers", include_in_schema=False)
    async def workers_page() -> HTMLResponse:
        return HTMLResponse(_page("workers.html"), headers=headers)

    @app.get("/ui/runs/{run_id}", include_in_schema=False)
    async def run_page(run_id: str) -> HTMLResponse:
        return HTMLResponse(_page("run.html"), headers=headers)

    @app.post("/ui/login", include_in_schema=False)
    async def login(body: Login, request: Request) -> JSONResponse:
        token = authenticate(request, body.token)
        response = JSONResponse({"scope": token.scope, "namespace": token.namespace})
        response.set_cookie(
            COOKIE,
            body.token,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            max_age=12 * 3600,
        )
        return response

    @app.post("/ui/logout", include_in_schema=False)
    async def logout() -> JSONResponse:
        response = JSONResponse({})
        response.delete_cookie(COOKIE)
        return response
