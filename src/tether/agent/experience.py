"""Lessons from past runs: an SQLite full-text store, a retriever for prompts, and a deriver.

* :class:`ExperienceStore` keeps :class:`Experience` records in one SQLite file, searched
  with FTS5 and ranked by bm25 (a ``LIKE`` scan when this SQLite lacks FTS5). Identical
  lessons are stored once and counted. Every text field goes through ``redactor`` first,
  so secrets never reach the file.
* :class:`ExperienceRetriever` picks the few lessons relevant to a project and an error,
  and renders them as a bounded ``## Past experience`` prompt block.
* :func:`lessons_from_run` (pure) turns a finished run's command history into records: a
  failed command later fixed becomes an error signature plus the commands that fixed it,
  and the run's outcome becomes one more record.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import shlex
import sqlite3
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar

from tether.errors import ConfigError, StoreError, StoreUnavailable

__all__ = [
    "Experience",
    "ExperienceRetriever",
    "ExperienceStore",
    "lessons_from_run",
    "normalize_error",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")
Outcome = Literal["success", "failure"]
Redactor = Callable[[str], str]

_MAX_FIELD = 2_000  # chars kept per text field: lessons are hints, not logs
_MAX_COMMANDS = 10


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True, slots=True, kw_only=True)
class Experience:
    """One lesson: what went wrong on what kind of project, and what fixed it."""

    project_type: str
    """``nodejs``, ``python``... as :class:`~tether.agent.repo.RepoContext` detects it."""
    framework: str | None = None
    """``Next.js``, ``FastAPI``... if known."""
    error_signature: str = ""
    """The error, normalised by :func:`normalize_error` ("" for an outcome record)."""
    resolution: str = ""
    """One line saying what worked (or what failed)."""
    commands: Sequence[str] = ()
    """The commands that fixed it or made up the run (stored as a tuple)."""
    outcome: Outcome = "success"
    """Whether the lesson is something that worked or something that failed."""
    run_id: str | None = None
    """The run it was learnt in."""
    created_at: str = field(default_factory=_now)
    """When it was recorded (ISO 8601, UTC)."""
    tags: Sequence[str] = ()
    """Free labels: ``fix``, ``outcome``, ``docker``..."""
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Unique id (a duplicate lesson keeps the first one's id)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "commands", tuple(self.commands))
        object.__setattr__(self, "tags", tuple(self.tags))
        if self.outcome not in ("success", "failure"):
            raise ConfigError(f"outcome must be 'success' or 'failure', not {self.outcome!r}")

    @property
    def lesson_key(self) -> str:
        """Identity of the lesson's content (ids, runs and dates aside): equal keys are duplicates."""
        body = json.dumps(
            [
                self.project_type.lower(),
                (self.framework or "").lower(),
                self.error_signature,
                self.resolution,
                list(self.commands),
                self.outcome,
            ]
        )
        return hashlib.sha256(body.encode()).hexdigest()

    def redacted(self, redactor: Redactor) -> Experience:
        """A copy with ``redactor`` applied to every text field, each capped in size."""

        def r(text: str) -> str:
            return redactor(text)[:_MAX_FIELD]

        return replace(
            self,
            project_type=r(self.project_type),
            framework=None if self.framework is None else r(self.framework),
            error_signature=r(self.error_signature),
            resolution=r(self.resolution),
            commands=tuple(r(c) for c in self.commands[:_MAX_COMMANDS]),
            run_id=None if self.run_id is None else r(self.run_id),
            tags=tuple(r(t) for t in self.tags),
        )


_SCHEMA = """
CREATE TABLE IF NOT EXISTS experiences (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    lesson_key TEXT NOT NULL UNIQUE,
    project_type TEXT NOT NULL,
    framework TEXT,
    error_signature TEXT NOT NULL,
    resolution TEXT NOT NULL,
    commands TEXT NOT NULL,
    outcome TEXT NOT NULL,
    run_id TEXT,
    created_at TEXT NOT NULL,
    tags TEXT NOT NULL,
    hits INTEGER NOT NULL DEFAULT 1,
    last_seen TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS experiences_project ON experiences (project_type);
"""
_FTS = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS experiences_fts USING fts5("
    "project_type, framework, error_signature, resolution, commands, tags, tokenize='unicode61')"
)
# bm25 weights per FTS column: the error and the framework matter most
_BM25 = "bm25(experiences_fts, 1.0, 3.0, 6.0, 2.0, 1.5, 1.0)"
_COLUMNS = "e.id, e.project_type, e.framework, e.error_signature, e.resolution, e.commands, e.outcome, "
_COLUMNS += "e.run_id, e.created_at, e.tags"


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_STOPWORDS = _words(
    "the a an to at of in on for is are was be by from and or with while this that it as into"
)


