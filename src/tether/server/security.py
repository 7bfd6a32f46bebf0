"""What a browser on another site cannot make the service do.

Two attacks reach a service that listens on loopback without tokens:

- DNS rebinding: a page on ``evil.example`` re-points its own name at 127.0.0.1, and the
  browser then lets that page read and post to the service as if it were same-origin. The
  browser still sends ``Host: evil.example``, so every request whose ``Host`` is not a name
  this service answers to is refused (``400 host-not-allowed``): loopback names, the address
  it listens on, and ``TETHER_ALLOWED_HOSTS``.
- Cross-site request forgery: a page anywhere posts a form (or a no-CORS ``fetch``) to
  ``http://127.0.0.1:8765/api/runs/…/cancel``. Such a request cannot carry a custom header,
  a bearer ``Authorization`` header or a JSON content type without a CORS preflight, which
  fails for origins not in ``TETHER_CORS_ORIGINS``; browsers also say where it came from
  (``Origin``, ``Sec-Fetch-Site``). A state-changing request (POST, PUT, PATCH, DELETE) is
  refused (``403 cross-site``) when it comes from another site, or when it carries none of
  those headers (``403 client-header-missing``).

Both hold with and without tokens: with tokens the dashboard's cookie is SameSite=Strict
too, but a rebinding page could still post a token it was handed, and a proxy may strip
``SameSite``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from tether.server.problems import problem

__all__ = ["CLIENT_HEADER", "LOOPBACK_NAMES", "RequestGuard", "host_allowed", "parse_hosts"]

CLIENT_HEADER = "X-Tether-Client"
"""Any value: the request says it was sent by a program, not by a form on some page."""

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_WILDCARDS = frozenset({"0.0.0.0", "::", ""})
_UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_SAME = frozenset({"same-origin", "none"})
"""``Sec-Fetch-Site`` values of a request the dashboard or the user made (``none``: typed
in the address bar, a bookmark)."""


def parse_hosts(text: str) -> list[str]:
    """``TETHER_ALLOWED_HOSTS``: comma-separated host names or addresses, no ports;
    ``*.example.com`` matches its subdomains, ``*`` any host (only behind a proxy that
    checks ``Host`` itself)."""
    return [h.strip().lower().strip("[]") for h in text.split(",") if h.strip()]


def _host_of(value: str) -> str:
    """The host part of a ``Host`` header (``[::1]:8765`` -> ``::1``), lower case."""
    value = value.strip().lower()
    if value.startswith("["):
        inside, sep, rest = value[1:].partition("]")
        if sep and (not rest or re.fullmatch(r":\d{1,5}", rest)):
            return inside
        return value  # '[::1].evil.example' is no IPv6 literal: matched as it is, so refused
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_allowed(host: str, allowed: Iterable[str]) -> bool:
    """Whether a request's host (without port) is one the service answers to."""
    if _is_loopback(host):
        return True
    for entry in allowed:
        if entry == "*" or entry == host:
            return True
        if entry.startswith("*.") and host.endswith(entry[1:]):
            return True
    return False


class RequestGuard:
    """The Host check for every request, the cross-site checks for state-changing ones."""

    def __init__(
        self, app: ASGIApp, *, listen: str, allowed_hosts: Iterable[str], origins: Iterable[str]
    ) -> None:
        self.app = app
        hosts = set(allowed_hosts)
        bound = listen.strip("[]").lower()
        if bound not in _WILDCARDS:
            hosts.add(bound)
        self.allowed = frozenset(hosts)
        self.origins = frozenset(o.rstrip("/").lower() for o in origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        refusal = self.refusal(scope.get("method", "GET"), headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, slug, title, detail = refusal
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await problem(status, slug, title, detail)(scope, receive, send)

    def refusal(self, method: str, headers: dict[str, str]) -> tuple[int, str, str, str] | None:
        """Why a request with these (lower-cased) headers is refused, or None."""
        host_header = headers.get("host", "")
        host = _host_of(host_header)
        if host_header and not host_allowed(host, self.allowed):
            return (
                400,
                "host-not-allowed",
                "Host not allowed",
                f"this server does not answer to the host {host[:100]!r}; if it is yours, add it "
                "to TETHER_ALLOWED_HOSTS (comma-separated)",
            )
        if method.upper() not in _UNSAFE:
            return None
        origin = headers.get("origin")
        if origin is not None and not self._same_or_allowed(origin, host_header):
            return (
                403,
                "cross-site",
                "Cross-site request refused",
                f"requests that change runs are not accepted from the page at {origin[:100]!r}; "
                "a site allowed to call the API goes in TETHER_CORS_ORIGINS",
            )
        site = headers.get("sec-fetch-site")
        if site is not None and site not in _SAME and origin is None:
            return (403, "cross-site", "Cross-site request refused", f"Sec-Fetch-Site is {site[:40]!r}")
        if "authorization" in headers or CLIENT_HEADER.lower() in headers:
            return None
        media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media == "application/json" or (media.startswith("application/") and media.endswith("+json")):
            return None
        return (
            403,
            "client-header-missing",
            "Client header missing",
            f"a request that changes runs must send '{CLIENT_HEADER}: <any value>', a bearer token "
            "or a JSON body (a form on another site can send none of these)",
        )

    def _same_or_allowed(self, origin: str, host_header: str) -> bool:
        origin = origin.strip().rstrip("/").lower()
        if origin in self.origins:
            return True
        if origin == "null":
            return False
        try:
            netloc = urlsplit(origin).netloc
        except ValueError:
            return False
        return bool(netloc) and netloc == host_header.strip().lower()
