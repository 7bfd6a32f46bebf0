"""LLMConfig, create_model and the request guard."""

from __future__ import annotations

import builtins
import datetime as dt

import pytest

import tether.models
from tether.errors import ConfigError, ModelRequestsBlocked
from tether.models import (
    AnthropicChatModel,
    LLMConfig,
    OpenAIChatModel,
    ScriptedModel,
    create_model,
    is_loopback,
)
from tether.models._provider import parse_retry_after, prompt_too_long

KEY = "sk-config-SECRET-42424242"


def test_seed_002_example_builds_and_hides_the_key():
    """LLMConfig(provider="gemini", ...) as in the seed; the key is not in repr/str/public_dict."""
    cfg = LLMConfig(provider="gemini", model="gemini-2.5-flash", api_key=KEY, temperature=0.0)
    assert cfg.base_url.startswith("https://generativelanguage.googleapis.com/")
    assert cfg.api_key_value() == KEY
    for text in (repr(cfg), str(cfg), str(cfg.public_dict())):
        assert KEY not in text
    assert "api_key" not in cfg.public_dict()


def test_from_env_reads_tether_variables_and_overrides_win():
    env = {
        "TETHER_MODEL_PROVIDER": "ollama",
        "TETHER_MODEL": "qwen2.5:7b",
        "TETHER_MODEL_TEMPERATURE": "0.5",
        "TETHER_MODEL_MAX_TOKENS": "512",
        "TETHER_MODEL_TIMEOUT": "30",
        "TETHER_MODEL_MAX_RETRIES": "2",
        "TETHER_MODEL_ENDPOINT": "",
    }
    cfg = LLMConfig.from_env(env, model="llama3.1")
    assert (cfg.provider, cfg.model, cfg.temperature, cfg.max_tokens) == ("ollama", "llama3.1", 0.5, 512)
    assert (cfg.timeout, cfg.max_retries, cfg.endpoint) == (30.0, 2, None)
    assert cfg.base_url == "http://localhost:11434/v1"
    assert cfg.api_key_value() is None  # a local server needs none


def test_from_env_falls_back_to_the_providers_own_key_variable():
    cfg = LLMConfig.from_env({"TETHER_MODEL": "gpt-4o-mini", "OPENAI_API_KEY": KEY})
    assert cfg.api_key_value() == KEY
    tether_first = LLMConfig.from_env({"TETHER_API_KEY": "sk-tether-key", "OPENAI_API_KEY": KEY})
    assert tether_first.api_key_value() == "sk-tether-key"


def test_invalid_values_name_the_variable_and_not_the_key():
    with pytest.raises(ConfigError, match="TETHER_MODEL_TEMPERATURE") as info:
        LLMConfig.from_env({"TETHER_MODEL_TEMPERATURE": "hot", "TETHER_API_KEY": KEY})
    assert KEY not in str(info.value)
    with pytest.raises(ConfigError, match="TETHER_MODEL_PROVIDER"):
        LLMConfig.from_env({"TETHER_MODEL_PROVIDER": "skynet"})
    with pytest.raises(ConfigError, match="TETHER_MODEL_ENDPOINT"):
        LLMConfig.from_env({"TETHER_MODEL_ENDPOINT": "localhost:8000"})


def test_from_settings_reads_matching_attributes():
    class FakeSettings:
        model_provider = "anthropic"
        model = "claude-sonnet-4-5"
        api_key = KEY
        model_max_tokens = 1000
        model_timeout = None

    cfg = LLMConfig.from_settings(FakeSettings(), max_retries=1)
    assert (cfg.provider, cfg.model, cfg.max_tokens, cfg.timeout, cfg.max_retries) == (
        "anthropic",
        "claude-sonnet-4-5",
        1000,
        120.0,
        1,
    )


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_missing_key_is_a_config_error_saying_how_to_fix_it(provider):
    with pytest.raises(ConfigError, match=r"No API key: set TETHER_API_KEY or pass api_key="):
        create_model(LLMConfig(provider=provider, model="m"))


def test_missing_model_and_missing_endpoint_are_config_errors():
    with pytest.raises(ConfigError, match="No model: set TETHER_MODEL"):
        create_model(LLMConfig(provider="ollama"))
    with pytest.raises(ConfigError, match="no default endpoint.*TETHER_MODEL_ENDPOINT"):
        create_model(LLMConfig(provider="openai-compatible", model="m"))


