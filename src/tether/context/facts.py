"""Deterministic fact extraction from tool calls and their outputs.

A folded operation must still tell the next step what it did and what it found: the
command with its arguments, how it exited, and the few values a later step may need
(configuration set, artefacts built, hosts and ports listening, versions and hashes,
error lines). Patterns plus the shape of the output find them, with no model: the same
input always yields the same facts, so compression stays reproducible.

Only *salient* lines of an output are mined for versions, hashes and paths (the lines
that say what happened: "Successfully installed", "Successfully tagged", "listening on",
"HEAD is now at", error lines, ...); progress noise such as ``Collecting x==1.2`` is full
of versions that nobody needs later.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from tether.context.items import ContextItem

__all__ = [
    "FactCache",
    "OperationFacts",
    "Resolution",
    "command_of",
    "extract_operation",
    "extract_output",
    "find_resolutions",
]

_EXIT = re.compile(
    r"(?:\[exit code (-?\d+)\]|exit(?:ed with)?(?: code| status)?[ :=]+(-?\d+)\b"
    r"|returned non-zero exit status (\d+))",
    re.IGNORECASE,
)
_ASSIGN = re.compile(r"(?<![\w.-])([A-Z][A-Z0-9_]{2,})=([^\s'\";&|)*^$\\]+)")
_INI = re.compile(r"^\s*([a-z_][\w.]*)\s*[=:]\s*([^\s#]+)\s*$")
_CONFIG_CMD = re.compile(
    r"(?:config(?:\s+--\w+)*\s+(?:set\s+)?|--set\s+|-e\s+|--env\s+)([\w.-]+)[= ]([^\s'\"]+)"
)
_IMAGE = re.compile(r"\b((?:[\w-]+(?:\.[\w-]+)+(?::\d+)?/)?[a-z0-9][\w.-]*(?:/[\w.-]+)*:[\w][\w.-]*)\b")
_URL = re.compile(r"\bhttps?://[^\s'\"<>)\]]+")
_HOSTPORT = re.compile(r"\b((?:\d{1,3}(?:\.\d{1,3}){3}|localhost|[a-z][\w-]*(?:\.[\w-]+)+|\[::\]):\d{2,5})\b")
_PATH = re.compile(r"(?<![\w:/.])(/(?:[\w.@+-]+/)*[\w.@+-]+/?)")
_VERSION = re.compile(r"\b[\w-]*?\d+\.\d+(?:\.[\w]+)*(?:[-+][\w.]+)?\b")
_NAMED_VERSION = re.compile(
    r"^[A-Za-z][\w+.-]*(?: [A-Za-z][\w+.-]*)?"
    r"(?:/v?\d+\.\d+(?:\.\d+)*| v?\d+\.\d+\.\d+(?:\.\d+)*)(?:[-+][\w.]+)?\b"
)
"""A tool and its version at the start of a line: ``Python 3.11.7``, ``nginx/1.25.3``, ``node v20.11.1``
(three parts after a space, so "took 3.5 seconds" is not one)."""
_HASH = re.compile(r"\b(?:sha256:)?[0-9a-f]{7,64}\b|\b[0-9a-f]{7,12}\.\.[0-9a-f]{7,12}\b")
_ERROR = re.compile(
    r"(?i)((?-i:Error|Exception)\b|\b(?:error|failed|failure|fatal|denied|cannot|unable)\b|exception|"
    r"refused|not found|traceback|ERR!|\bE:\s|no such file|already (?:allocated|in use))"
)  # the whole words under one \b: most positions fail it once instead of once per word
_NOT_ERROR = re.compile(r"(?i)\b0 (?:errors?|failed)\b|\bwarn(?:ing)?\b(?!.*error)|PASSED|xfail")
_SALIENT = re.compile(
    r"(?i)(successfully|installed|tagged|naming to|HEAD is now|updating [0-9a-f]|listening|running on|"
    r"started|created|generated|wrote|written|saved|deployed|pushed|digest|"
    r"\bactive:|\bversion\b|\"build\"|\"id\"|(?-i:\d+ passed)\b|\bfailed\b|migrat|applied|->|=>\s)"
)
_NOISE = re.compile(r"(?:=> \[|Get:\d|Collecting |Downloading |Setting up |Requirement already|remote: )")
_BUILDKIT = re.compile(r"^#\d+ (?:\d+\.\d+ )?")
_ERROR_RANK = re.compile(r"(?:Error|Exception|error|ERROR):\s|denied|refused|not found|failed|FAILED")
# cheap substring pre-checks: most lines of a log are neither errors nor salient
_ERROR_WORDS = ("error", "fail", "fatal", "exception", "denied", "refused", "not found", "cannot",
                "unable", "traceback", "err!", "e: ", "no such file", "already ")  # fmt: skip
_SALIENT_WORDS = ("success", "install", "tagged", "naming", "head is", "updating", "listen", "running",
                  "started", "created", "generated", "wrote", "written", "saved", "deployed", "pushed",
                  "digest", "active:", "version", '"build"', '"id"', "passed", "failed", "migrat",
                  "applied", "->", "=> ")  # fmt: skip
_COMMAND_KEYS = ("command", "cmd", "script", "code", "query", "url", "path")
# configuration said in words: "configured PORT value 8443", "set WORKERS to 4", "X is now Y"
_PROSE_CONFIG = (
    re.compile(r"(?i)\bconfigured\s+([A-Za-z_][\w.-]{1,40})\s+(?:value\s+|to\s+|=\s*|as\s+)([^\s,;'\"]+)"),
    re.compile(r"(?i)\bset(?:ting)?\s+([A-Za-z_][\w.-]{1,40})\s+to\s+([^\s,;'\"]+)"),
    re.compile(r"\b([A-Z][A-Z0-9_]{2,}|[a-z][\w]*[._][\w.]+)\s+is\s+now\s+([^\s,;'\"]+)"),
)
_LISTEN_PORT = re.compile(r"(?i)\b(?:listening|bound|serving)\s+on\s+(?:port\s+)?:?(\d{2,5})\b")
_WROTE = re.compile(r"(?i)\b(?:wrote|written|writing|saved|created|generated)\b")
_VERSION_LINE = re.compile(r"(?i)\b(?:version|v)\s*:?\s*\d+\.\d+|\b[\w-]+[ -]v?\d+\.\d+\.\d+\b")


def prose_configs(text: str) -> dict[str, str]:
    """Configuration stated in prose, as ``KEY=value`` would be: ``configured X value Y``,
    ``set X to Y``, ``X is now Y`` (the key as written, the value's trailing dot dropped)."""
    found: dict[str, str] = {}
    for pattern in _PROSE_CONFIG:
        for key, value in pattern.findall(text):
            value = value.rstrip(".:)")
            if value and key.lower() not in ("it", "this", "that", "the", "up"):
                found[key] = value
    return found


_FACT_WORDS = ("successfully", "tagged", "naming to", "head is now", "migrat")
_HOST_WORDS = ("listen", "running on", "bound")
_FactTest = Callable[[str, str], object]
"""A test of a stripped line and its lowercase form."""
_FACT_TESTS: tuple[tuple[tuple[str, ...], _FactTest], ...] = (
    (("exit",), lambda line, low: "exit" in low and _EXIT.search(line)),
    (
        _ERROR_WORDS,
        lambda line, low: (
            any(w in low for w in _ERROR_WORDS) and _ERROR.search(line) and not _NOT_ERROR.search(line)
        ),
    ),
    (("=",), lambda line, low: _ASSIGN.fullmatch(line)),
    (("listening", "bound", "serving"), lambda line, low: _LISTEN_PORT.search(line)),
    (_HOST_WORDS, lambda line, low: any(w in low for w in _HOST_WORDS) and _HOSTPORT.search(line)),
    (
        ("wrote", "written", "writing", "saved", "created", "generated"),
        lambda line, low: _WROTE.search(line) and _PATH.search(line),
    ),
    (("configured",), lambda line, low: _PROSE_CONFIG[0].search(line)),
    (("set",), lambda line, low: _PROSE_CONFIG[1].search(line)),
    (("now",), lambda line, low: _PROSE_CONFIG[2].search(line)),  # case-sensitive "is now"
    (("version",), lambda line, low: "version" in low and _VERSION.search(line)),
    (_FACT_WORDS, lambda line, low: any(w in low for w in _FACT_WORDS)),
)
"""What makes a line a fact, each test after the lowercase words it cannot pass without: on
ASCII text a case-insensitive pattern sees what ``lower()`` sees, so a line holding none of
a test's words fails it, and :func:`fact_lines` tries a test only on the lines its words are in."""


def _is_fact(raw: str) -> bool:
    line = raw.strip()
    if not line or len(line) > 400 or _NOISE.match(_BUILDKIT.sub("", line)):
        return False
    low = line.lower()
    return any(test(line, low) for _words, test in _FACT_TESTS)


def fact_lines(text: str) -> list[int]:
    """Indexes of the lines of ``text`` that carry a fact: errors, paths written, listening
    ports, versions, configuration, exit status. Trimming keeps these when it cuts.

    Most lines of an output carry none, and the case-insensitive patterns cost far more per
    character than a substring search, so each test runs only on the lines that hold its
    words (see :data:`_FACT_TESTS`).
    """
    lines = text.splitlines()
    # lower() may change a non-ASCII line's length, and IGNORECASE folds more than it does:
    # such lines are tested whole, and the search below sees them empty
    plain = [line if line.isascii() else "" for line in lines]
    low_text = "\n".join(plain).lower()
    starts = list(itertools.accumulate((len(line) + 1 for line in plain), initial=0))
    found = {k for k, line in enumerate(lines) if not plain[k] and line and _is_fact(line)}
    tried: dict[int, tuple[str, str] | None] = {}  # a line's stripped and lowered text; None: never a fact
    for words, test in _FACT_TESTS:
        for k in _lines_with(low_text, starts, words):
            if k in found:
                continue
            if k in tried:
                pair = tried[k]
            else:
                line = lines[k].strip()
                skip = not line or len(line) > 400 or _NOISE.match(_BUILDKIT.sub("", line))
                pair = tried[k] = None if skip else (line, line.lower())
            if pair is not None and test(*pair):
                found.add(k)
    return sorted(found)


def _lines_with(low_text: str, starts: list[int], words: Iterable[str]) -> set[int]:
    """The indexes of the lines (beginning at ``starts``) that hold one of ``words``."""
    out: set[int] = set()
    find = low_text.find
    for word in words:
        at = find(word)
        while at >= 0:
            k = bisect.bisect_right(starts, at) - 1
            out.add(k)
            at = find(word, starts[k + 1])
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationFacts:
    """What one tool call did and found, in the shape of the rolling summary's fields."""

    tool: str = ""
    command: str = ""
    """The command line (or the call's arguments) exactly as sent."""
    exit_code: int | None = None
    configurations: Mapping[str, str] = field(default_factory=dict)
    """Configuration keys and the values set or read (``KEY=value``, ``key = value``)."""
    artifacts: tuple[str, ...] = ()
    """Images, files written, reports, release URLs."""
    environment: tuple[str, ...] = ()
    """Hosts and ports listening, services started or running."""
    details: tuple[str, ...] = ()
    """Versions, hashes and ids from the lines that say what happened."""
    errors: tuple[str, ...] = ()
    """Error lines, at most three, clipped."""

    @property
    def failed(self) -> bool:
        return (self.exit_code or 0) != 0 or (self.exit_code is None and bool(self.errors))

    def facts(self) -> list[str]:
        """Every value, most useful first (what a clipped line keeps)."""
        out = [f"{k}={v}" for k, v in self.configurations.items()]
        out += [*self.artifacts, *self.environment, *self.details]
        return _dedupe(out)

    def line(self, *, max_chars: int = 200, command_chars: int = 0) -> str:
        """``$ command → exit N: error; facts``, clipped to ``max_chars``.

        The command keeps its arguments: long paths lose their middle first, then the
        command its middle, never its end (the role a ``GRANT`` names, the file written);
        the facts fill what is left. ``command_chars`` (0: 60% of the line) bounds it.
        """
        facts = self.facts()
        room = command_chars or max(max_chars * 3 // 5, 40)
        head = f"$ {shorten_command(self.command or self.tool, room)}"
        if self.exit_code is not None:
            head += f" → exit {self.exit_code}"
        parts = [f"✗ {_clip_middle(e, 110)}" for e in self.errors[:1]] if self.failed else []
        parts += facts
        text = f"{head}: {'; '.join(parts)}" if parts else head
        return _clip(text, max_chars)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "command": self.command,
            "exit_code": self.exit_code,
            "configurations": dict(self.configurations),
            "artifacts": list(self.artifacts),
            "environment": list(self.environment),
            "details": list(self.details),
            "errors": list(self.errors),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolution:
    """An error and what fixed it: the commands run between the failure and a good retry."""

    issue: str
    resolution: str
    unit_ids: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, str]:
        return {"issue": self.issue, "resolution": self.resolution}

    def line(self, max_chars: int = 240) -> str:
        return _clip(f"{self.issue} → fixed by {self.resolution}", max_chars)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)].rstrip() + "…"


