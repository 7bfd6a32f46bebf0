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

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TETHER_", env_file=None, frozen=True, extra="ignore")

    store_url: str = "sqlite:///.tether/tether.db"
    """Where checkpoints live; the URL scheme picks the backend."""
    encryption_key: SecretStr | None = None
    """url-safe base64 of 32 bytes (``tether keygen``); encrypts every stored state."""
    compress_min_bytes: int | None = None
    """zstd-compress payloads at least this big (unset: never)."""
    checkpoint_ttl_hours: float | None = 7 * 24
    """A run's checkpoints expire this long after its last save (unset: never)."""
    completed_ttl_hours: float | None = 24
    """A finished run expires this long after it finished (unset: never)."""

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
