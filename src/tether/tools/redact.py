"""``Redactor``: remove secrets from text and JSON-like data before logs, prompts and stores.

Two sources: patterns for well-known credential shapes (API keys, tokens, private key
blocks, ``password=...`` assignments, credentials in URLs), and values declared by the
caller (the SSH password, a secret answer), matched exactly and also URL-encoded or base64.
Each pattern runs only when a cheap literal hint is present, so clean text costs a few
substring scans.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import quote, unquote, urlsplit

__all__ = [
    "REDACTED",
    "Redactor",
    "default_redactor",
    "RedactingFilter",
    "install_log_redaction",
    "redact_handlers",
    "redact_exception",
    "secret_env_values",
]

REDACTED = "[REDACTED]"
"""What a declared secret becomes; pattern matches become ``[REDACTED:kind]``."""

_KEY_WORDS = (
    r"passwords?|passwd|passphrase|secrets?|secret[_-]?key|client[_-]?secret|token|"
    r"api[_-]?key|apikey|access[_-]?key|private[_-]?key|credentials?|auth"
)
_SENSITIVE_KEY = re.compile(rf"(?:{_KEY_WORDS})$", re.IGNORECASE)
"""A mapping key whose value ``redact_obj`` hides whatever it looks like."""

_SECRET_ENV_NAME = re.compile(
    r"(?:^|_)(?:KEY|KEYS|TOKEN|TOKENS|SECRET|SECRETS|PASSWORD|PASSWD|PASS|PASSPHRASE|PWD|"
    r"CREDENTIAL|CREDENTIALS|APIKEY|AUTH|COOKIE|SESSION|DSN|PRIVATE)(?:_|$)",
    re.IGNORECASE,
)
"""Environment variables whose values are secrets, whatever they look like."""
_NOT_SECRET_ENV = re.compile(r"(?:_SOCK|_PATH|_FILE|_DIR|_HOST|_PORT|_ID|_TYPE|_NAME)$|^OLDPWD$|^PWD$", re.I)
"""Names that match the words above but hold locations or labels (``SSH_AUTH_SOCK``, ``PWD``)."""
_MIN_ENV_SECRET = 6
"""Shorter values (``1``, ``true``, ``none``) would be redacted everywhere they appear."""


@dataclass(frozen=True, slots=True)
class _Pattern:
    kind: str
    regex: re.Pattern[str]
    hints: tuple[str, ...]
    """Substrings one of which must be in the text (lower-cased if ``lower``) for a match."""
    group: int = 0
    """The group to replace (0: the whole match)."""
    lower: bool = False
    """Case-insensitive: ``regex`` (lower-case literals) runs on the lower-cased text."""
    boundary: bool = False
    """The match must not follow a word character (checked in Python: a leading ``\\b``
    would cost the regex engine its fast literal-prefix search)."""


def _p(
    kind: str, pattern: str, *hints: str, group: int = 0, lower: bool = False, boundary: bool = True
) -> _Pattern:
    return _Pattern(kind, re.compile(pattern), hints, group, lower, boundary)


PATTERNS: tuple[_Pattern, ...] = (
    _p(
        "private_key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----[\s\S]*?"
        r"(?:-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|\Z)",
        "PRIVATE KEY",
        boundary=False,
    ),
    _p("anthropic_key", r"sk-ant-[A-Za-z0-9_\-]{20,}", "sk-ant-"),
    _p("openai_key", r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}", "sk-"),
    _p("aws_access_key", r"A(?:KIA|SIA|BIA|CCA)[0-9A-Z]{16}(?![0-9A-Za-z])", "AKIA", "ASIA", "ABIA", "ACCA"),
    _p("github_token", r"gh[pousr]_[A-Za-z0-9]{30,}", "gh"),
    _p("github_token", r"github_pat_[A-Za-z0-9_]{22,}", "github_pat_"),
    _p("slack_token", r"xox[abposr]-[A-Za-z0-9\-]{10,}", "xox"),
    _p("google_api_key", r"AIza[0-9A-Za-z_\-]{35,}", "AIza"),
    _p("stripe_key", r"sk_(?:live|test)_[0-9A-Za-z]{16,}", "sk_live_", "sk_test_"),
    _p("stripe_key", r"rk_(?:live|test)_[0-9A-Za-z]{16,}", "rk_live_", "rk_test_"),
    _p("jwt", r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}", "eyJ"),
    _p("url_password", r"://[^:/\s@]+:([^@\s/]+)@", "://", group=1, boundary=False),
    _p(
        "aws_secret_key",
        r"aws_?secret_?access_?key[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+=]{40})",
        "aws_secret",
        "awssecret",
        group=1,
        lower=True,
        boundary=False,
    ),
    _p(
        "authorization",
        r"\b(?:bearer|basic|token)\s+([A-Za-z0-9._~+/=\-]{8,})",
        "bearer",
        "basic",
        "token",
        group=1,
        lower=True,
        boundary=False,
    ),
    _p(
        "assignment",
        rf"(?:{_KEY_WORDS})[\"']?\s*[:=]\s*(\"[^\"\n]+\"|'[^'\n]+'|[^\s\"',;&]+)",
        "pass",
        "secret",
        "token",
        "key",
        "credential",
        "auth",
        group=1,
        lower=True,
        boundary=False,
    ),
    _p(
        "flag",
        r"--(?:password|passwd|token|secret|api-key|access-key)[ =](\"[^\"\n]+\"|'[^'\n]+'|\S+)",
        "--pass",
        "--token",
        "--secret",
        "--api-key",
        "--access-key",
        group=1,
        lower=True,
        boundary=False,
    ),
)
_EXACT = tuple(p for p in PATTERNS if not p.lower)
_FOLDED = tuple(p for p in PATTERNS if p.lower)


class Redactor:
    """Replaces secrets in text (``redact``) and in JSON-like data (``redact_obj``).

    Args:
        secrets: values to remove wherever they appear (exactly, URL-encoded or base64).
            Values shorter than ``min_length`` are ignored: they would match everywhere.
        patterns: detect well-known credential shapes too (default True).
        min_length: the shortest declared secret honoured.
    """

    def __init__(self, secrets: Iterable[str] = (), *, patterns: bool = True, min_length: int = 4) -> None:
        self._secrets: set[str] = set()
        self._min_length = min_length
        self._patterns = patterns
        self._variants: tuple[str, ...] = ()
        self.add(*secrets)

    def __repr__(self) -> str:
        return f"Redactor({len(self._secrets)} declared secrets, patterns={self._patterns})"

    def add(self, *secrets: str) -> None:
        """Declare more secret values (e.g. an answer the user typed as secret)."""
        fresh = {s for s in secrets if s and len(s) >= self._min_length} - self._secrets
        if not fresh:
            return
        self._secrets |= fresh
        variants: set[str] = set()
        for secret in self._secrets:
            variants |= _variants(secret, self._min_length)
        self._variants = tuple(sorted(variants, key=len, reverse=True))

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> Redactor:
        """A redactor that also knows the secrets of this process's environment.

        Values of variables named like secrets (``*_KEY``, ``*_TOKEN``, ``*_SECRET``,
        ``*_PASSWORD``...) and passwords embedded in URL values (``DATABASE_URL``) are
        declared, so they are removed even when they match no known credential shape.
        """
        return cls(secret_env_values(os.environ if environ is None else environ), **kwargs)

    @property
    def secrets(self) -> frozenset[str]:
        """The declared values (not their variants)."""
        return frozenset(self._secrets)

    def __call__(self, text: str) -> str:
        return self.redact(text)

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced; returned unchanged (same object) if none."""
        if not text:
            return text
        for variant in self._variants:
            if variant in text:
                text = text.replace(variant, REDACTED)
        for pat in _EXACT if self._patterns else ():
            if any(h in text for h in pat.hints):
                text = _apply(pat, text)
        if self._patterns:
            text = _apply_folded(text)
        return text

    def redact_obj(self, obj: Any) -> Any:
        """A copy of dicts/lists/tuples with strings redacted and values of secret-named keys hidden."""
        if isinstance(obj, str):
            return self.redact(obj)
        if isinstance(obj, Mapping):
            out: dict[Any, Any] = {}
            for key, value in obj.items():
                if (
                    isinstance(key, str)
                    and _SENSITIVE_KEY.search(key)
                    and isinstance(value, str | int | float)
                ):
                    out[key] = REDACTED if value != "" else value
                else:
                    out[key] = self.redact_obj(value)
            return out
        if isinstance(obj, list | tuple):
            items = [self.redact_obj(v) for v in obj]
            return items if isinstance(obj, list) else tuple(items)
        return obj


