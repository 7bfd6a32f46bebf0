"""Settings, read once at the edge (CLI, server) and passed down as arguments.

Precedence: explicit argument or flag, then ``TETHER_*`` environment variables, then an
env file named explicitly (``tether --env-file PATH``, ``Settings(_env_file=PATH)``), then
these defaults. A ``.env`` in the current directory is never read on its own: a cloned
repository must not choose the store or the encryption key. Library code never reads the
environment itself.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tether.errors import ConfigError

__all__ = ["Settings", "load_settings"]

_NEVER = {"", "0", "none", "never", "off"}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TETHER_", env_file=None, frozen=True, extra="ignore")

    store_url: str = "sqlite:///.tether/tether.db"
    """Where checkpoints live; the URL scheme picks the backend."""
    broker_url: str | None = None
    """A Celery broker (``amqp://…``, ``redis://…``) for ``tether worker`` and ``tether submit``."""
    encryption_key: SecretStr | None = None
    """url-safe base64 of 32 bytes (``tether keygen``); encrypts every stored state."""
    compress_min_bytes: int | None = None
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
        if number < 0:
            raise ValueError("must be >= 0 hours (0 or none: never expire)")
        return number

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
    the environment variable and what it accepts, not a pydantic traceback."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = str(err["loc"][0]) if err.get("loc") else "?"
            name = f"TETHER_{field.upper()}" if field not in overrides else field
            got = err.get("input")
            problems.append(f"{name}={got!r}: {err['msg']}")
        raise ConfigError("bad setting: " + "; ".join(problems)) from None