def _terms(query: str) -> list[str]:
    """Distinct query words, stop words and single letters dropped."""
    seen: dict[str, None] = {}
    for word in re.findall(r"\w+", query.lower()):
        if len(word) > 1 and word not in _STOPWORDS:
            seen.setdefault(word, None)
    return list(seen)[:32]


def _row(row: Sequence[Any]) -> Experience:
    return Experience(
        id=row[0],
        project_type=row[1],
        framework=row[2],
        error_signature=row[3],
        resolution=row[4],
        commands=tuple(json.loads(row[5])),
        outcome=row[6],
        run_id=row[7],
        created_at=row[8],
        tags=tuple(json.loads(row[9])),
    )


class ExperienceStore:
    """Lessons in one SQLite file, full-text searchable.

    Args:
        path: the database file (created with its directory; ``~`` is expanded), or ``":memory:"``.
        redactor: applied to every text field before it is stored (for example
            ``tether.tools.redact.Redactor``); any ``str -> str`` callable.
        fts: use FTS5 (True), ``LIKE`` search (False), or FTS5 when available (None).

    All database work runs on one worker thread, so the event loop never blocks on disk.
    Use it as an async context manager, or call :meth:`aclose`.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        redactor: Redactor | None = None,
        fts: bool | None = None,
    ) -> None:
        self.path = str(path) if str(path) == ":memory:" else str(Path(path).expanduser())
        self.redactor = redactor
        self._want_fts = fts
        self.fts: bool | None = None
        """Whether FTS5 is in use; known after :meth:`setup`."""
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-experience")
        self._conn: sqlite3.Connection | None = None
        self._lock = asyncio.Lock()
        self._ready = False

    async def __aenter__(self) -> ExperienceStore:
        await self.setup()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def job() -> T:
            if self._conn is None:
                if self.path != ":memory:":
                    Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                self._conn.execute("PRAGMA busy_timeout = 30000")
            return fn(self._conn)

        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, job)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc) or "unable to open" in str(exc):
                raise StoreUnavailable(f"experience store {self.path}: {exc}") from exc
            raise StoreError(f"experience store {self.path}: {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreError(f"experience store {self.path}: {exc}") from exc

    def _setup_sync(self, conn: sqlite3.Connection) -> bool:
        conn.executescript(_SCHEMA)
        if self._want_fts is False:
            return False
        try:
            conn.execute(_FTS)
        except sqlite3.OperationalError as exc:
            if self._want_fts:
                raise ConfigError(f"this SQLite ({sqlite3.sqlite_version}) has no FTS5: {exc}") from exc
            logger.warning(
                "SQLite %s has no FTS5 (%s): experience search falls back to LIKE",
                sqlite3.sqlite_version,
                exc,
            )
            return False
        return True

    async def setup(self) -> None:
        """Create the tables (idempotent; also done by the first call that needs them)."""
        async with self._lock:
            if not self._ready:
                self.fts = await self._call(self._setup_sync)
                self._ready = True

    async def aclose(self) -> None:
        """Close the connection and the worker thread."""
        conn = self._conn
        if conn is not None:
            await asyncio.get_running_loop().run_in_executor(self._pool, conn.close)
            self._conn = None
        self._pool.shutdown(wait=True)
        self._ready = False

    def _insert_sync(self, conn: sqlite3.Connection, exp: Experience) -> bool:
        key = exp.lesson_key
        conn.execute("BEGIN IMMEDIATE")
        try:
            cur = conn.execute(
                "UPDATE experiences SET hits = hits + 1, last_seen = ? WHERE lesson_key = ?",
                (_now(), key),
            )
            if cur.rowcount:
                conn.execute("COMMIT")
                return False
            commands, tags = json.dumps(list(exp.commands)), json.dumps(list(exp.tags))
            cur = conn.execute(
                "INSERT INTO experiences (id, lesson_key, project_type, framework, error_signature, "
                "resolution, commands, outcome, run_id, created_at, tags, last_seen) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    exp.id,
                    key,
                    exp.project_type,
                    exp.framework,
                    exp.error_signature,
                    exp.resolution,
                    commands,
                    exp.outcome,
                    exp.run_id,
                    exp.created_at,
                    tags,
                    exp.created_at,
                ),
            )
            if self.fts:
                conn.execute(
                    "INSERT INTO experiences_fts (rowid, project_type, framework, error_signature, "
                    "resolution, commands, tags) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        cur.lastrowid,
                        exp.project_type,
                        exp.framework or "",
                        exp.error_signature,
                        exp.resolution,
                        " ; ".join(exp.commands),
                        " ".join(exp.tags),
                    ),
                )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return True

    async def add(self, experience: Experience) -> bool:
        """Store a lesson (redacted first). Returns False if an identical one was already stored."""
        await self.setup()
        if self.redactor is not None:
            experience = experience.redacted(self.redactor)
        else:
            experience = experience.redacted(lambda s: s)  # the size caps still apply
        added = await self._call(lambda c: self._insert_sync(c, experience))
        logger.info(
            "experience %s %s (%s/%s, %s)",
            "added" if added else "seen again",
            experience.id if added else experience.lesson_key[:12],
            experience.project_type,
            experience.framework or "-",
            experience.outcome,
            extra={"run_id": experience.run_id},
        )
        return added

    async def add_many(self, experiences: Iterable[Experience]) -> int:
        """Store several lessons; returns how many were new."""
        return sum([await self.add(e) for e in experiences])

    async def count(self) -> int:
        """How many distinct lessons are stored."""
        await self.setup()
        row = await self._call(lambda c: c.execute("SELECT COUNT(*) FROM experiences").fetchone())
        return int(row[0])

    async def search(
        self, query: str, *, project_type: str | None = None, limit: int = 5
    ) -> list[Experience]:
        """The lessons best matching ``query`` (any of its words), best first.

        Ranked by bm25 with FTS5 (error signature and framework weigh most), then by how
        often the lesson was seen, then newest first. An empty query returns the most
        seen and recent lessons for ``project_type``.
        """
        await self.setup()
        terms = _terms(query)
        if limit <= 0:
            return []
        if not terms:
            return await self._recent(project_type, limit)
        if self.fts:
            match = " OR ".join(f'"{t}"' for t in terms)
            sql = (
                f"SELECT {_COLUMNS} FROM experiences_fts JOIN experiences e ON e.seq = experiences_fts.rowid "
                "WHERE experiences_fts MATCH ?"
            )
            params: list[Any] = [match]
            if project_type is not None:
                sql += " AND e.project_type = ?"
                params.append(project_type)
            sql += f" ORDER BY {_BM25}, e.hits DESC, e.seq DESC LIMIT ?"
            params.append(limit)
            rows = await self._call(lambda c: c.execute(sql, params).fetchall())
            return [_row(r) for r in rows]
        return await self._like_search(terms, project_type, limit)

    async def _recent(self, project_type: str | None, limit: int) -> list[Experience]:
        sql = f"SELECT {_COLUMNS} FROM experiences e"
        params: list[Any] = []
        if project_type is not None:
            sql += " WHERE e.project_type = ?"
            params.append(project_type)
        sql += " ORDER BY e.hits DESC, e.seq DESC LIMIT ?"
        params.append(limit)
        rows = await self._call(lambda c: c.execute(sql, params).fetchall())
        return [_row(r) for r in rows]

    async def _like_search(self, terms: list[str], project_type: str | None, limit: int) -> list[Experience]:
        text = "lower(e.project_type || ' ' || coalesce(e.framework, '') || ' ' || e.error_signature"
        text += " || ' ' || e.resolution || ' ' || e.commands || ' ' || e.tags)"
        where = " OR ".join(f"{text} LIKE ? ESCAPE '\\'" for _ in terms)
        params: list[Any] = [f"%{_like_escape(t)}%" for t in terms]
        sql = f"SELECT {_COLUMNS}, e.hits, e.seq FROM experiences e WHERE ({where})"
        if project_type is not None:
            sql += " AND e.project_type = ?"
            params.append(project_type)
        rows = await self._call(lambda c: c.execute(sql, params).fetchall())

        def score(row: Sequence[Any]) -> tuple[float, int, int]:
            sig, fw = str(row[3]).lower(), str(row[2] or "").lower()
            rest = " ".join(str(v).lower() for v in (row[1], row[4], row[5], row[9]))
            s = sum(6.0 * (t in sig) + 3.0 * (t in fw) + 1.0 * (t in rest) for t in terms)
            return (-s, -int(row[10]), -int(row[11]))

        return [_row(r) for r in sorted(rows, key=score)[:limit]]


def _like_escape(term: str) -> str:
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class ExperienceRetriever:
    """Finds the lessons worth showing the model, and renders them briefly.

    Args:
        store: where lessons live.
        limit: at most this many lessons in the prompt.
        max_chars: the rendered block never exceeds this many characters.
        max_item_chars: each bullet is cut to this many characters.
    """

    def __init__(
        self, store: ExperienceStore, *, limit: int = 3, max_chars: int = 1_200, max_item_chars: int = 360
    ) -> None:
        if limit < 0 or max_chars < 0 or max_item_chars < 20:
            raise ConfigError("limit and max_chars must be >= 0 and max_item_chars >= 20")
        self.store = store
        self.limit = limit
        self.max_chars = max_chars
        self.max_item_chars = max_item_chars

    async def retrieve(
        self, project_type: str, framework: str | None = None, error_text: str | None = None
    ) -> list[Experience]:
        """Lessons for this project type (and, when ``error_text`` is given, this error), best first.

        Slots are filled in order: the project type's lessons matching the framework or
        the error; then, with an error, matching lessons of other project types (a Docker
        permission error is the same everywhere); then the project type's most
        reinforced and recent lessons.
        """
        if self.limit == 0:
            return []
        signature = normalize_error(error_text) if error_text else ""
        query = " ".join(p for p in (framework or "", signature) if p)
        found = await self.store.search(query, project_type=project_type, limit=self.limit)
        if signature and len(found) < self.limit:
            found += await self.store.search(signature, limit=self.limit)
            found = list({e.id: e for e in found}.values())[: self.limit]
        if query and len(found) < self.limit:
            found += await self.store.search("", project_type=project_type, limit=self.limit)
            found = list({e.id: e for e in found}.values())[: self.limit]
        return found

    def render(self, experiences: Sequence[Experience]) -> str:
        """A ``## Past experience`` block of one bullet per lesson, at most ``max_chars`` long."""
        header = "## Past experience"
        if not experiences or self.max_chars < len(header) + 10:
            return ""
        lines = [header]
        size = len(header)
        for exp in experiences:
            bullet = _clip(_bullet(exp), self.max_item_chars)
            if size + 1 + len(bullet) > self.max_chars:
                break
            lines.append(bullet)
            size += 1 + len(bullet)
        return "\n".join(lines) if len(lines) > 1 else ""


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _bullet(exp: Experience) -> str:
    where = exp.project_type + (f"/{exp.framework}" if exp.framework else "")
    cmds = " && ".join(f"`{c}`" if "`" not in c else c for c in exp.commands[:4])
    if exp.error_signature:
        verb = "fixed by" if exp.outcome == "success" else "not fixed; tried"
        text = f"- [{where}] error `{exp.error_signature}`: {verb} {cmds or exp.resolution}"
    elif exp.outcome == "success":
        text = f"- [{where}] worked: {cmds or exp.resolution}"
    else:
        text = f"- [{where}] failed: {exp.resolution}"
    return " ".join(text.split())