async def test_create_model_picks_the_client():
    cases = {
        "openai": OpenAIChatModel,
        "gemini": OpenAIChatModel,
        "ollama": OpenAIChatModel,
        "vllm": OpenAIChatModel,
        "anthropic": AnthropicChatModel,
    }
    for provider, cls in cases.items():
        model = create_model(LLMConfig(provider=provider, model="m", api_key=KEY))  # type: ignore[arg-type]
        assert type(model) is cls, provider
        assert KEY not in repr(model)
        await model.aclose()  # type: ignore[attr-defined]
    scripted = create_model(LLMConfig(provider="scripted"), script=["hi"])
    assert isinstance(scripted, ScriptedModel)
    assert (await scripted.complete([{"role": "user", "content": "x"}])).text == "hi"
    with pytest.raises(ConfigError, match="only for the scripted provider"):
        create_model(LLMConfig(provider="ollama", model="m"), script=["hi"])


@pytest.mark.parametrize(("module", "extra"), [("openai", "openai"), ("anthropic", "anthropic")])
def test_missing_sdk_is_a_config_error_with_the_extra(monkeypatch, module, extra):
    real_import = builtins.__import__

    def without(name, *args, **kwargs):
        if name == module or name.startswith(f"{module}."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without)
    provider = "anthropic" if module == "anthropic" else "openai"
    with pytest.raises(ConfigError, match=rf"pip install 'tether\[{extra}\]'"):
        create_model(LLMConfig(provider=provider, model="m", api_key=KEY))


async def test_real_providers_are_blocked_before_any_network_call():
    """With ALLOW_MODEL_REQUESTS False, a remote endpoint raises ModelRequestsBlocked at once."""
    assert tether.models.ALLOW_MODEL_REQUESTS is False  # the conftest's autouse fixture
    for provider in ("openai", "anthropic", "gemini"):
        model = create_model(LLMConfig(provider=provider, model="m", api_key=KEY))  # type: ignore[arg-type]
        with pytest.raises(ModelRequestsBlocked, match="ALLOW_MODEL_REQUESTS"):
            await model.complete([{"role": "user", "content": "x"}])
        await model.aclose()  # type: ignore[attr-defined]


async def test_loopback_is_blocked_too_when_allow_local_is_false():
    model = OpenAIChatModel(LLMConfig(provider="ollama", model="m"), allow_local=False)
    with pytest.raises(ModelRequestsBlocked):
        await model.complete([{"role": "user", "content": "x"}])
    await model.aclose()


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8000/v1", True),
        ("http://127.5.6.7/v1", True),
        ("http://localhost:11434/v1", True),
        ("http://[::1]:8080", True),
        ("https://api.openai.com/v1", False),
        ("http://10.0.0.5:8000/v1", False),
        ("http://localhost.evil.com/v1", False),
    ],
)
def test_is_loopback(url, loopback):
    assert is_loopback(url) is loopback


def test_retry_after_forms():
    """Seconds, milliseconds (OpenAI's retry-after-ms), HTTP dates; junk is ignored."""
    now = dt.datetime(2025, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after": "Wed, 01 Jan 2025 12:00:07 GMT"}, now=now) == 7.0
    assert parse_retry_after({"retry-after": "Wed, 01 Jan 2025 11:00:00 GMT"}, now=now) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


@pytest.mark.parametrize(
    ("message", "reported", "limit"),
    [
        (
            "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
            "(4000 in the messages, 1000 in the completion).",
            4000,
            4096,
        ),
        (
            "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
            1200000,
            1048576,
        ),
        ("prompt is too long: 210000 tokens > 200000 maximum", 210000, 200000),
        ("maximum context length exceeded", None, None),
    ],
    ids=["vllm", "gemini", "anthropic", "no-numbers"],
)
def test_context_length_messages_of_other_servers(message, reported, limit):
    error = prompt_too_long(message, {})
    assert error is not None
    assert (error.reported_tokens, error.limit) == (reported, limit)


def test_an_ordinary_400_is_not_prompt_too_long():
    assert prompt_too_long("Invalid value for 'temperature'", {"code": "invalid_value"}) is None
