"""The dashboard: static pages and a small script over the same API (assets in the package)."""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["mount"]


def _page(name: str) -> str:
    return resources.files("tether.server").joinpath("static", name).read_text(encoding="utf-8")


def mount(app: FastAPI) -> None:
    static = resources.files("tether.server").joinpath("static")
    app.mount("/static", StaticFiles(directory=str(static)), name="static")

    @app.get("/", include_in_schema=False)
    async def home() -> RedirectResponse:
        return RedirectResponse("/ui/runs")

    @app.get("/ui/runs", include_in_schema=False)
    async def runs_page() -> HTMLResponse:
        return HTMLResponse(_page("runs.html"))

    @app.get("/ui/runs/{run_id}", include_in_schema=False)
    async def run_page(run_id: str) -> HTMLResponse:
        return HTMLResponse(_page("run.html"))