# --- deriving lessons from a run -----------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NORMALISERS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2})?(\.\d+)?(Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(\.\d+)?\b"), "<time>"),
    (re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.I), "<url>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<id>"),
    (re.compile(r"\b0x[0-9a-f]+\b", re.I), "<hex>"),
    (re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,}\b", re.I), "<hex>"),
    (re.compile(r"\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b"), "<ip>"),
    (re.compile(r"(?<![\w@.-])(?:[A-Za-z]:\\|~/|\.{0,2}/)[^\s:'\"(),]*[^\s:'\"(),.]"), "<path>"),
    (re.compile(r"\b\d+(\.\d+)*\b"), "<n>"),
]
_ERROR_LINE = re.compile(
    r"error|err!|fail|fatal|denied|not found|no such|cannot|can't|unable|exception|refused"
    r"|invalid|missing|conflict|timed? ?out|panic|traceback|killed",
    re.I,
)


def normalize_error(text: str, *, max_chars: int = 200) -> str:
    """A stable signature of an error message: the telling line, with variable parts masked.

    Picks the last line that reads like an error (else the last non-blank line), then
    replaces timestamps, URLs, uuids, hex ids, IP addresses, paths and numbers with
    ``<time>``, ``<url>``, ``<id>``, ``<hex>``, ``<ip>``, ``<path>``, ``<n>``, so the
    same failure in two runs gets the same signature.
    """
    lines = [ln.strip() for ln in _ANSI.sub("", text).splitlines() if ln.strip()]
    if not lines:
        return ""
    telling = [ln for ln in lines if _ERROR_LINE.search(ln)]
    line = (telling or lines)[-1]
    for pattern, mask in _NORMALISERS:
        line = pattern.sub(mask, line)
    line = " ".join(line.split())
    return _clip(line, max_chars)


