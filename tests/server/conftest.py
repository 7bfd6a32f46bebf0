"""The real app on SQLite and PostgreSQL, called in-process through httpx's ASGI transport."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.flows import context_flow, failing_flow, plan_flow
from tests.stores.conftest import require_url
from tether.runtime import Workflow
from tether.server import ApiToken, ServerSettings, create_app, hash_token
from tether.stores import open_store

TOKENS = {
    "reader": ApiToken(hash_token("t-read"), "read", name="reader"),
    "operator": ApiToken(hash_token("t-op"), "operate", name="operator"),
    "admin": ApiToken(hash_token("t-admin"), "admin", name="admin"),
    "team": ApiToken(hash_token("t-team"), "operate", namespace="team-a", name="team"),
}
SECRETS = {"reader": "t-read", "operator": "t-op", "admin": "t-admin", "team": "t-team"}


def new_id(prefix: str = "srv") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {SECRETS[who]}"}


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return require_url(str(request.param), tmp_path)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/tether.db"


Factory = Callable[..., Any]


@asynccontextmanager
async def serve(
    url: str,
    *,
    tokens: Sequence[ApiToken] | None = (),
    workflows: Sequence[Workflow] | None = None,
    replanners: dict[str, Any] | None = None,
    **settings: Any,
) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """An app on ``url`` with its lifespan running, and a client for it."""
    async with open_store(url) as store:
        app = create_app(
            ServerSettings(**settings),
            store=store,
            tokens=tokens,
            workflows=workflows if workflows is not None else [plan_flow(), failing_flow(), context_flow()],
            replanners=replanners,
        )
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1", headers={"X-Tether-Client": "tests"}
            ) as client:
                yield client, app


@asynccontextmanager
async def live(
    url: str, *, tokens: Sequence[ApiToken] | None = (), workflows: Sequence[Workflow] | None = None
) -> AsyncIterator[tuple[str, Any]]:
    """The app behind a real uvicorn on a free loopback port (streams, browsers)."""
    import asyncio

    import uvicorn

    async with open_store(url) as store:
        app = create_app(
            ServerSettings(),
            store=store,
            tokens=tokens,
            workflows=workflows if workflows is not None else [plan_flow(), failing_flow(), context_flow()],
        )
        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="warning", lifespan="on", timeout_graceful_shutdown=1
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started:
            assert not task.done(), "uvicorn did not start"
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}", app
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, 10)


@pytest.fixture
async def api(store_url: str) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    async with serve(store_url) as pair:
        yield pair


@pytest.fixture
async def secured(sqlite_url: str) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    async with serve(sqlite_url, tokens=list(TOKENS.values())) as pair:
        yield pair
