"""``/api/docs`` and ``/api/redoc`` without any third-party host.

FastAPI's own pages load Swagger UI and ReDoc from a public CDN: offline or air-gapped
users get a blank page, and the page trusts whoever serves those files. Here the assets
come from this machine only: from the ``fastapi-offline`` package when it is installed
(it ships Swagger UI's and ReDoc's files), else a small page of tether's own that lists
every operation of ``/api/openapi.json`` with its parameters, body and answers.
"""

from __future__ import annotations

from importlib import resources
from importlib.util import find_spec
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

__all__ = ["mount_docs", "vendored_assets"]

_CSP = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"
_SWAGGER = ("swagger-ui-bundle.js", "swagger-ui.css")
_REDOC = "redoc.standalone.js"


def vendored_assets() -> Path | None:
    """The folder of Swagger UI's files shipped by an installed package, if one is."""
    if find_spec("fastapi_offline") is None:
        return None
    folder = Path(str(resources.files("fastapi_offline"))) / "static"
    return folder if all((folder / name).is_file() for name in _SWAGGER) else None


def mount_docs(app: FastAPI, openapi_url: str) -> None:
    """Serve the API docs at ``/api/docs`` (Swagger UI) and ``/api/redoc``."""
    folder = vendored_assets()
    if folder is not None:
        from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html

        app.mount("/api/docs-assets", StaticFiles(directory=str(folder)), name="docs-assets")
        has_redoc = (folder / _REDOC).is_file()

        @app.get("/api/docs", include_in_schema=False)
        async def swagger() -> HTMLResponse:
            return get_swagger_ui_html(
                openapi_url=openapi_url,
                title="tether API",
                swagger_js_url="/api/docs-assets/swagger-ui-bundle.js",
                swagger_css_url="/api/docs-assets/swagger-ui.css",
                swagger_favicon_url="data:,",
            )

        @app.get("/api/redoc", include_in_schema=False)
        async def redoc() -> HTMLResponse:
            if not has_redoc:
                return _own_page(openapi_url)
            return get_redoc_html(
                openapi_url=openapi_url,
                title="tether API",
                redoc_js_url="/api/docs-assets/redoc.standalone.js",
                redoc_favicon_url="data:,",
                with_google_fonts=False,
            )

        return

    # the page, its script and its style ship in static/ (package data)
    @app.get("/api/docs-assets/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        kinds = {"api-docs.js": "text/javascript", "api-docs.css": "text/css"}
        if name not in kinds:
            return Response(status_code=404)
        body = resources.files("tether.server").joinpath("static", name).read_bytes()
        return Response(body, media_type=kinds[name], headers={"Cache-Control": "max-age=3600"})

    @app.get("/api/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return _own_page(openapi_url)

    @app.get("/api/redoc", include_in_schema=False)
    async def redoc_own() -> HTMLResponse:
        return _own_page(openapi_url)


def _own_page(openapi_url: str) -> HTMLResponse:
    html = (
        resources.files("tether.server").joinpath("static", "api-docs.html").read_text(encoding="utf-8")
    ).replace("{{openapi_url}}", openapi_url)
    return HTMLResponse(html, headers={"Content-Security-Policy": _CSP, "X-Frame-Options": "DENY"})
