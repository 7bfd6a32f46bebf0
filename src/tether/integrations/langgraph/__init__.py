"""LangGraph on tether's stores: ``TetherSaver`` and ``import_langgraph``.

Needs the ``langgraph`` extra (``pip install 'tether[langgraph]'``).
"""

from __future__ import annotations

try:
    import langgraph.checkpoint.base  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    from tether.errors import ConfigError

    raise ConfigError(
        "tether.integrations.langgraph needs LangGraph: pip install 'tether[langgraph]'"
    ) from exc

from tether.integrations.langgraph.saver import TetherSaver

__all__ = ["TetherSaver"]
