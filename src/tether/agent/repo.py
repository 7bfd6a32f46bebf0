"""Repository analysis: what is this project and how would one deploy it.

:func:`analyze_repo` looks at a local directory, or clones a git URL (``git clone
--depth 1``) first, and returns a :class:`RepoContext`: project type, framework,
declared language versions, runnable scripts, key files (truncated), Dockerfile and
Compose presence, a suggested strategy (Docker Compose > Docker > traditional), likely
ports and a bounded directory tree. :meth:`RepoContext.to_prompt` renders the
``# Pre-Analyzed Repository Context`` block within a character budget.

Only files at the repository root are read, each up to a byte cap; binary and
unreadable files are skipped with a note. ``.env`` itself is never read (only
``.env.example`` and friends), and an optional ``redactor`` cleans key file contents.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import tempfile
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from tether.errors import CommandTimeout, ConfigError, ToolError

__all__ = ["ProjectType", "RepoContext", "Strategy", "analyze_repo", "is_git_url"]

logger = logging.getLogger(__name__)

ProjectType = Literal["nodejs", "python", "go", "rust", "java", "ruby", "php", "static", "docker", "unknown"]
Strategy = Literal["docker-compose", "docker", "traditional"]

KEY_FILES = (
    "package.json",
    "requirements.txt",
    "pyproject.toml",
    "Pipfile",
    "setup.py",
    "Dockerfile",
    "docker-compose.yml",
    "docker-compose.yaml",
    "compose.yml",
    "compose.yaml",
    ".env.example",
    ".env.sample",
    ".env.template",
    "Procfile",
    "go.mod",
    "Cargo.toml",
    "pom.xml",
    "build.gradle",
    "build.gradle.kts",
    "Gemfile",
    "composer.json",
    "Makefile",
    "manage.py",
    "next.config.js",
    "next.config.mjs",
    "vite.config.js",
    "vite.config.ts",
    "nginx.conf",
)
"""Root files read into :attr:`RepoContext.key_files`, in prompt order."""

COMPOSE_FILES = ("compose.yaml", "compose.yml", "docker-compose.yml", "docker-compose.yaml")
SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        ".venv",
        "venv",
        "env",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        "dist",
        "build",
        ".next",
        ".nuxt",
        ".svelte-kit",
        ".turbo",
        ".cache",
        "target",
        "vendor",
        "coverage",
        ".gradle",
        ".idea",
        ".terraform",
    }
)
"""Directories left out of the tree (and never descended into)."""

_READ_BYTES = 64 * 1024  # per key file; enough for any manifest

_NODE_FRAMEWORKS = (  # first match wins: the specific before the generic
    ("next", "Next.js"),
    ("nuxt", "Nuxt"),
    ("@nestjs/core", "NestJS"),
    ("@remix-run/react", "Remix"),
    ("@sveltejs/kit", "SvelteKit"),
    ("astro", "Astro"),
    ("gatsby", "Gatsby"),
    ("@angular/core", "Angular"),
    ("express", "Express"),
    ("fastify", "Fastify"),
    ("koa", "Koa"),
    ("@hapi/hapi", "hapi"),
    ("react-scripts", "Create React App"),
)
_PY_FRAMEWORKS = (
    ("django", "Django"),
    ("fastapi", "FastAPI"),
    ("flask", "Flask"),
    ("streamlit", "Streamlit"),
    ("gradio", "Gradio"),
    ("sanic", "Sanic"),
    ("aiohttp", "aiohttp"),
    ("tornado", "Tornado"),
    ("starlette", "Starlette"),
)
_TEXT_FRAMEWORKS: Mapping[str, tuple[tuple[str, str], ...]] = {
    "java": (("spring-boot", "Spring Boot"), ("quarkus", "Quarkus"), ("micronaut", "Micronaut")),
    "ruby": (("rails", "Rails"), ("sinatra", "Sinatra")),
    "php": (("laravel/framework", "Laravel"), ("symfony/framework-bundle", "Symfony"), ("slim/slim", "Slim")),
    "go": (
        ("gin-gonic/gin", "Gin"),
        ("labstack/echo", "Echo"),
        ("gofiber/fiber", "Fiber"),
        ("go-chi/chi", "chi"),
    ),
    "rust": (("actix-web", "Actix Web"), ("axum", "Axum"), ("rocket", "Rocket")),
}
_DEFAULT_PORTS = {
    "Next.js": 3000,
    "Nuxt": 3000,
    "NestJS": 3000,
    "Remix": 3000,
    "Express": 3000,
    "Fastify": 3000,
    "Koa": 3000,
    "Create React App": 3000,
    "Rails": 3000,
    "React/Vite": 5173,
    "Vue/Vite": 5173,
    "Vite": 5173,
    "SvelteKit": 5173,
    "Astro": 4321,
    "Angular": 4200,
    "Gatsby": 8000,
    "Django": 8000,
    "FastAPI": 8000,
    "Laravel": 8000,
    "Flask": 5000,
    "Streamlit": 8501,
    "Gradio": 7860,
    "Spring Boot": 8080,
    "Gin": 8080,
    "Echo": 1323,
    "Fiber": 3000,
    "Actix Web": 8080,
    "Axum": 3000,
    "Rocket": 8000,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class RepoContext:
    """What the analysis found; rendered into the prompt by :meth:`to_prompt`."""

    source: str
    """The path or URL analysed (credentials in a URL are removed)."""
    root: str
    """The local directory that was analysed (the clone, for a URL)."""
    is_remote: bool = False
    """The source was a git URL."""
    revision: str | None = None
    """The commit checked out, for a clone."""
    project_type: ProjectType = "unknown"
    """The main language or kind of project."""
    framework: str | None = None
    """The web framework, if one is recognised."""
    language_versions: dict[str, str] = field(default_factory=dict)
    """Declared versions: ``{"node": ">=18", "python": "3.11"}``."""
    package_manager: str | None = None
    """``npm``, ``yarn``, ``pnpm``, ``bun``, ``pip``, ``poetry``, ``uv``..."""
    scripts: dict[str, str] = field(default_factory=dict)
    """How to run things: ``{"npm run build": "next build", "make test": "pytest"}``."""
    key_files: dict[str, str] = field(default_factory=dict)
    """Root manifest name → content, truncated."""
    has_dockerfile: bool = False
    """A ``Dockerfile`` at the root."""
    has_compose: bool = False
    """A Compose file at the root."""
    suggested_strategy: Strategy = "traditional"
    """``docker-compose`` > ``docker`` > ``traditional``."""
    ports: tuple[int, ...] = ()
    """Likely ports: EXPOSE, Compose, ``PORT=``, then the framework's default."""
    tree: str = ""
    """A bounded directory tree."""
    notes: tuple[str, ...] = ()
    """What could not be read, and other caveats."""

    def to_prompt(self, *, max_chars: int = 6_000, max_file_chars: int = 1_500) -> str:
        """The ``# Pre-Analyzed Repository Context`` block of the prompt, at most ``max_chars`` long.

        Key files come last and are dropped (then cut) first when the block is too big.
        """
        head = [
            "# Pre-Analyzed Repository Context",
            f"- {'URL' if self.is_remote else 'Path'}: {self.source}",
        ]
        head.append(f"- Detected Type: {self.project_type}")
        head.append(f"- Framework: {self.framework or 'unknown'}")
        if self.language_versions:
            versions = ", ".join(f"{k} {v}" for k, v in self.language_versions.items())
            head.append(f"- Language Versions: {versions}")
        if self.package_manager:
            head.append(f"- Package Manager: {self.package_manager}")
        yes_no = {True: "yes", False: "no"}
        head.append(
            f"- Docker: Dockerfile: {yes_no[self.has_dockerfile]}, Compose: {yes_no[self.has_compose]}"
        )
        head.append(f"- Suggested Strategy: {self.suggested_strategy}")
        if self.ports:
            head.append(f"- Likely Ports: {', '.join(str(p) for p in self.ports)}")
        parts = ["\n".join(head)]
        if self.tree:
            parts.append(f"## Directory Structure\n{self.tree}")
        if self.scripts:
            parts.append("## Available Scripts\n" + "\n".join(f"- {k}: {v}" for k, v in self.scripts.items()))
        if self.notes:
            parts.append("## Notes\n" + "\n".join(f"- {n}" for n in self.notes))
        text = "\n\n".join(parts)
        files: list[str] = []
        for name, content in self.key_files.items():
            files.append(f"### {name}\n{_cut(content.rstrip(), max_file_chars)}")
        if files:
            budget = max_chars - len(text) - len("\n\n## Key Files")
            kept: list[str] = []
            for block in files:
                if sum(len(b) + 1 for b in kept) + len(block) + 1 > budget:
                    break
                kept.append(block)
            if kept:
                text += "\n\n## Key Files\n" + "\n".join(kept)
        return _cut(text, max_chars)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    marker = f"\n… ({len(text) - limit} more chars)"
    return text[: max(0, limit - len(marker))] + marker


