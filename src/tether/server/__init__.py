"""The HTTP API and web dashboard over runs, context and failures (``tether serve``).

Needs the ``server`` extra (``pip install 'tether[server]'``). See docs/server.md.
"""

from __future__ import annotations

try:
    import fastapi as _fastapi  # noqa: F401 - the extra's first dependency
except ModuleNotFoundError as exc:  # pragma: no cover - exercised in a venv without the extra
    raise ModuleNotFoundError(
        f"tether.server needs the server extra: pip install 'tether[server]' (missing: {exc.name})",
        name=exc.name,
    ) from exc

from tether.server.app import create_app
from tether.server.config import ApiToken, ServerSettings, hash_token, new_token

__all__ = ["ApiToken", "ServerSettings", "create_app", "hash_token", "new_token"]