_LONG_PATH = re.compile(r"(/[\w.@+-]+)((?:/[\w.@+-]+){2,})(/[\w.@+-]+/?)")


def shorten_command(command: str, limit: int) -> str:
    """``command`` within ``limit`` characters without losing its end: paths lose their
    middle directories first (``/srv/…/file``), then the command its middle."""
    text = " ".join(command.split())
    if len(text) <= limit:
        return text
    text = _LONG_PATH.sub(lambda m: f"{m.group(1)}/…{m.group(3)}", text)
    return _clip_middle(text, limit) if len(text) > limit else text


def _clip_middle(text: str, limit: int) -> str:
    """Head and tail: an error's cause is often at its end ("... port is already allocated")."""
    if len(text) <= limit:
        return text
    head = limit // 3
    return f"{text[:head].rstrip()} … {text[len(text) - (limit - head - 3) :].lstrip()}"


def _dedupe(values: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for v in values:
        if v and v not in seen:
            seen.add(v)
            out.append(v)
    return out


def command_of(call: ContextItem) -> str:
    """The command a tool call ran: its ``command``-like argument, else its arguments."""
    args: object = call.metadata.get("arguments")
    if args is None and call.content.lstrip().startswith("{"):  # an action sent as JSON text
        args = call.content
    if isinstance(args, str):
        text = args
        try:
            args = json.loads(text)
        except ValueError:
            return text if "arguments" in call.metadata else call.content.strip()
    if isinstance(args, Mapping):
        for key in _COMMAND_KEYS:
            value = args.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()
        if args:
            return " ".join(f"{k}={v}" for k, v in args.items())
    return call.content.strip()


def _configs_from_command(command: str) -> dict[str, str]:
    found = {k: v.rstrip("/") for k, v in _ASSIGN.findall(command) if v.strip("./")}
    for key, value in _CONFIG_CMD.findall(command):
        found.setdefault(key, value)
    return found


@functools.lru_cache(maxsize=4096)
def extract_output(text: str) -> OperationFacts:
    """Facts of a command's output alone (no command, exit code from the text if printed)."""
    exit_code: int | None = None
    configs: dict[str, str] = {}
    artifacts: list[str] = []
    environment: list[str] = []
    details: list[str] = []
    errors: list[str] = []
    first: str | None = None
    for raw in text.splitlines():
        line = _BUILDKIT.sub("", raw.strip()).strip("=─━ ")
        if not line or _NOISE.match(line):
            continue
        low = line.lower()
        if "exit" in low:
            m = _EXIT.search(line)
            if m:
                exit_code = int(next(g for g in m.groups() if g is not None))
                if len(line) - len(m.group(0)) < 12:  # a bare "exit code 1" line says nothing more
                    continue
        if first is None:
            first = line
        if len(line) < 300 and ("=" in line or ":" in line):
            # a URL's "scheme:" is no INI key, but DATABASE_URL=postgres://… is a setting
            whole = _ASSIGN.fullmatch(line) or (_INI.match(line) if "://" not in line else None)
            if whole:
                configs.setdefault(whole.group(1), whole.group(2))
                continue
        if any(w in low for w in _ERROR_WORDS) and _ERROR.search(line) and not _NOT_ERROR.search(line):
            errors.append(_clip(line, 200))
            environment += list(_HOSTPORT.findall(line))
            continue
        if ("set" in low or "configured" in low or " now " in low) and (said := prose_configs(line)):
            for key, value in said.items():
                configs.setdefault(key, value)
        if ("listen" in low or "bound" in low or "serving" in low) and not _HOSTPORT.search(line):
            port = _LISTEN_PORT.search(line)
            if port:
                environment.append(f":{port.group(1)}")
        if any(w in low for w in _SALIENT_WORDS) and _SALIENT.search(line):
            _salient(line, artifacts, environment, details)
        elif "://" in line:  # an endpoint a later step calls again: "GET http://… 200 OK"
            environment += [_clip(u, 120) for u in _URL.findall(line)]
        elif len(line) <= 80 and (named := _NAMED_VERSION.match(line)):  # "Python 3.11.7", "nginx/1.25.3"
            details.append(" ".join(named.group(0).split()))
    if first is not None and not (configs or artifacts or environment or details or errors):
        details.append(_clip(first, 100))  # nothing salient: the first line usually says what happened
    return OperationFacts(
        exit_code=exit_code,
        configurations=configs,
        artifacts=tuple(_dedupe(artifacts)[:6]),
        environment=tuple(_dedupe(environment)[:6]),
        details=tuple(_dedupe(details)[:6]),
        errors=tuple(sorted(_dedupe(errors), key=lambda e: not _ERROR_RANK.search(e))[:3]),
    )


def _salient(line: str, artifacts: list[str], environment: list[str], details: list[str]) -> None:
    low = line.lower()
    hosts = _HOSTPORT.findall(line)
    if hosts and ("listening" in low or "running on" in low or "bound" in low):
        environment += hosts
        return
    if low.startswith("active:"):
        environment.append(_clip(line.split(";")[0].split(" since ")[0], 60))
        return
    if "started" in low:
        environment.append(_clip(line, 100))
        return
    urls = _URL.findall(line)
    paths = [p for p in _PATH.findall(line) if "/" in p[1:] or "." in p]
    if any(w in low for w in ("tagged", "naming to", "pushed", "generated", "wrote", "written", "saved")):
        images = [m for m in _IMAGE.findall(line) if "/" in m or "." in m.split(":")[0]]
        artifacts += [*images, *urls, *paths] or [_clip(line, 100)]
        return
    if "json" not in low and line.startswith("{"):
        try:
            data = json.loads(line)
        except ValueError:
            data = None
        if isinstance(data, Mapping):
            details += [f"{k}={v}" for k, v in data.items() if isinstance(v, str | int | float)][:4]
            return
    if len(line) <= 100:  # short enough to keep as said: "Successfully installed a-1.2 b-3.4"
        details.append(" ".join(line.split()))
        return
    found = [*urls, *(h for h in hosts if h not in environment)]
    found += _HASH.findall(line) + [v for v in _VERSION.findall(line) if not v.replace(".", "").isdigit()]
    found += [p for p in paths if p not in found]
    details += found or [_clip(line, 100)]


def extract_operation(call: ContextItem | None, result: ContextItem | None) -> OperationFacts:
    """Facts of one tool call and its result (either may be missing)."""
    command = command_of(call) if call is not None else ""
    tool = str(call.metadata.get("name", "")) if call is not None else ""
    out = extract_output(result.content) if result is not None else OperationFacts()
    exit_code = out.exit_code
    if result is not None and isinstance(result.metadata.get("exit_code"), int):
        exit_code = int(result.metadata["exit_code"])
    configs = {**_configs_from_command(command), **out.configurations}
    artifacts = list(out.artifacts)
    tag = re.search(r"(?:-t|--tag)\s+(\S+)", command)
    if tag and exit_code in (0, None) and not out.errors:
        artifacts.insert(0, tag.group(1))
    out_flag = re.search(r"(?:-o|--output|--out)[ =](\S+)", command)
    if out_flag:
        artifacts.append(out_flag.group(1))
    return OperationFacts(
        tool=tool,
        command=command,
        exit_code=exit_code,
        configurations=configs,
        artifacts=tuple(_dedupe(artifacts)),
        environment=out.environment,
        details=out.details,
        errors=out.errors,
    )


def _program(command: str) -> str:
    """What a retry would repeat: the command without sudo/env prefixes, whitespace-normalised."""
    words = command.split()
    while words and (words[0] in ("sudo", "env", "time") or "=" in words[0]):
        words = words[1:]
    return " ".join(words)


def find_resolutions(
    ops: Sequence[tuple[str, OperationFacts]], *, program: Callable[[str], str] | None = None
) -> list[Resolution]:
    """Failures that a later run of the same command got past, with the commands between.

    ``ops`` are (unit id, facts) in run order. A retry that succeeds with nothing run in
    between resolves the failure "on retry". ``program`` (default: the command without
    ``sudo``/``env`` prefixes) is what makes two commands the same; a cache's memoised one
    (:meth:`FactCache.program`) spares re-splitting every command.
    """
    program = program or _program
    out: list[Resolution] = []
    open_failures: dict[str, int] = {}
    for index, (_unit, facts) in enumerate(ops):
        key = program(facts.command)
        if not key:
            continue
        if facts.failed:
            open_failures.setdefault(key, index)
            continue
        start = open_failures.pop(key, None)
        if start is None:
            continue
        failed = ops[start][1]
        fixes = [f.command for _, f in ops[start + 1 : index] if f.command and not f.failed]
        issue = (
            failed.errors[0]
            if failed.errors
            else f"`{shorten_command(failed.command, 80)}` exited {failed.exit_code}"
        )
        how = "; ".join(f"`{shorten_command(c, 160)}`" for c in fixes[-3:]) if fixes else "a retry"
        ids = tuple(u for u, _ in ops[start : index + 1])
        out.append(Resolution(issue=_clip_middle(issue, 160), resolution=how, unit_ids=ids))
    return out


def _same(a: ContextItem | None, b: ContextItem | None) -> bool:
    """The same operation text: an item re-sequenced or re-counted still hits the cache."""
    if a is b:
        return True
    if a is None or b is None:
        return False
    return a.kind == b.kind and a.content == b.content and a.metadata == b.metadata


_Entry = tuple[ContextItem | None, ContextItem | None, OperationFacts, dict[int, str]]
"""The call and result mined, their facts, and their summary line per length."""
_T = TypeVar("_T")


class FactCache:
    """Facts and summary lines of each operation, computed once per (call, result) pair.

    Mining outputs is most of what a compression would cost, so a window fills this as
    tool results arrive and a compression reads it. Keyed by the items' ids and checked
    against their text, so a replaced item is mined again, never served stale facts.
    Messages and decisions are read the same way (:meth:`memo`): plans, progress, questions,
    rules, what a decision sets.
    """

    __slots__ = ("_ops", "_programs", "_reads")

    def __init__(self) -> None:
        self._ops: dict[tuple[str, str], _Entry] = {}
        self._reads: dict[Callable[[ContextItem], Any], dict[str, tuple[ContextItem, Any]]] = {}
        self._programs: dict[str, str] = {}

    def program(self, command: str) -> str:
        """What a retry of ``command`` would repeat (see :func:`find_resolutions`), once per command."""
        key = self._programs.get(command)
        if key is None:
            key = self._programs[command] = _program(command)
        return key

    def memo(self, item: ContextItem, read: Callable[[ContextItem], _T]) -> _T:
        """``read(item)``, once per item and reader (again only when the item's text changed).

        ``read`` must be a pure function of the item's kind, role, content and metadata:
        what a message says (:func:`~tether.context.distill.read_message`), what a decision
        decides (:mod:`~tether.context.supersede`).
        """
        values = self._reads.get(read)
        if values is None:
            values = self._reads[read] = {}
        hit = values.get(item.id)
        if hit is not None and _same(hit[0], item) and hit[0].role == item.role:
            return cast(_T, hit[1])
        value = read(item)
        values[item.id] = (item, value)
        return value

    def mined(
        self, call: ContextItem | None, result: ContextItem | None, *, max_chars: int = 0
    ) -> tuple[OperationFacts, str]:
        """The pair's facts and (``max_chars`` > 0) its summary line, from one lookup."""
        entry = self._ops.get((call.id if call is not None else "", result.id if result is not None else ""))
        if entry is None or entry[0] is not call or entry[1] is not result:  # the same objects: a hit
            entry = self._entry(call, result)
        facts, lines = entry[2], entry[3]
        if not max_chars:
            return facts, ""
        text = lines.get(max_chars)
        if text is None:
            text = lines[max_chars] = facts.line(max_chars=max_chars)
        return facts, text

    def _entry(self, call: ContextItem | None, result: ContextItem | None) -> _Entry:
        key = (call.id if call is not None else "", result.id if result is not None else "")
        entry = self._ops.get(key)
        if entry is None or not (_same(entry[0], call) and _same(entry[1], result)):
            entry = (call, result, extract_operation(call, result), {})
            self._ops[key] = entry
        return entry

    def operation(self, call: ContextItem | None, result: ContextItem | None) -> OperationFacts:
        """:func:`extract_operation`, once per pair."""
        return self._entry(call, result)[2]

    def line(self, call: ContextItem | None, result: ContextItem | None, *, max_chars: int) -> str:
        """:meth:`OperationFacts.line` of the pair, once per length."""
        _c, _r, facts, lines = self._entry(call, result)
        text = lines.get(max_chars)
        if text is None:
            text = lines[max_chars] = facts.line(max_chars=max_chars)
        return text

    def prune(self, live: Iterable[str]) -> None:
        """Forget operations and messages whose items left the window."""
        keep = set(live)
        self._ops = {k: v for k, v in self._ops.items() if k[0] in keep or k[1] in keep}
        self._reads = {r: {k: v for k, v in values.items() if k in keep} for r, values in self._reads.items()}
        self._programs = {}

    def __len__(self) -> int:
        return len(self._ops) + sum(len(values) for values in self._reads.values())
