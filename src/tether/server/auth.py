"""Bearer tokens with a scope and an optional namespace, as FastAPI dependencies.

Every route states the scope it needs (``Security(require("operate"))``), so the
OpenAPI document shows it. A token with a namespace sees only runs whose id starts
with ``namespace:``; for any other run the answer is 404, as if it did not exist.
With no token configured (allowed only on loopback) every caller is an admin.
The dashboard keeps the token in an HttpOnly, SameSite=Strict cookie instead of the
``Authorization`` header, because browsers' EventSource cannot send headers.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tether.errors import RunNotFound
from tether.server.config import ApiToken, Scope, hash_token

__all__ = ["COOKIE", "OPEN", "ApiToken", "Principal", "authenticate", "check_run", "require"]

COOKIE = "tether_token"
OPEN = ApiToken(digest="", scope="admin", name="open (no tokens configured)")
Principal = ApiToken

_bearer = HTTPBearer(auto_error=False, description="A token from `tether serve --new-token`.")


def _lookup(tokens: dict[str, ApiToken], presented: str) -> ApiToken | None:
    digest = hash_token(presented)
    for known, token in tokens.items():
        if hmac.compare_digest(known, digest):
            return token
    return None


def authenticate(request: Request, presented: str | None) -> ApiToken:
    from tether.server.problems import ApiProblem

    tokens: dict[str, ApiToken] = request.app.state.tokens
    if not tokens:
        return OPEN
    if not presented:
        presented = request.cookies.get(COOKIE)
    if not presented:
        raise ApiProblem(401, "Unauthorized", "send 'Authorization: Bearer <token>'", slug="unauthorized")
    token = _lookup(tokens, presented)
    if token is None:
        raise ApiProblem(401, "Unauthorized", "unknown token", slug="unauthorized")
    return token


def require(scope: Scope) -> Callable[..., Coroutine[Any, Any, ApiToken]]:
    """A dependency that authenticates the caller and checks its scope."""

    async def dependency(
        request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
    ) -> ApiToken:
        from tether.server.problems import ApiProblem

        token = authenticate(request, creds.credentials if creds else None)
        if not token.allows(scope):
            raise ApiProblem(
                403, "Forbidden", f"this token's scope is {token.scope}; {scope} is needed", slug="forbidden"
            )
        return token

    return dependency


def check_run(token: ApiToken, run_id: str) -> None:
    """404 for a run outside the token's namespace: its existence is not revealed."""
    if not token.owns(run_id):
        raise RunNotFound(run_id)
