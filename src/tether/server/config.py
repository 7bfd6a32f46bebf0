"""What the service needs to know: where to listen, who may call it, what it accepts.

Tokens are kept hashed (``sha256:<hex>``), in ``TETHER_API_TOKENS`` (entries separated
by ``;`` or new lines) or in a file named by ``TETHER_API_TOKENS_FILE`` (one entry a
line, ``#`` comments). An entry reads::

    sha256:9f86d0… scope=operate namespace=team-a name=ci

``tether serve --new-token`` prints a fresh token and the entry to store for it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tether.errors import ConfigError
from tether.settings import FIXES

__all__ = [
    "SCOPES",
    "SERVER_FIXES",
    "ApiToken",
    "ServerSettings",
    "hash_token",
    "is_loopback",
    "load_server_settings",
    "new_token",
    "parse_tokens",
]

SERVER_FIXES: dict[str, str] = {
    "store_url": "a store URL such as sqlite:///.tether/tether.db or postgresql://host/db",
    "broker_url": FIXES["broker_url"],
    "broker_queue": "a queue name such as tether (up to 200 characters, not starting with amq.)",
    "host": "an address to listen on, such as 127.0.0.1 (default) or 0.0.0.0 with tokens",
    "port": "a port number from 0 to 65535 (default 8765; 0 picks a free one)",
    "max_body_bytes": "a whole number of bytes >= 1 (default 16777216)",
    "snapshot_cache_bytes": "a whole number of bytes >= 0 (default 67108864; 0 keeps none)",
    "otel_exporter": "none, console or otlp",
    "cors_origins": "comma-separated origins such as https://ops.example.com (scheme, host, optional port)",
    "allowed_hosts": "comma-separated host names such as tether.internal or *.example.com (no scheme, port)",
    "api_tokens_file": "the path of a file of token entries",
}
"""What each server setting accepts, said in the error when its value is refused."""

Scope = Literal["read", "operate", "admin"]
SCOPES: tuple[Scope, ...] = ("read", "operate", "admin")
"""Each scope includes the ones before it."""


class ServerSettings(BaseSettings):
    """The service's settings (``TETHER_*`` variables, then a file given with ``tether
    --env-file``, then defaults). A ``.env`` in the working directory is never read: a cloned
    repository must not choose the tokens or the store."""

    model_config = SettingsConfigDict(env_prefix="TETHER_", env_file=None, frozen=True, extra="ignore")

    store_url: str = "sqlite:///.tether/tether.db"
    broker_url: str | None = None
    """With a broker, start/resume/decide enqueue runs for ``tether worker`` processes;
    without one, the server executes them itself."""
    broker_queue: str = "tether"
    host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(default=8765, ge=0, le=65535)
    api_tokens: str = ""
    """Hashed token entries, separated by ``;`` or new lines."""
    api_tokens_file: str | None = None
    cors_origins: str = ""
    """Comma-separated origins allowed to call the API from a browser (none by default)."""
    allowed_hosts: str = ""
    """Comma-separated host names the service answers to besides loopback names and the
    address it listens on (``*.example.com``, ``*`` for any); other ``Host`` headers get 400."""
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1)
    """Requests with a larger body get 413 (a 10 MB state update fits)."""
    snapshot_cache_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    """Memory for the answers kept per run version for re-reads: encoded snapshots (JSON, gzip,
    zstd), deltas, context usage, failure reports."""
    otel_exporter: Literal["none", "console", "otlp"] = "none"
    """Where trace spans go; ``otlp`` uses the standard ``OTEL_EXPORTER_OTLP_*`` variables."""

    @field_validator("cors_origins", mode="after")
    @classmethod
    def _origins(cls, value: str) -> str:
        for origin in (o.strip() for o in value.split(",")):
            if origin and not re.fullmatch(r"https?://[^/\s:]+(?::\d{1,5})?/?", origin):
                raise ValueError(f"{origin!r} is not an origin")
        return value

    @field_validator("allowed_hosts", mode="after")
    @classmethod
    def _hosts(cls, value: str) -> str:
        for host in (h.strip() for h in value.split(",")):
            if host and not re.fullmatch(r"\*|(?:\*\.)?[A-Za-z0-9\-.]+|\[?[0-9A-Fa-f:.]+\]?", host):
                raise ValueError(f"{host!r} is not a host name")
        return value

    @field_validator("broker_url", mode="after")
    @classmethod
    def _broker(cls, value: str | None) -> str | None:
        from tether.settings import Settings

        return Settings._broker_url(value)  # the same checks as `tether worker` and `tether submit`

    @field_validator("broker_queue", mode="after")
    @classmethod
    def _queue(cls, value: str) -> str:
        from tether.settings import queue_name_problem

        problem = queue_name_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("store_url", mode="after")
    @classmethod
    def _store(cls, value: str) -> str:
        from tether.settings import Settings

        Settings._store_url(value)  # the same checks as every other command
        return value

    def tokens(self) -> list[ApiToken]:
        """Every configured token, from the setting and the file."""
        found = parse_tokens(self.api_tokens, source="TETHER_API_TOKENS")
        if self.api_tokens_file:
            path = Path(self.api_tokens_file)
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"cannot read the token file {path}: {exc.strerror}") from None
            found += parse_tokens(text, source=str(path))
        return found

    def origins(self) -> list[str]:
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]

    def hosts(self) -> list[str]:
        from tether.server.security import parse_hosts

        return parse_hosts(self.allowed_hosts)


def load_server_settings(env_file: str | None = None, **overrides: Any) -> ServerSettings:
    """``ServerSettings(**overrides)`` (plus ``env_file``, given explicitly) with a mistake
    reported as one :class:`ConfigError` naming the variable or flag, the value and the fix."""
    from tether.settings import describe_invalid

    try:
        return ServerSettings(_env_file=env_file, **overrides)  # type: ignore[call-arg]
    except ValidationError as exc:
        raise ConfigError(describe_invalid(exc, overrides, SERVER_FIXES)) from None


@dataclass(frozen=True, slots=True)
class ApiToken:
    """One bearer token, known only by its hash."""

    digest: str
    scope: Scope
    namespace: str | None = None
    """When set, the token sees and changes only runs whose id starts with ``namespace:``."""
    name: str = ""

    def allows(self, needed: Scope) -> bool:
        return SCOPES.index(self.scope) >= SCOPES.index(needed)

    def owns(self, run_id: str) -> bool:
        return self.namespace is None or run_id.startswith(f"{self.namespace}:")


def hash_token(token: str) -> str:
    """The stored form of a token (tokens are random, so a plain SHA-256 is enough)."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def new_token(scope: Scope = "read", namespace: str | None = None, name: str = "") -> tuple[str, str]:
    """A new random token and the entry that configures it (store only the entry)."""
    token = "tth_" + secrets.token_urlsafe(32)
    entry = f"{hash_token(token)} scope={scope}"
    if namespace:
        entry += f" namespace={namespace}"
    if name:
        entry += f" name={name}"
    return token, entry


def parse_tokens(text: str, *, source: str) -> list[ApiToken]:
    """Parse token entries; a malformed one is a ConfigError naming the line."""
    tokens: list[ApiToken] = []
    for n, raw in enumerate(text.replace(";", "\n").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        digest, *fields = line.split()
        where = f"{source}, entry {n}"
        if not digest.startswith("sha256:") or len(digest) != 7 + 64:
            raise ConfigError(
                f"{where}: expected 'sha256:<64 hex digits>' first (the hash, never the token "
                "itself; `tether serve --new-token` prints an entry)"
            )
        opts: dict[str, str] = {}
        for f in fields:
            key, sep, value = f.partition("=")
            if not sep or key not in {"scope", "namespace", "name"}:
                raise ConfigError(f"{where}: unknown field {f!r} (use scope=, namespace=, name=)")
            opts[key] = value
        scope = next((s for s in SCOPES if s == opts.get("scope", "read")), None)
        if scope is None:
            raise ConfigError(f"{where}: scope must be one of {', '.join(SCOPES)}, not {opts['scope']!r}")
        tokens.append(ApiToken(digest, scope, opts.get("namespace") or None, opts.get("name", "")))
    return tokens


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (``localhost`` included)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