def _apply(pat: _Pattern, text: str, *, flags: int = 0) -> str:
    label = f"[REDACTED:{pat.kind}]"
    regex = re.compile(pat.regex.pattern, flags) if flags else pat.regex

    def repl(match: re.Match[str]) -> str:
        whole = match.group(0)
        start = match.start()
        if pat.boundary and start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_-"):
            return whole
        if pat.group == 0:
            return label
        value = match.group(pat.group)
        if value.strip("\"'").startswith("[REDACTED"):
            return whole
        quoted = len(value) > 1 and value[0] in "'\"" and value[-1] == value[0]
        mark = f"{value[0]}{label}{value[0]}" if quoted else label
        lo, hi = match.start(pat.group) - start, match.end(pat.group) - start
        return whole[:lo] + mark + whole[hi:]

    return regex.sub(repl, text)


_MAX_WINDOWS = 20_000


def _apply_folded(text: str) -> str:
    """Case-insensitive patterns: matched on ``text.lower()``, replaced in ``text``.

    Only the lines holding a hint are scanned, unless there are so many that one pass over
    the whole text is cheaper. Every edit is collected first, then applied once.
    """
    lowered = text.lower()
    if len(lowered) != len(text):  # lower() moved offsets (rare Unicode): case-fold per pattern
        for pat in _FOLDED:
            text = _apply(pat, text, flags=re.IGNORECASE)
        return text
    hints = {h for pat in _FOLDED for h in pat.hints if h in lowered}
    if not hints:
        return text
    windows = _hint_lines(lowered, hints)
    edits: list[tuple[int, int, int, str]] = []
    for start, end in windows:
        for rank, pat in enumerate(_FOLDED):
            if not any(h in hints and lowered.find(h, start, end) >= 0 for h in pat.hints):
                continue
            label = f"[REDACTED:{pat.kind}]"
            for match in pat.regex.finditer(lowered, start, end):
                lo, hi = match.span(pat.group)
                value = text[lo:hi]
                if value.strip("\"'").startswith("[REDACTED"):
                    continue
                quoted = len(value) > 1 and value[0] in "'\"" and value[-1] == value[0]
                edits.append((lo, rank, hi, f"{value[0]}{label}{value[0]}" if quoted else label))
    if not edits:
        return text
    edits.sort()
    pieces: list[str] = []
    pos = 0
    for lo, _, hi, mark in edits:
        if lo < pos:  # overlaps an earlier edit
            continue
        pieces += (text[pos:lo], mark)
        pos = hi
    pieces.append(text[pos:])
    return "".join(pieces)


