from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from tether.agent.repo import RepoContext, analyze_repo, is_git_url
from tether.errors import CommandTimeout, ConfigError, ToolError

NEXT_PACKAGE = {
    "name": "shop",
    "scripts": {"dev": "next dev -p 4000", "build": "next build", "start": "next start", "lint": "next lint"},
    "dependencies": {"next": "14.2.0", "react": "18.3.0", "react-dom": "18.3.0"},
    "engines": {"node": ">=18.17"},
}


def write(root: Path, files: Mapping[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


@pytest.fixture
def next_app(tmp_path: Path) -> Path:
    return write(
        tmp_path / "shop",
        {
            "package.json": json.dumps(NEXT_PACKAGE, indent=2),
            "pnpm-lock.yaml": "lockfileVersion: '6.0'\n",
            "next.config.js": "module.exports = {}\n",
            ".nvmrc": "20.11.1\n",
            "app/page.tsx": "export default function Page() {}\n",
            "app/layout.tsx": "",
            "public/favicon.ico": b"\x00\x00\x01\x00",
            "node_modules/next/package.json": "{}",
            ".git/HEAD": "ref: refs/heads/main\n",
        },
    )


@pytest.fixture
def fastapi_app(tmp_path: Path) -> Path:
    return write(
        tmp_path / "api",
        {
            "requirements.txt": "fastapi==0.111.0\nuvicorn[standard]>=0.29\npydantic>=2\n",
            "Dockerfile": "FROM python:3.12-slim\nWORKDIR /app\nCOPY . .\nEXPOSE 8000\n"
            'CMD ["uvicorn", "main:app", "--host", "0.0.0.0"]\n',
            ".python-version": "3.12.3\n",
            "main.py": "from fastapi import FastAPI\napp = FastAPI()\n",
            "Makefile": ".PHONY: run test\nrun:\n\tuvicorn main:app --reload\n"
            "test: run\n\tpytest -q\nVAR := 1\n",
            "Procfile": "web: uvicorn main:app --port $PORT\n# comment: ignored\n",
            ".env.example": "PORT=8000\nDATABASE_URL=postgres://user:pass@db/app\n",
            ".venv/lib/site.py": "",
            "tests/test_main.py": "",
        },
    )


@pytest.fixture
def compose_app(tmp_path: Path) -> Path:
    return write(
        tmp_path / "stack",
        {
            "compose.yaml": 'services:\n  web:\n    build: .\n    ports:\n      - "8080:80"\n'
            "      - 127.0.0.1:9443:443/tcp\n    environment:\n      - A=1\n"
            "  db:\n    image: postgres:16\n    ports:\n      - target: 5432\n        published: 5433\n",
            "Dockerfile": "FROM nginx:1.27\nEXPOSE 80 443/tcp\n",
            "index.html": "<h1>hi</h1>\n",
        },
    )


async def test_nextjs_project(next_app: Path) -> None:
    """Type, framework, package manager, versions, scripts, ports, strategy."""
    ctx = await analyze_repo(next_app)
    assert (ctx.project_type, ctx.framework, ctx.package_manager) == ("nodejs", "Next.js", "pnpm")
    assert ctx.language_versions == {"node": ">=18.17"}  # engines wins over .nvmrc
    assert ctx.scripts == {
        "pnpm run dev": "next dev -p 4000",
        "pnpm run build": "next build",
        "pnpm run start": "next start",
        "pnpm run lint": "next lint",
    }
    assert ctx.ports == (4000, 3000)
    assert ctx.suggested_strategy == "traditional" and not ctx.has_dockerfile and not ctx.has_compose
    assert set(ctx.key_files) == {"package.json", "next.config.js"}
    assert not ctx.is_remote and ctx.source == str(next_app) and ctx.root == str(next_app)


async def test_nextjs_tree_skips_vendor_dirs(next_app: Path) -> None:
    """node_modules and .git are left out; directories come first."""
    ctx = await analyze_repo(next_app)
    assert ctx.tree == (
        "shop/\n"
        "├── app/\n"
        "│   ├── layout.tsx\n"
        "│   └── page.tsx\n"
        "├── public/\n"
        "│   └── favicon.ico\n"
        "├── .nvmrc\n"
        "├── next.config.js\n"
        "├── package.json\n"
        "└── pnpm-lock.yaml"
    )


async def test_fastapi_project_with_dockerfile(fastapi_app: Path) -> None:
    """requirements.txt → FastAPI; EXPOSE, .env.example and the default port; Makefile and Procfile."""
    ctx = await analyze_repo(fastapi_app)
    assert (ctx.project_type, ctx.framework, ctx.package_manager) == ("python", "FastAPI", "pip")
    assert ctx.language_versions == {"python": "3.12.3"}
    assert ctx.has_dockerfile and ctx.suggested_strategy == "docker"
    assert ctx.ports == (8000,)
    assert ctx.scripts == {
        "make run": "uvicorn main:app --reload",
        "make test": "pytest -q",
        "Procfile web": "uvicorn main:app --port $PORT",
    }
    assert list(ctx.key_files) == ["requirements.txt", "Dockerfile", ".env.example", "Procfile", "Makefile"]
    assert ".venv" not in ctx.tree and "tests/" in ctx.tree


async def test_compose_beats_docker_and_ports_come_from_compose(compose_app: Path) -> None:
    """Compose > Docker; EXPOSE first, then published compose ports."""
    ctx = await analyze_repo(compose_app)
    assert ctx.has_compose and ctx.has_dockerfile
    assert ctx.suggested_strategy == "docker-compose"
    assert ctx.project_type == "static"  # index.html, no language manifest
    assert ctx.ports == (80, 443, 8080, 9443, 5433)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"Dockerfile": "FROM alpine\n"}, ("docker", None)),
        ({"go.mod": "module x\n\ngo 1.22\n\nrequire github.com/gin-gonic/gin v1.9.1\n"}, ("go", "Gin")),
        ({"Cargo.toml": '[dependencies]\naxum = "0.7"\n'}, ("rust", "Axum")),
        ({"pom.xml": "<artifactId>spring-boot-starter-web</artifactId>"}, ("java", "Spring Boot")),
        ({"Gemfile": "source 'https://rubygems.org'\ngem 'rails', '~> 7.1'\n"}, ("ruby", "Rails")),
        ({"composer.json": '{"require": {"php": "^8.2", "laravel/framework": "^11"}}'}, ("php", "Laravel")),
        ({"manage.py": "", "requirements.txt": "Django>=5\n"}, ("python", "Django")),
        (
            {"pyproject.toml": '[project]\nname="x"\ndependencies=["flask>=3", "flask-cors"]\n'},
            ("python", "Flask"),
        ),
        ({"package.json": '{"dependencies": {"express": "^4"}}'}, ("nodejs", "Express")),
        ({"package.json": '{"devDependencies": {"vite": "^5", "react": "^18"}}'}, ("nodejs", "React/Vite")),
        ({"package.json": "{not json"}, ("nodejs", None)),
        # a Django backend with a package.json for its assets is a Django project
        ({"package.json": '{"devDependencies": {"sass": "1"}}', "manage.py": ""}, ("python", "Django")),
        ({"README.md": "hello"}, ("unknown", None)),
    ],
)
async def test_project_type_and_framework(
    tmp_path: Path, files: dict[str, str], expected: tuple[str, str]
) -> None:
    """One marker file per ecosystem; a type with a recognised framework wins over a bare one."""
    ctx = await analyze_repo(write(tmp_path / "p", files))
    assert (ctx.project_type, ctx.framework) == expected


