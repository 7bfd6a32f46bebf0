"""``LLMConfig``: which model to call and how.

Built by the caller, from explicit arguments, from a mapping of environment variables
(:meth:`LLMConfig.from_env`, the CLI passes ``os.environ``) or from the settings object
(:meth:`LLMConfig.from_settings`). Library code never reads the environment itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from tether.errors import ConfigError

__all__ = ["DEFAULT_ENDPOINTS", "ENV_VARS", "LLMConfig", "Provider", "StructuredOutput"]

Provider = Literal["openai", "openai-compatible", "anthropic", "gemini", "ollama", "vllm", "scripted"]
PROVIDERS: tuple[str, ...] = get_args(Provider)
StructuredOutput = Literal["auto", "json_schema", "tools", "off"]

DEFAULT_ENDPOINTS: dict[str, str] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com/v1beta/openai/",
    "ollama": "http://localhost:11434/v1",
    "vllm": "http://localhost:8000/v1",
}
"""Base URLs used when ``endpoint`` is unset (``openai-compatible`` has none: pass one)."""

_NEEDS_KEY = frozenset({"openai", "anthropic", "gemini"})
_PROVIDER_KEY_VARS = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "gemini": "GEMINI_API_KEY",
}

ENV_VARS: dict[str, str] = {
    "provider": "TETHER_MODEL_PROVIDER",
    "model": "TETHER_MODEL",
    "api_key": "TETHER_API_KEY",
    "endpoint": "TETHER_MODEL_ENDPOINT",
    "temperature": "TETHER_MODEL_TEMPERATURE",
    "max_tokens": "TETHER_MODEL_MAX_TOKENS",
    "timeout": "TETHER_MODEL_TIMEOUT",
    "max_retries": "TETHER_MODEL_MAX_RETRIES",
    "structured_output": "TETHER_MODEL_STRUCTURED_OUTPUT",
}
"""Field → environment variable read by :meth:`LLMConfig.from_env`."""

_SETTINGS_ATTRS: dict[str, str] = {
    field: var.removeprefix("TETHER_").lower() for field, var in ENV_VARS.items()
}


class LLMConfig(BaseModel):
    """Which model to call and how. The key is a ``SecretStr``: never in ``repr`` or logs.

    Example::

        LLMConfig(provider="gemini", model="gemini-2.5-flash", api_key="...", temperature=0.0)
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    provider: Provider = "openai"
    """``openai``, ``openai-compatible`` (any base URL), ``anthropic``, ``gemini`` (its
    OpenAI-compatible endpoint), ``ollama``, ``vllm`` or ``scripted`` (offline)."""
    model: str = ""
    """The provider's model name (``gpt-4o-mini``, ``claude-sonnet-4-5``, ``qwen2.5:7b``)."""
    api_key: SecretStr | None = None
    """Required by ``openai``, ``anthropic`` and ``gemini``; optional for local servers."""
    endpoint: str | None = None
    """Base URL; unset uses the provider's default (:data:`DEFAULT_ENDPOINTS`)."""
    temperature: float | None = Field(default=0.0, ge=0.0, le=2.0)
    """Sampling temperature; ``None`` leaves the provider's default (OpenAI reasoning models)."""
    max_tokens: int | None = Field(default=None, gt=0)
    """Cap on the reply's tokens; ``None`` is the provider's default (Anthropic: 4096)."""
    timeout: float = Field(default=120.0, gt=0)
    """Seconds for one HTTP attempt."""
    max_retries: int = Field(default=5, ge=0)
    """Retries of transient failures (429, 5xx, connection) before ``ModelUnavailable``."""
    structured_output: StructuredOutput = "auto"
    """How a reply schema is enforced: ``auto`` (OpenAI-compatible: a ``json_schema``
    response format; Anthropic: a forced tool), ``json_schema``, ``tools`` (a forced
    function call), or ``off`` (JSON mode and the text parser only). An endpoint that
    refuses the native form falls back to JSON mode by itself."""

    @field_validator("endpoint")
    @classmethod
    def _check_endpoint(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"endpoint must be an http(s) URL, got {value!r}")
        return value.strip()

    @property
    def base_url(self) -> str:
        """The endpoint to call: ``endpoint`` or the provider's default."""
        if self.endpoint:
            return self.endpoint
        try:
            return DEFAULT_ENDPOINTS[self.provider]
        except KeyError:
            raise ConfigError(
                f"provider {self.provider!r} has no default endpoint: "
                f"set {ENV_VARS['endpoint']} or pass endpoint="
            ) from None

    @property
    def needs_api_key(self) -> bool:
        return self.provider in _NEEDS_KEY

    def require_model(self) -> str:
        if not self.model:
            raise ConfigError(f"No model: set {ENV_VARS['model']} or pass model=")
        return self.model

    def api_key_value(self) -> str | None:
        """The key in clear, for the SDK only. Raises ConfigError if the provider needs one."""
        if self.api_key is not None and self.api_key.get_secret_value():
            return self.api_key.get_secret_value()
        if self.needs_api_key:
            raise ConfigError(
                f"No API key: set {ENV_VARS['api_key']} or pass api_key= (provider {self.provider})"
            )
        return None

    def public_dict(self) -> dict[str, Any]:
        """Everything but the key, for run logs."""
        return {
            "provider": self.provider,
            "model": self.model,
            "endpoint": self.endpoint,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "timeout": self.timeout,
            "max_retries": self.max_retries,
            "structured_output": self.structured_output,
        }

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **overrides: Any) -> LLMConfig:
        """Build from ``TETHER_MODEL*`` variables in ``environ``; explicit ``overrides`` win.

        Without ``TETHER_API_KEY`` the provider's usual variable is used
        (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY``). Empty values count
        as unset.
        """
        values: dict[str, Any] = {}
        for field, var in ENV_VARS.items():
            raw = environ.get(var, "").strip()
            if raw:
                values[field] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        provider = str(values.get("provider", "openai"))
        fallback = _PROVIDER_KEY_VARS.get(provider)
        if "api_key" not in values and fallback and environ.get(fallback, "").strip():
            values["api_key"] = environ[fallback].strip()
        return cls._build(values, source="environment")

    @classmethod
    def from_settings(cls, settings: object, **overrides: Any) -> LLMConfig:
        """Build from a settings object's ``model_provider``, ``model``, ``api_key``,
        ``model_endpoint``, ``model_temperature``, ``model_max_tokens``, ``model_timeout``
        and ``model_max_retries`` attributes (the ``TETHER_*`` names without the prefix);
        missing or ``None`` attributes keep the defaults, ``overrides`` win."""
        values: dict[str, Any] = {}
        for field, attr in _SETTINGS_ATTRS.items():
            value = getattr(settings, attr, None)
            if value is not None:
                values[field] = value
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls._build(values, source="settings")

    @classmethod
    def _build(cls, values: dict[str, Any], *, source: str) -> LLMConfig:
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{ENV_VARS.get(str(err['loc'][0]), err['loc'][0]) if err['loc'] else '?'}: {err['msg']}"
                for err in exc.errors(include_input=False, include_url=False)
            )
            raise ConfigError(f"invalid model configuration from {source}: {problems}") from None