# --- reading the tree ------------------------------------------------------------------


def _read_text(path: Path, notes: list[str]) -> str | None:
    """The file's text (up to a cap), or None with a note if it is binary or unreadable."""
    try:
        with path.open("rb") as fh:
            data = fh.read(_READ_BYTES + 1)
    except OSError as exc:
        notes.append(f"{path.name}: unreadable ({exc.strerror or type(exc).__name__})")
        return None
    if b"\x00" in data[:8192]:
        notes.append(f"{path.name}: binary, skipped")
        return None
    text = data[:_READ_BYTES].decode("utf-8", errors="replace")
    if text.count("\ufffd") > max(8, len(text) // 100):
        notes.append(f"{path.name}: not UTF-8 text, skipped")
        return None
    if len(data) > _READ_BYTES:
        text += "\n… (file truncated)"
    return text


def _tree(root: Path, name: str, *, max_depth: int, max_entries: int, per_dir: int) -> str:
    lines = [f"{name}/"]
    budget = [max_entries]

    def walk(directory: Path, prefix: str, depth: int) -> None:
        try:
            entries = [
                e
                for e in os.scandir(directory)
                if not (e.is_dir(follow_symlinks=False) and e.name in SKIP_DIRS)
            ]
        except OSError:
            lines.append(f"{prefix}└── (unreadable)")
            return
        entries.sort(key=lambda e: (not e.is_dir(follow_symlinks=False), e.name.lower()))
        shown = entries[:per_dir]
        hidden = len(entries) - len(shown)
        for i, entry in enumerate(shown):
            if budget[0] <= 0:
                if budget[0] == 0:  # once, at the level where the cap was reached
                    lines.append(f"{prefix}└── … (tree cut at {max_entries} entries)")
                    budget[0] = -1
                return
            budget[0] -= 1
            last = i == len(shown) - 1 and not hidden
            is_dir = entry.is_dir(follow_symlinks=False)
            lines.append(f"{prefix}{'└── ' if last else '├── '}{entry.name}{'/' if is_dir else ''}")
            if is_dir and depth < max_depth:
                walk(Path(entry.path), prefix + ("    " if last else "│   "), depth + 1)
        if hidden and budget[0] >= 0:
            lines.append(f"{prefix}└── … ({hidden} more)")

    walk(root, "", 1)
    return "\n".join(lines)


def _package_json(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _toml(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}


def _node(pkg: dict[str, Any], names: set[str]) -> str | None:
    deps: dict[str, Any] = {}
    for section in ("dependencies", "devDependencies"):
        if isinstance(pkg.get(section), dict):
            deps.update(pkg[section])
    for dep, framework in _NODE_FRAMEWORKS:
        if dep in deps:
            return framework
    if "vite" in deps or any(n.startswith("vite.config.") for n in names):
        if "react" in deps:
            return "React/Vite"
        if "vue" in deps:
            return "Vue/Vite"
        return "Vite"
    if "react" in deps:
        return "React"
    if "vue" in deps:
        return "Vue"
    return None


def _python(text: str, names: set[str]) -> str | None:
    if "manage.py" in names:
        return "Django"
    low = text.lower()
    for dep, framework in _PY_FRAMEWORKS:
        if re.search(rf"(?<![\w-]){re.escape(dep)}(?![\w])", low):
            return framework
    return None


def _by_text(kind: str, text: str) -> str | None:
    low = text.lower()
    for needle, framework in _TEXT_FRAMEWORKS.get(kind, ()):
        if re.search(rf"(?<![\w-]){re.escape(needle)}(?![\w])", low):
            return framework
    return None


_MARKERS: tuple[tuple[ProjectType, tuple[str, ...]], ...] = (
    ("nodejs", ("package.json",)),
    ("python", ("pyproject.toml", "requirements.txt", "setup.py", "Pipfile", "manage.py", "setup.cfg")),
    ("go", ("go.mod",)),
    ("rust", ("Cargo.toml",)),
    ("java", ("pom.xml", "build.gradle", "build.gradle.kts")),
    ("ruby", ("Gemfile",)),
    ("php", ("composer.json",)),
)


def _detect(names: set[str], files: Mapping[str, str]) -> tuple[ProjectType, str | None]:
    """The project type and framework; a type whose framework is recognised wins."""
    found: list[tuple[ProjectType, str | None]] = []
    for kind, markers in _MARKERS:
        if not any(m in names for m in markers):
            continue
        text = "\n".join(files.get(m, "") for m in markers)
        if kind == "nodejs":
            framework = _node(_package_json(files.get("package.json")), names)
        elif kind == "python":
            framework = _python(text, names)
        else:
            framework = _by_text(kind, text)
        found.append((kind, framework))
    for kind, framework in found:
        if framework is not None:
            return kind, framework
    if found:
        return found[0]
    if any(n.lower() in ("index.html", "index.htm") for n in names):
        return "static", None
    if "Dockerfile" in names or any(c in names for c in COMPOSE_FILES):
        return "docker", None
    return "unknown", None


def _package_manager(kind: str, names: set[str], pyproject: dict[str, Any]) -> str | None:
    if kind == "nodejs":
        for lock, manager in (("pnpm-lock.yaml", "pnpm"), ("yarn.lock", "yarn"), ("bun.lockb", "bun")):
            if lock in names:
                return manager
        return "bun" if "bun.lock" in names else "npm"
    if kind == "python":
        if "uv.lock" in names:
            return "uv"
        if "poetry.lock" in names or "poetry" in pyproject.get("tool", {}):
            return "poetry"
        if "Pipfile" in names:
            return "pipenv"
        return "pip"
    if kind == "java":
        return "maven" if "pom.xml" in names else "gradle"
    return {"go": "go", "rust": "cargo", "ruby": "bundler", "php": "composer"}.get(kind)


def _scripts(files: Mapping[str, str], manager: str | None, pyproject: dict[str, Any]) -> dict[str, str]:
    scripts: dict[str, str] = {}
    pkg = _package_json(files.get("package.json"))
    if isinstance(pkg.get("scripts"), dict):
        pm = manager if manager in ("npm", "yarn", "pnpm", "bun") else "npm"
        for name, command in pkg["scripts"].items():
            run = (
                f"{pm} {name}"
                if pm == "yarn" or (pm == "npm" and name in ("start", "test"))
                else f"{pm} run {name}"
            )
            scripts[run] = str(command)
    project = pyproject.get("project", {})
    poetry = pyproject.get("tool", {}).get("poetry", {})
    for table in (project.get("scripts"), poetry.get("scripts") if isinstance(poetry, dict) else None):
        if isinstance(table, dict):
            for name, target in table.items():
                scripts[name] = str(target)
    makefile = files.get("Makefile", "")
    for match in re.finditer(r"^([A-Za-z0-9][\w.-]*)\s*:(?![=:])", makefile, re.M):
        target = match.group(1)
        if not target.startswith(".") and f"make {target}" not in scripts:
            scripts[f"make {target}"] = _recipe(makefile, match.end())
    for line in files.get("Procfile", "").splitlines():
        name, sep, command = line.partition(":")
        if sep and name.strip() and not name.lstrip().startswith("#"):
            scripts[f"Procfile {name.strip()}"] = command.strip()
    return scripts


def _recipe(makefile: str, pos: int) -> str:
    """The first command of a Makefile rule (its first tab-indented line)."""
    rest = makefile[pos:].split("\n")[1:]
    for line in rest[:5]:
        if line.startswith("\t"):
            return line.strip()
        if line.strip() and not line.startswith("\t"):
            break
    return "(no recipe)"


def _versions(
    root: Path, files: Mapping[str, str], pyproject: dict[str, Any], notes: list[str]
) -> dict[str, str]:
    versions: dict[str, str] = {}
    pkg = _package_json(files.get("package.json"))
    engines = pkg.get("engines")
    if isinstance(engines, dict) and engines.get("node"):
        versions["node"] = str(engines["node"])
    for name, lang in (
        (".nvmrc", "node"),
        (".node-version", "node"),
        (".python-version", "python"),
        (".ruby-version", "ruby"),
    ):
        if lang not in versions and (root / name).is_file():
            text = _read_text(root / name, notes)
            if text and text.strip():
                versions[lang] = text.strip().splitlines()[0][:40]
    runtime = (root / "runtime.txt").is_file() and _read_text(root / "runtime.txt", notes)
    if runtime and "python" not in versions and (m := re.search(r"python-([\d.]+)", runtime)):
        versions["python"] = m.group(1)
    if "python" not in versions and isinstance(pyproject.get("project", {}).get("requires-python"), str):
        versions["python"] = pyproject["project"]["requires-python"]
    if m := re.search(r"^go\s+([\d.]+)", files.get("go.mod", ""), re.M):
        versions["go"] = m.group(1)
    if m := re.search(r"<java\.version>\s*([\w.]+)\s*<", files.get("pom.xml", "")):
        versions["java"] = m.group(1)
    if m := re.search(r'"php"\s*:\s*"([^"]+)"', files.get("composer.json", "")):
        versions["php"] = m.group(1)
    if m := re.search(r'^ruby\s+["\']([^"\']+)', files.get("Gemfile", ""), re.M):
        versions.setdefault("ruby", m.group(1))
    return versions


_PUBLISHED = re.compile(r"(?:-\s*)?published:\s*[\"']?(\d+)")


def _port_item(item: str) -> int | None:
    """The host port of a short-syntax Compose mapping: ``[IP:]HOST:CONTAINER[/proto]`` or ``CONTAINER``."""
    parts = item.strip().strip("\"'").split("/")[0].split(":")
    port = parts[-2] if len(parts) >= 2 else parts[0]
    m = re.match(r"(\d+)(?:-\d+)?$", port)
    return int(m.group(1)) if m else None


def _compose_ports(text: str) -> list[int]:
    ports: list[int] = []
    in_ports, indent = False, 0
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        depth = len(line) - len(line.lstrip())
        if stripped.startswith("ports:"):
            in_ports, indent = True, depth
            continue
        if in_ports and depth <= indent and not stripped.startswith("-"):
            in_ports = False
        if not in_ports:
            continue
        if m := _PUBLISHED.match(stripped):
            ports.append(int(m.group(1)))
        elif stripped.startswith("-") and (port := _port_item(stripped[1:])) is not None:
            ports.append(port)
    return ports


def _ports(files: Mapping[str, str], framework: str | None, compose: str | None) -> tuple[int, ...]:
    found: list[int] = []
    for m in re.finditer(r"^\s*EXPOSE\s+(.+)$", files.get("Dockerfile", ""), re.M | re.I):
        found += [int(p) for p in re.findall(r"(\d+)(?:/\w+)?", m.group(1))]
    if compose:
        found += _compose_ports(files.get(compose, ""))
    for name in (".env.example", ".env.sample", ".env.template"):
        if env := re.search(r"^\s*PORT\s*=\s*[\"']?(\d+)", files.get(name, ""), re.M):
            found.append(int(env.group(1)))
    scripts = " ".join(str(v) for v in _package_json(files.get("package.json")).get("scripts", {}).values())
    found += [int(p) for p in re.findall(r"(?:-p|--port)[ =](\d{2,5})\b", scripts)]
    if framework in _DEFAULT_PORTS:
        found.append(_DEFAULT_PORTS[framework])
    return tuple(dict.fromkeys(p for p in found if 0 < p < 65536))


def _analyze_dir(
    root: Path,
    *,
    source: str,
    is_remote: bool,
    revision: str | None,
    redactor: Callable[[str], str] | None,
    max_file_chars: int,
    tree_depth: int,
    tree_entries: int,
) -> RepoContext:
    notes: list[str] = []
    try:
        names = {e.name for e in os.scandir(root) if e.is_file()}
    except OSError as exc:
        raise ConfigError(f"cannot list {root}: {exc.strerror or exc}") from exc
    raw: dict[str, str] = {}
    for name in KEY_FILES:
        if name in names and (text := _read_text(root / name, notes)) is not None:
            raw[name] = text
    pyproject = _toml(raw.get("pyproject.toml"))
    kind, framework = _detect(names, raw)
    manager = _package_manager(kind, names, pyproject)
    compose = next((c for c in COMPOSE_FILES if c in names), None)
    has_dockerfile = "Dockerfile" in names
    strategy: Strategy = "docker-compose" if compose else "docker" if has_dockerfile else "traditional"
    clean = redactor or (lambda s: s)
    key_files = {n: _cut(clean(t), max_file_chars) for n, t in raw.items()}  # redact, then cut
    return RepoContext(
        source=source,
        root=str(root),
        is_remote=is_remote,
        revision=revision,
        project_type=kind,
        framework=framework,
        language_versions=_versions(root, raw, pyproject, notes),
        package_manager=manager,
        scripts={k: clean(v) for k, v in _scripts(raw, manager, pyproject).items()},
        key_files=key_files,
        has_dockerfile=has_dockerfile,
        has_compose=compose is not None,
        suggested_strategy=strategy,
        ports=_ports(raw, framework, compose),
        tree=_tree(
            root,
            _repo_name(source) if is_remote else root.resolve().name,
            max_depth=tree_depth,
            max_entries=tree_entries,
            per_dir=25,
        ),
        notes=tuple(notes),
    )


# --- git ----------------------------------------------------------------------------

_SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:(?!//)\S+$")


def is_git_url(text: str) -> bool:
    """``https://``, ``ssh://``, ``git://``, ``file://`` or ``user@host:path`` (scp-like)."""
    return bool(re.match(r"^(https?|ssh|git|git\+ssh|file)://", text) or _SCP_LIKE.match(text))


def _safe_url(url: str) -> str:
    """The URL without any user:password (tokens must not reach logs or prompts)."""
    if _SCP_LIKE.match(url):
        return url
    parts = urlsplit(url)
    if parts.password is None and "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=host))


def _repo_name(source: str) -> str:
    name = re.split(r"[/:]", source.rstrip("/"))[-1]
    return name.removesuffix(".git")


async def _git(*args: str, cwd: str | None = None, seconds: float) -> str:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
    proc = await asyncio.create_subprocess_exec(
        "git",
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        async with asyncio.timeout(seconds):
            out, err = await proc.communicate()
    except TimeoutError:
        raise CommandTimeout(f"git {args[0]}", seconds) from None
    finally:
        if proc.returncode is None:  # timed out or cancelled: git and its helpers (ssh, https) go
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await asyncio.shield(proc.wait())
    if proc.returncode != 0:
        message = err.decode(errors="replace").strip().splitlines()
        raise ToolError(f"git {args[0]} failed (exit {proc.returncode}): {' / '.join(message[-3:])}")
    return out.decode(errors="replace").strip()


def _clone_target(workdir: str | None, name: str) -> Path:
    base = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="tether-repo-"))
    target = base / name
    if target.exists() and any(target.iterdir()):
        raise ConfigError(f"{target} already exists and is not empty: pass another workdir or remove it")
    base.mkdir(parents=True, exist_ok=True)
    return target


async def _clone(url: str, workdir: str | None, *, seconds: float) -> tuple[Path, str | None]:
    safe = _safe_url(url)
    target = await asyncio.to_thread(_clone_target, workdir, _repo_name(safe) or "repo")
    logger.info("cloning %s into %s", safe, target)
    try:
        await _git("clone", "--depth", "1", "--quiet", "--", url, str(target), seconds=seconds)
    except CommandTimeout:
        raise
    except ToolError as exc:
        raise ToolError(str(exc).replace(url, safe)) from None
    try:
        revision: str | None = await _git("rev-parse", "HEAD", cwd=str(target), seconds=seconds)
    except ToolError:
        revision = None
    return target, revision


def _local_dir(text: str) -> Path:
    root = Path(text).expanduser()
    if not root.is_dir():
        raise ConfigError(f"{text} is not a directory (or a git URL such as https://host/owner/repo.git)")
    return root


async def analyze_repo(
    path_or_url: str | os.PathLike[str],
    *,
    workdir: str | os.PathLike[str] | None = None,
    redactor: Callable[[str], str] | None = None,
    clone_timeout: float = 300.0,
    max_file_chars: int = 4_000,
    tree_depth: int = 3,
    tree_entries: int = 120,
) -> RepoContext:
    """Analyse a local directory, or clone a git URL and analyse the clone.

    Args:
        path_or_url: a directory, or a git URL (``https://``, ``ssh://``, ``git://``,
            ``file://``, ``user@host:path``).
        workdir: where a URL is cloned (into ``workdir/<repo name>``, which must not
            exist or be empty); a new temporary directory when None. The clone is left
            in place for the caller (:attr:`RepoContext.root`).
        redactor: applied to key file contents and scripts (secrets in committed files).
        clone_timeout: seconds before ``git clone`` is killed.
        max_file_chars: each key file is cut to this many characters.
        tree_depth, tree_entries: bounds of the directory tree.

    Raises:
        ConfigError: the path is not a directory, or the clone target is taken.
        ToolError: ``git clone`` failed (``CommandTimeout`` if it ran too long).
    """
    text = os.fspath(path_or_url)
    revision: str | None = None
    if is_git_url(text):
        where = None if workdir is None else os.fspath(workdir)
        root, revision = await _clone(text, where, seconds=clone_timeout)
        source, remote = _safe_url(text), True
    else:
        root = await asyncio.to_thread(_local_dir, text)
        source, remote = text, False
    context = await asyncio.to_thread(
        _analyze_dir,
        root,
        source=source,
        is_remote=remote,
        revision=revision,
        redactor=redactor,
        max_file_chars=max_file_chars,
        tree_depth=tree_depth,
        tree_entries=tree_entries,
    )
    logger.info(
        "analysed %s: %s/%s strategy=%s ports=%s",
        source,
        context.project_type,
        context.framework or "-",
        context.suggested_strategy,
        ",".join(str(p) for p in context.ports) or "-",
    )
    return context