async def test_versions_from_manifests(tmp_path: Path) -> None:
    """go.mod, composer.json, pyproject requires-python and runtime.txt versions are read."""
    ctx = await analyze_repo(write(tmp_path / "g", {"go.mod": "module x\n\ngo 1.22.1\n"}))
    assert ctx.language_versions == {"go": "1.22.1"} and ctx.package_manager == "go"
    files = {
        "pyproject.toml": '[project]\nname="x"\nrequires-python=">=3.11"\n[project.scripts]\nx="x:main"\n'
    }
    ctx = await analyze_repo(write(tmp_path / "p", {**files, "uv.lock": ""}))
    assert ctx.language_versions == {"python": ">=3.11"} and ctx.package_manager == "uv"
    assert ctx.scripts == {"x": "x:main"}
    ctx = await analyze_repo(
        write(tmp_path / "h", {"requirements.txt": "flask\n", "runtime.txt": "python-3.11.9\n"})
    )
    assert ctx.language_versions == {"python": "3.11.9"}


async def test_empty_directory(tmp_path: Path) -> None:
    """Nothing found is a valid answer."""
    (tmp_path / "empty").mkdir()
    ctx = await analyze_repo(tmp_path / "empty")
    assert ctx == RepoContext(source=str(tmp_path / "empty"), root=str(tmp_path / "empty"), tree="empty/")
    assert "- Detected Type: unknown\n- Framework: unknown" in ctx.to_prompt()