_PROBES = _words(
    "ls cat pwd echo which whoami uname id env printenv head tail grep find test stat "
    "df du free hostname date type file wc less more tree ps lsof ss netstat"
)


def _program(command: str) -> list[str]:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    while words and ("=" in words[0] and not words[0].startswith("=") or words[0] in ("sudo", "env")):
        words = words[1:]  # skip sudo, env and VAR=value prefixes
    return words


def _key(command: str) -> str:
    """What makes two commands 'the same attempt': program and subcommand."""
    words = _program(command)
    return " ".join(words[:2]) if words else command.strip()


def _is_probe(command: str) -> bool:
    words = _program(command)
    return not words or words[0] in _PROBES or " ".join(words[:2]) == "command -v"


def _error_text(entry: Mapping[str, Any]) -> str:
    parts = [str(entry.get(k) or "") for k in ("stderr", "stderr_tail", "stdout", "stdout_tail", "output")]
    text = "\n".join(p for p in parts if p)
    return text or f"exit code {entry.get('exit_code')}"


def _succeeded(entry: Mapping[str, Any]) -> bool:
    if "success" in entry:
        return bool(entry["success"])
    return entry.get("exit_code") == 0


def lessons_from_run(
    history: Sequence[Mapping[str, Any]],
    *,
    project_type: str,
    framework: str | None = None,
    outcome: Outcome,
    run_id: str | None = None,
    tags: Sequence[str] = (),
) -> list[Experience]:
    """Lessons learnt in a finished run (pure).

    Args:
        history: the run's commands in order, each a mapping with ``command``,
            ``success`` (or ``exit_code``) and some of ``stderr``, ``stdout`` (or their
            ``_tail`` variants).
        project_type, framework: what was deployed.
        outcome: how the run ended.
        run_id: recorded on every lesson.
        tags: added to every lesson.

    Returns:
        One ``fix`` lesson per failed command that a later attempt of the same command
        (same program and subcommand) got past, with the commands run in between; then
        one ``outcome`` lesson: the successful non-probe commands for a success, the last
        unresolved error for a failure.
    """
    common: dict[str, Any] = {"project_type": project_type, "framework": framework, "run_id": run_id}
    open_failures: dict[str, tuple[int, str]] = {}  # key -> (index, signature)
    lessons: list[Experience] = []
    last_error = ""
    for i, entry in enumerate(history):
        command = str(entry.get("command") or "").strip()
        if not command:
            continue
        key = _key(command)
        if not _succeeded(entry):
            signature = normalize_error(_error_text(entry)) or f"{key}: failed"
            open_failures.setdefault(key, (i, signature))
            last_error = signature
            continue
        if key not in open_failures:
            continue
        start, signature = open_failures.pop(key)
        fix = [
            str(e.get("command")).strip()
            for e in history[start + 1 : i + 1]
            if e.get("command") and _succeeded(e) and not _is_probe(str(e.get("command")))
        ]
        lessons.append(
            Experience(
                **common,
                error_signature=signature,
                resolution=f"`{key}` failed, then succeeded after: {'; '.join(fix[-_MAX_COMMANDS:])}",
                commands=tuple(fix[-_MAX_COMMANDS:]),
                outcome="success",
                tags=("fix", *tags),
            )
        )
    lessons.append(_outcome_lesson(history, common, outcome, open_failures, last_error, tags))
    return lessons


def _outcome_lesson(
    history: Sequence[Mapping[str, Any]],
    common: dict[str, Any],
    outcome: Outcome,
    open_failures: Mapping[str, tuple[int, str]],
    last_error: str,
    tags: Sequence[str],
) -> Experience:
    done: list[str] = []
    for entry in history:
        command = str(entry.get("command") or "").strip()
        if command and _succeeded(entry) and not _is_probe(command) and command not in done:
            done.append(command)
    if outcome == "success":
        return Experience(
            **common,
            resolution=f"deployed in {len(history)} commands",
            commands=tuple(done[-_MAX_COMMANDS:]),
            outcome="success",
            tags=("outcome", *tags),
        )
    unresolved = [sig for _, sig in sorted(open_failures.values())]
    signature = unresolved[-1] if unresolved else last_error
    return Experience(
        **common,
        error_signature=signature,
        resolution=f"run failed after {len(history)} commands",
        commands=tuple(done[-_MAX_COMMANDS:]),
        outcome="failure",
        tags=("outcome", *tags),
    )