def _hint_lines(lowered: str, hints: set[str]) -> list[tuple[int, int]]:
    spans: set[tuple[int, int]] = set()
    for hint in hints:
        at = lowered.find(hint)
        while at >= 0:
            start = lowered.rfind("\n", 0, at) + 1
            end = lowered.find("\n", at)
            end = len(lowered) if end < 0 else end
            spans.add((start, end))
            if len(spans) > _MAX_WINDOWS:
                return [(0, len(lowered))]
            at = lowered.find(hint, end)
    return sorted(spans)


def _variants(secret: str, min_length: int) -> set[str]:
    out = {secret, quote(secret, safe=""), quote(secret)}
    raw = secret.encode()
    for enc in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        token = enc.decode().rstrip("=")
        # a base64 prefix that stays stable wherever the secret sits is not knowable;
        # match the encoding of the value alone (as in a Basic auth header or a k8s secret)
        if len(token) >= min_length:
            out.add(token)
    return out


def secret_env_values(environ: Mapping[str, str]) -> list[str]:
    """The secret values of an environment: see :meth:`Redactor.from_environ`."""
    found: list[str] = []
    for name, value in environ.items():
        if not value:
            continue
        secret_name = _SECRET_ENV_NAME.search(name) and not _NOT_SECRET_ENV.search(name)
        if secret_name and len(value) >= _MIN_ENV_SECRET:
            found.append(value)
            found.extend(v for v in value.split(",") if len(v) >= _MIN_ENV_SECRET)  # key lists
        if "://" in value and "@" in value:
            found.extend(_url_passwords(value))
    return found


def _url_passwords(value: str) -> list[str]:
    out: list[str] = []
    for part in value.split(","):
        try:
            password = urlsplit(part.strip()).password
        except ValueError:
            continue
        if password and len(password) >= 4:
            out += [password, unquote(password)]
    return out