async def test_binary_and_undecodable_files_are_skipped_with_notes(tmp_path: Path) -> None:
    """A binary Dockerfile and a Latin-1 requirements.txt are noted, not read; a big file is cut."""
    root = write(
        tmp_path / "odd",
        {
            "Dockerfile": b"FROM x\x00\x00\x01binary",
            "requirements.txt": "caf\xe9 cr\xe8me\n".encode("latin-1") * 50,
            "package.json": json.dumps({"name": "big", "description": "x" * 100_000}),
        },
    )
    ctx = await analyze_repo(root, max_file_chars=500)
    assert ctx.notes == ("requirements.txt: not UTF-8 text, skipped", "Dockerfile: binary, skipped")
    assert ctx.has_dockerfile  # present, just not readable as text
    assert len(ctx.key_files["package.json"]) < 600 and "more chars" in ctx.key_files["package.json"]
    assert "## Notes\n- requirements.txt: not UTF-8 text, skipped" in ctx.to_prompt()


async def test_unreadable_file_is_noted(tmp_path: Path) -> None:
    """A key file that cannot be read is noted, and the analysis goes on."""
    root = write(tmp_path / "locked", {"package.json": '{"dependencies": {"express": "4"}}'})
    if os.geteuid() == 0:  # root reads any mode: use a file whose read fails (EIO)
        if not Path("/proc/self/mem").exists():
            pytest.skip("needs /proc/self/mem when running as root")
        (root / "Procfile").symlink_to("/proc/self/mem")
    else:
        (root / "Procfile").write_text("web: x")
        (root / "Procfile").chmod(0)
    ctx = await analyze_repo(root)
    assert ctx.framework == "Express" and ctx.notes[0].startswith("Procfile: unreadable (")
    assert "Procfile" not in ctx.key_files


async def test_tree_is_bounded(tmp_path: Path) -> None:
    """Per-directory, depth and total caps hold on a big tree."""
    files: dict[str, str | bytes] = {f"many/f{i:03}.txt": "" for i in range(60)}
    files["a/b/c/d/e/deep.txt"] = ""
    root = write(tmp_path / "big", files)
    ctx = await analyze_repo(root, tree_depth=3, tree_entries=40)
    lines = ctx.tree.splitlines()
    assert "deep.txt" not in ctx.tree and "d/" not in ctx.tree  # depth 3 stops at a/b/c/
    assert lines[:4] == ["big/", "├── a/", "│   └── b/", "│       └── c/"]
    assert lines[-1] == "    └── … (35 more)" and len(lines) == 31  # 25 per directory
    capped = (await analyze_repo(root, tree_entries=10)).tree.splitlines()
    assert len(capped) == 12 and capped[-1] == "    └── … (tree cut at 10 entries)"


async def test_secret_in_committed_file_is_redacted(fastapi_app: Path) -> None:
    """The redactor cleans key files; .env itself is never read."""
    (fastapi_app / ".env").write_text("OPENAI_API_KEY=sk-live-123\n")
    ctx = await analyze_repo(fastapi_app, redactor=lambda s: s.replace("user:pass", "[REDACTED]"))
    assert "postgres://[REDACTED]@db/app" in ctx.key_files[".env.example"]
    assert "sk-live-123" not in ctx.to_prompt(max_chars=100_000)


# --- prompt ---------------------------------------------------------------------------


async def test_prompt_block_matches_the_seed_layout(next_app: Path) -> None:
    """Header lines, then Directory Structure, Available Scripts and Key Files, in that order."""
    text = (await analyze_repo(next_app)).to_prompt()
    assert text.startswith(
        "# Pre-Analyzed Repository Context\n"
        f"- Path: {next_app}\n"
        "- Detected Type: nodejs\n"
        "- Framework: Next.js\n"
        "- Language Versions: node >=18.17\n"
        "- Package Manager: pnpm\n"
        "- Docker: Dockerfile: no, Compose: no\n"
        "- Suggested Strategy: traditional\n"
        "- Likely Ports: 4000, 3000\n"
        "\n## Directory Structure\nshop/\n├── app/\n"
    )
    assert (
        "\n\n## Available Scripts\n- pnpm run dev: next dev -p 4000\n- pnpm run build: next build\n" in text
    )
    assert '\n\n## Key Files\n### package.json\n{\n  "name": "shop",' in text
    assert (
        text.index("## Directory Structure") < text.index("## Available Scripts") < text.index("## Key Files")
    )


