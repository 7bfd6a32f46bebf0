"""Settings, read once at the edge (CLI, server) and passed down as arguments.

Precedence: explicit argument or flag, then ``TETHER_*`` environment variables, then an
env file named explicitly (``tether --env-file PATH``, ``Settings(_env_file=PATH)``), then
these defaults. A ``.env`` in the current directory is never read on its own: a cloned
repository must not choose the store or the encryption key. Library code never reads the
environment itself.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tether.errors import ConfigError

__all__ = [
    "BROKER_SCHEMES",
    "FIXES",
    "Settings",
    "broker_url_problem",
    "check_queue_name",
    "describe_invalid",
    "load_settings",
    "queue_name_problem",
]

FIXES: dict[str, str] = {
    "store_url": "a store URL such as sqlite:///.tether/tether.db, postgresql://host/db or redis://host:6379/0",
    "broker_url": (
        "a Celery broker URL: amqp://host:5672// (RabbitMQ, with user:password@ before the host) "
        "or redis://host:6379/0 (Redis)"
    ),
    "encryption_key": "url-safe base64 of 32 bytes (`tether keygen` makes one), several separated by commas",
    "compress_min_bytes": "a whole number of bytes >= 0, or unset it",
    "checkpoint_ttl_hours": "a finite number of hours >= 0 (0 or none: never expire; default 168)",
    "completed_ttl_hours": "a finite number of hours >= 0 (0 or none: never expire; default 24)",
}
"""What each setting accepts, said in the error when its value is refused (the server's
settings add theirs)."""
_MAX_TTL_HOURS = 1_000_000 * 24  # a million days: beyond it a date overflows

_NEVER = {"", "0", "none", "never", "off"}

BROKER_SCHEMES = ("amqp", "amqps", "pyamqp", "redis", "rediss")
"""The brokers tether's workers are built for: RabbitMQ and Redis (their redelivery settings
and the sweeper's lock are set for those two; Celery's other transports are not)."""


def queue_name_problem(name: str) -> str | None:
    """What is wrong with a broker queue's name, or None. An empty name would make RabbitMQ
    invent one per declaration (a worker and its submitters would never meet), and
    ``amq.`` names are RabbitMQ's own."""
    if not name or name != name.strip():
        return "is empty or starts or ends with a space"
    if len(name) > 200:
        return f"is {len(name)} characters long; at most 200"
    if name.startswith("amq."):
        return "starts with 'amq.', which RabbitMQ keeps for itself"
    if any(ord(c) < 32 for c in name):
        return "holds a control character"
    return None


def check_queue_name(name: str) -> str:
    """``name``, or a :class:`ConfigError` saying what is wrong with it as a queue's name."""
    problem = queue_name_problem(name)
    if problem:
        raise ConfigError(f"queue name {name!r} {problem}: give a name such as tether")
    return name


