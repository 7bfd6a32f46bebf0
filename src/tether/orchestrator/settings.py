"""The orchestrator's whole configuration from the environment and ``FIELD=VALUE`` pairs.

Every field of :class:`~tether.orchestrator.OrchestratorConfig` and of its
:class:`~tether.orchestrator.prompts.PromptConfig` has an environment variable
``TETHER_ORCH_<FIELD>`` (``TETHER_ORCH_STALL_ROUNDS=5``, ``TETHER_ORCH_LOOKBACK=2``);
``SUBAGENT_HISTORY_LOOKBACK`` is read too, as the design names it, for ``lookback``.
``tether orchestrate --set FIELD=VALUE`` (and its named options) win over the environment.
Booleans take 1/0, true/false, yes/no, on/off; ``acceptance`` takes one criterion per line
(or a JSON list); ``stage_timeout`` takes ``none``.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from tether.errors import ConfigError
from tether.orchestrator.config import OrchestratorConfig
from tether.orchestrator.prompts import PromptConfig

__all__ = ["ENV_PREFIX", "config_from", "env_names"]

ENV_PREFIX = "TETHER_ORCH_"
ALIASES = {"SUBAGENT_HISTORY_LOOKBACK": "lookback"}


def _fields() -> dict[str, tuple[type, str]]:
    """field name -> (owning config class, its type as text)."""
    out: dict[str, tuple[type, str]] = {}
    for cls in (OrchestratorConfig, PromptConfig):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name != "prompts":
                out[f.name] = (cls, str(hints[f.name]))
    return out


def env_names() -> dict[str, str]:
    """Environment variable -> field, for the docs and ``--help``."""
    names = {f"{ENV_PREFIX}{name.upper()}": name for name in _fields()}
    return {**names, **ALIASES}


def _value(name: str, kind: str, raw: str, where: str) -> Any:
    text = raw.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':  # a JSON string (a recorded configuration)
        text = str(json.loads(text))
    try:
        if "bool" in kind:
            low = text.lower()
            if low == "null":
                raise ValueError("not a boolean")
            if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError("not a boolean")
            return low in ("1", "true", "yes", "on")
        if "None" in kind and text.lower() in ("", "none", "null"):
            return None
        if "tuple" in kind:
            if text.startswith("["):
                return tuple(str(x) for x in json.loads(text))
            return tuple(line.strip() for line in text.splitlines() if line.strip())
        if "float" in kind:
            return float(text)
        if "int" in kind:
            return int(text)
    except (ValueError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{where}: {name} = {raw!r} is not a valid {kind} ({exc})") from None
    return text


def config_from(environ: Mapping[str, str], pairs: Iterable[str] = (), **given: Any) -> OrchestratorConfig:
    """The configuration from ``environ`` (``TETHER_ORCH_*``), then ``pairs``
    (``FIELD=VALUE``), then ``given`` (typed values; None means not given)."""
    fields = _fields()
    values: dict[str, Any] = {}
    for var, name in env_names().items():
        if var in environ and (name not in values or var.startswith(ENV_PREFIX)):
            values[name] = _value(name, fields[name][1], environ[var], f"environment variable {var}")
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        name = name.strip().lower().replace("-", "_")
        if not sep or name not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"--set {pair!r}: use FIELD=VALUE with FIELD one of {known}")
        values[name] = _value(name, fields[name][1], raw, f"--set {pair!r}")
    values.update({k: v for k, v in given.items() if v is not None})
    unknown = set(values) - set(fields)
    if unknown:
        raise ConfigError(f"not fields of the orchestrator's configuration: {sorted(unknown)}")
    prompt = {k: v for k, v in values.items() if fields[k][0] is PromptConfig}
    top = {k: v for k, v in values.items() if fields[k][0] is OrchestratorConfig}
    return OrchestratorConfig(**top, prompts=PromptConfig(**prompt))


def config_dict(config: OrchestratorConfig) -> dict[str, Any]:
    """A configuration as ``FIELD: value`` (flat, JSON-ready), to record with a run."""
    data = {k: v for k, v in dataclasses.asdict(config).items() if k != "prompts"}
    data.update(dataclasses.asdict(config.prompts))
    data["acceptance"] = list(config.acceptance)
    return data