async def test_prompt_is_bounded(fastapi_app: Path) -> None:
    """Key files are dropped before anything else; the block never exceeds max_chars."""
    ctx = await analyze_repo(fastapi_app)
    full = ctx.to_prompt(max_chars=100_000)
    assert "### requirements.txt" in full and "### Makefile" in full
    small = ctx.to_prompt(max_chars=1_000)
    assert len(small) <= 1_000 and "## Available Scripts" in small and "### Makefile" not in small
    tiny = ctx.to_prompt(max_chars=200)
    assert len(tiny) <= 200 and tiny.startswith("# Pre-Analyzed Repository Context")
    assert tiny.endswith("more chars)")
    cut = ctx.to_prompt(max_chars=100_000, max_file_chars=20)
    assert "### requirements.txt\n\n… (" in cut or "### requirements.txt\n" in cut


# --- git ------------------------------------------------------------------------------


def git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}
    cmd = ["git", "-c", "user.name=Test", "-c", "user.email=t@example.org", "-c", "init.defaultBranch=main"]
    return subprocess.run(
        [*cmd, *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def origin(tmp_path: Path, fastapi_app: Path) -> Path:
    git("init", "-q", cwd=fastapi_app)
    git("add", "-A", cwd=fastapi_app)
    git("commit", "-q", "-m", "initial", cwd=fastapi_app)
    bare = tmp_path / "origin" / "api.git"
    bare.parent.mkdir()
    git("clone", "-q", "--bare", str(fastapi_app), str(bare), cwd=tmp_path)
    return bare


async def test_clone_from_a_file_url(tmp_path: Path, origin: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A file:// URL is cloned shallowly into workdir/<name> and analysed there."""
    caplog.set_level(logging.INFO)
    url = origin.as_uri()
    ctx = await analyze_repo(url, workdir=tmp_path / "work")
    assert ctx.is_remote and ctx.source == url
    assert ctx.root == str(tmp_path / "work" / "api")
    assert ctx.revision == git("rev-parse", "HEAD", cwd=origin)
    assert (ctx.project_type, ctx.framework, ctx.suggested_strategy) == ("python", "FastAPI", "docker")
    assert git("rev-parse", "--is-shallow-repository", cwd=Path(ctx.root)) == "true"
    assert ctx.tree.startswith("api/\n") and ".git" not in ctx.tree
    assert ctx.to_prompt().splitlines()[1] == f"- URL: {url}"
    assert "cloning" in caplog.text
    with pytest.raises(ConfigError, match="already exists"):
        await analyze_repo(url, workdir=tmp_path / "work")


async def test_clone_into_a_temporary_directory(origin: Path) -> None:
    """Without workdir, the clone goes to a fresh temporary directory."""
    ctx = await analyze_repo(origin.as_uri())
    assert Path(ctx.root).name == "api" and Path(ctx.root, "Dockerfile").is_file()


async def test_failed_clone_hides_credentials(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A failing clone raises ToolError; a token in the URL is in neither the error nor the logs."""
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ToolError, match="git clone failed") as info:
        await analyze_repo((tmp_path / "missing.git").as_uri(), workdir=tmp_path / "w")
    assert "exit 128" in str(info.value)
    with pytest.raises(ToolError) as info:
        await analyze_repo("https://alice:s3cr3t-token@127.0.0.1:9/x.git", workdir=tmp_path / "w2")
    assert "s3cr3t" not in str(info.value) and "s3cr3t" not in caplog.text
    assert "https://127.0.0.1:9/x.git" in caplog.text


async def test_a_hanging_clone_is_killed_at_its_timeout(tmp_path: Path) -> None:
    """A git server that never answers (a silent loopback socket) ends in CommandTimeout."""
    held: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        started = time.monotonic()
        with pytest.raises(CommandTimeout, match="git clone"):
            await analyze_repo(f"git://127.0.0.1:{port}/x.git", workdir=tmp_path / "w", clone_timeout=0.5)
        assert time.monotonic() - started < 5
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_missing_path_is_a_config_error(tmp_path: Path) -> None:
    """Neither a directory nor a URL."""
    with pytest.raises(ConfigError, match="not a directory"):
        await analyze_repo(tmp_path / "nope")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://github.com/u/p.git", True),
        ("git@github.com:u/p.git", True),
        ("ssh://git@host:2222/u/p", True),
        ("file:///srv/git/p.git", True),
        ("./p", False),
        ("/srv/p", False),
        ("C:/p", False),
    ],
)
def test_is_git_url(text: str, expected: bool) -> None:
    """URLs and scp-like addresses are cloned; paths are not."""
    assert is_git_url(text) is expected