def broker_url_problem(url: str) -> str | None:
    """What is wrong with a broker URL, or None: checked before anything is stored or
    started, where Celery would find it only when it first connects (``tether submit``
    had stored the run by then)."""
    from urllib.parse import urlsplit

    scheme, sep, _rest = url.partition("://")
    if not sep:
        return "has no scheme"
    if scheme.lower() not in BROKER_SCHEMES:
        return f"unknown broker scheme {scheme!r}; known: {', '.join(BROKER_SCHEMES)}"
    if scheme.lower().startswith("redis"):
        db = urlsplit(url).path.strip("/")
        if db and not db.isdigit():
            return f"the Redis database must be a number (redis://host:6379/0), not {db!r}"
    return None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TETHER_", env_file=None, frozen=True, extra="ignore")

    store_url: str = "sqlite:///.tether/tether.db"
    """Where checkpoints live; the URL scheme picks the backend."""
    broker_url: str | None = None
    """A Celery broker (``amqp://…``, ``redis://…``) for ``tether worker`` and ``tether submit``."""
    encryption_key: SecretStr | None = None
    """url-safe base64 of 32 bytes (``tether keygen``); encrypts every stored state."""
    compress_min_bytes: int | None = Field(default=None, ge=0)
    """zstd-compress payloads at least this big (unset: never)."""
    checkpoint_ttl_hours: float | None = 7 * 24
    """A run's checkpoints expire this long after its last save (0 or ``none``: never)."""
    completed_ttl_hours: float | None = 24
    """A finished run expires this long after it finished (0 or ``none``: never)."""

    @field_validator("checkpoint_ttl_hours", "completed_ttl_hours", mode="before")
    @classmethod
    def _ttl(cls, value: Any) -> Any:
        """0, ``none`` or ``never`` mean never expire (a TTL of 0 would expire every run at
        once); a negative TTL is a mistake."""
        if value is None or (isinstance(value, str) and value.strip().lower() in _NEVER):
            return None
        if isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
            return None
        number = float(value)
        if not math.isfinite(number):
            raise ValueError("must be a finite number of hours (0 or none: never expire)")
        if number < 0:
            raise ValueError("must be >= 0 hours (0 or none: never expire)")
        if number > _MAX_TTL_HOURS:
            raise ValueError(f"must be at most {_MAX_TTL_HOURS} hours (0 or none: never expire)")
        return number

    @field_validator("encryption_key", mode="after")
    @classmethod
    def _key(cls, value: SecretStr | None) -> SecretStr | None:
        """Each comma-separated key is url-safe base64 of 32 bytes: checked here, at start,
        rather than when the first checkpoint is written."""
        if value is None:
            return None
        keys = [k.strip() for k in value.get_secret_value().split(",")]
        if not any(keys):
            return None
        for n, key in enumerate(keys, 1):
            try:
                raw = base64.urlsafe_b64decode(key.encode("ascii") + b"=" * (-len(key) % 4))
            except (binascii.Error, ValueError, UnicodeEncodeError):
                raw = b""
            if len(raw) != 32:
                which = f"key {n} of {len(keys)}" if len(keys) > 1 else "the key"
                raise ValueError(f"{which} is not url-safe base64 of 32 bytes")
        return value

    @field_validator("broker_url", mode="after")
    @classmethod
    def _broker_url(cls, value: str | None) -> str | None:
        problem = None if value is None else broker_url_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("store_url", mode="after")
    @classmethod
    def _store_url(cls, value: str) -> str:
        """A scheme tether knows, and a Redis database that is a number (``redis://h/abc``
        would otherwise quietly use database 0)."""
        from urllib.parse import urlsplit

        from tether.stores.registry import BACKENDS

        scheme, sep, _rest = value.partition("://")
        if not sep:
            raise ValueError("has no scheme")
        if scheme.lower() not in BACKENDS:
            raise ValueError(f"unknown scheme {scheme!r}; known: {', '.join(sorted(BACKENDS))}")
        if scheme.lower() in ("redis", "rediss", "tiered+redis"):
            db = urlsplit(value).path.strip("/")
            if db and not db.isdigit():
                raise ValueError(f"the Redis database must be a number (redis://host:6379/0), not {db!r}")
        return value

    def store_options(self) -> dict[str, Any]:
        """Keyword arguments for :func:`tether.stores.open_store`."""
        from tether.state.serde import Codec
        from tether.stores.base import ExpiryPolicy

        def hours(h: float | None) -> dt.timedelta | None:
            return None if h is None else dt.timedelta(hours=h)

        key = self.encryption_key.get_secret_value() if self.encryption_key else None
        return {
            "codec": Codec(encryption_key=key, compress_min_bytes=self.compress_min_bytes),
            "expiry": ExpiryPolicy(
                checkpoint_ttl=hours(self.checkpoint_ttl_hours),
                completed_ttl=hours(self.completed_ttl_hours),
            ),
        }


def load_settings(**overrides: Any) -> Settings:
    """``Settings(**overrides)`` with a mistake reported as a :class:`ConfigError` naming
    the environment variable, the value and what it accepts, not a pydantic traceback."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(describe_invalid(exc, overrides, FIXES)) from None


_FLAGS = {"store_url": "--store", "api_tokens_file": "--tokens-file"}


def describe_invalid(exc: ValidationError, overrides: Mapping[str, Any], fixes: Mapping[str, str]) -> str:
    """One line per refused value: ``bad setting: TETHER_PORT='abc': <why>; expected <fix>``.

    A value given as a flag is named by its flag (``--port``); a secret's value is not shown.
    """
    problems = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err.get("loc") else "?"
        if field in overrides:
            name = _FLAGS.get(field, "--" + field.replace("_", "-"))
        else:
            name = f"TETHER_{field.upper()}"
        got = repr(err.get("input"))
        if field == "encryption_key":
            got = "<hidden>"
        elif field == "store_url" and isinstance(err.get("input"), str):
            from tether.stores.registry import public_url

            try:
                got = repr(public_url(err["input"]))  # never a password
            except ValueError:
                got = "<unparsable URL>"
        why = str(err["msg"]).removeprefix("Value error, ")
        fix = fixes.get(field)
        problems.append(f"{name}={got}: {why}" + (f"; expected {fix}" if fix else ""))
    return "bad setting: " + "; ".join(problems)
