"""Test helpers: the scripted model, and a switch for real requests.

``tests/conftest.py`` typically does::

    import tether.models
    tether.models.ALLOW_MODEL_REQUESTS = False
"""

from __future__ import annotations

from tether.models.scripted import ScriptedModel, ScriptExhausted, rough_token_count

__all__ = ["ScriptExhausted", "ScriptedModel", "rough_token_count"]