# == the process-wide redactor and the log sink =========================================

_lock = threading.Lock()
_default: Redactor | None = None
_installed: Redactor | None = None


def default_redactor() -> Redactor:
    """The process's redactor: credential patterns plus the environment's secrets.

    Shared by every sink that has no redactor of its own (logs, failure reports, the
    event log), so a secret declared once (``default_redactor().add(value)``) is removed
    everywhere.
    """
    global _default
    with _lock:
        if _default is None:
            _default = Redactor.from_environ()
        return _default


def install_log_redaction(redactor: Redactor | None = None) -> Redactor:
    """Redact every log record of this process from now on, at every level.

    The message with its arguments, the exception text and the stack text of each record
    pass through ``redactor`` (default: :func:`default_redactor`) as the record is made,
    so every handler sees the clean record, including handlers added later (uvicorn's,
    asyncssh's). Idempotent: a second call only switches to ``redactor`` when one is
    given. Also redacts the
    traceback of an uncaught exception (``sys.excepthook``).
    """
    global _installed
    chosen = redactor or _installed or default_redactor()
    with _lock:
        first = _installed is None
        _installed = chosen
    if first:
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            if _installed is not None:
                _scrub_record(record, _installed)
                record.tether_redacted = True  # what `extra=` would set: marks a record scrubbed once
            return record

        logging.setLogRecordFactory(factory)
        hook = sys.excepthook

        def excepthook(tp: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
            if _installed is None:  # pragma: no cover - never uninstalled
                hook(tp, exc, tb)
                return
            sys.stderr.write(_installed.redact("".join(traceback.format_exception(tp, exc, tb))))

        sys.excepthook = excepthook
    return chosen


class RedactingFilter(logging.Filter):
    """Scrubs a record on its way out of a handler: the second line of defence, for records a
    library builds itself (``logging.LogRecord(...)``) instead of through the record factory."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _installed is not None and not getattr(record, "tether_redacted", False):
            _scrub_record(record, _installed)
            record.tether_redacted = True  # what `extra=` would set: marks a record scrubbed once
        return True


def redact_handlers(logger: logging.Logger | None = None) -> None:
    """Put a :class:`RedactingFilter` on every handler of ``logger`` (default: the root
    logger), once: call it right after ``logging.basicConfig`` so whatever reaches the
    console or a log file has been scrubbed, however the record was made."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


def redact_exception(
    exc: BaseException, redact: Callable[[str], str] | None = None, *, limit: int = 2000
) -> str:
    """``str(exc)`` redacted and cut, for failure reports and event logs."""
    return (redact or default_redactor())(str(exc))[:limit]


def _scrub_record(record: logging.LogRecord, redactor: Redactor) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a malformed call: the logging module reports it; keep the raw parts clean
        record.msg, record.args = redactor.redact(str(record.msg)), None
        return
    if redactor.redact(message) != message:
        _scrub_args(record, redactor)
        try:
            still = record.getMessage()
        except Exception:
            still = message
        clean = redactor.redact(still)
        if clean != still:  # the secret spans the template and an argument: keep the text only
            record.msg, record.args = clean, None
    if record.exc_info and record.exc_info[0] is not None:
        text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        clean = redactor.redact(text)
        record.exc_text = clean
        if clean != text:  # a handler rendering exc_info itself would print the secret
            record.exc_info = None
    elif record.exc_text:
        record.exc_text = redactor.redact(record.exc_text)
    if record.stack_info:
        record.stack_info = redactor.redact(record.stack_info)


def _scrub_args(record: logging.LogRecord, redactor: Redactor) -> None:
    """Redact each argument, keeping the tuple's shape for formatters that read it."""
    if isinstance(record.msg, str):
        record.msg = redactor.redact(record.msg)
    args = record.args
    if isinstance(args, Mapping):
        record.args = {k: _scrub_arg(v, redactor) for k, v in args.items()}
    elif isinstance(args, tuple):
        record.args = tuple(_scrub_arg(v, redactor) for v in args)


def _scrub_arg(value: Any, redactor: Redactor) -> Any:
    if isinstance(value, bool | int | float) or value is None:
        return value
    if isinstance(value, str):
        return redactor.redact(value)
    text, shown = str(value), repr(value)
    if redactor.redact(text) != text or redactor.redact(shown) != shown:
        return redactor.redact(text)
    return value
