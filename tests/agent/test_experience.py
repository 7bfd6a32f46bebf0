from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from tether.agent.experience import (
    Experience,
    ExperienceRetriever,
    ExperienceStore,
    lessons_from_run,
    normalize_error,
)
from tether.errors import ConfigError

ERESOLVE = Experience(
    project_type="nodejs",
    framework="Next.js",
    error_signature="npm ERR! ERESOLVE unable to resolve dependency tree",
    resolution="install with legacy peer deps",
    commands=["npm install --legacy-peer-deps"],
)
PORT_IN_USE = Experience(
    project_type="nodejs",
    framework="Express",
    error_signature="Error: listen EADDRINUSE: address already in use :::<n>",
    resolution="free the port",
    commands=["fuser -k 3000/tcp", "npm start"],
)
DOCKER_PERM = Experience(
    project_type="python",
    framework="FastAPI",
    error_signature="permission denied while trying to connect to the Docker daemon socket",
    resolution="add the user to the docker group",
    commands=["sudo usermod -aG docker $USER", "newgrp docker"],
)
PIP_FAIL = Experience(
    project_type="python",
    framework="Django",
    error_signature="error: externally-managed-environment",
    resolution="use a virtualenv",
    commands=["python3 -m venv .venv", ".venv/bin/pip install -r requirements.txt"],
)


@pytest.fixture(params=[True, False], ids=["fts5", "like"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ExperienceStore]:
    async with ExperienceStore(tmp_path / "exp" / "lessons.db", fts=request.param) as s:
        yield s


async def test_add_then_search_ranks_the_matching_error_first(store: ExperienceStore) -> None:
    """The lesson whose error signature matches the query comes first."""
    for exp in (ERESOLVE, PORT_IN_USE, DOCKER_PERM, PIP_FAIL):
        assert await store.add(exp)
    found = await store.search("EADDRINUSE address already in use")
    assert found[0].id == PORT_IN_USE.id
    assert found[0] == PORT_IN_USE  # round trip, commands and tags included
    found = await store.search("docker permission denied socket")
    assert found[0].id == DOCKER_PERM.id


async def test_search_filters_by_project_type_and_limits(store: ExperienceStore) -> None:
    """project_type narrows the results; limit caps them; nothing matching gives []."""
    for exp in (ERESOLVE, PORT_IN_USE, DOCKER_PERM, PIP_FAIL):
        await store.add(exp)
    found = await store.search("error denied", project_type="python")
    assert {e.id for e in found} == {DOCKER_PERM.id, PIP_FAIL.id}
    assert len(await store.search("error npm docker", limit=2)) == 2
    assert await store.search("kubernetes helm") == []
    assert await store.search("npm", limit=0) == []


async def test_framework_weighs_more_than_commands(store: ExperienceStore) -> None:
    """A query naming the framework prefers that framework's lesson."""
    await store.add(PORT_IN_USE)
    await store.add(ERESOLVE)
    found = await store.search("Next.js npm")
    assert found[0].id == ERESOLVE.id


async def test_empty_query_returns_most_seen_then_newest(store: ExperienceStore) -> None:
    """Without words to match, the most reinforced lesson comes first."""
    await store.add(ERESOLVE)
    await store.add(PORT_IN_USE)
    await store.add(replace(ERESOLVE, id="other", run_id="r2"))  # seen twice
    found = await store.search("  ", project_type="nodejs")
    assert [e.id for e in found] == [ERESOLVE.id, PORT_IN_USE.id]


async def test_identical_lessons_are_stored_once(store: ExperienceStore) -> None:
    """Same content from another run (new id, run and date) is a duplicate."""
    assert await store.add(ERESOLVE)
    again = replace(ERESOLVE, id="x", run_id="run-2", created_at="2030-01-01")
    assert not await store.add(again)
    assert await store.count() == 1
    assert await store.add_many([PORT_IN_USE, ERESOLVE, DOCKER_PERM]) == 2
    assert await store.count() == 3


async def test_redactor_runs_before_anything_is_stored(tmp_path: Path) -> None:
    """A secret in any text field never reaches the database file."""

    def redact(text: str) -> str:
        return re.sub(r"ghp_\w+", "[REDACTED]", text)

    leaky = Experience(
        project_type="nodejs",
        error_signature="auth failed for token ghp_abc123SECRET",
        resolution="export GH_TOKEN=ghp_abc123SECRET",
        commands=["npm config set //npm.pkg.github.com/:_authToken ghp_abc123SECRET"],
        tags=["ghp_abc123SECRET"],
    )
    path = tmp_path / "lessons.db"
    async with ExperienceStore(path, redactor=redact) as store:
        await store.add(leaky)
        [found] = await store.search("auth failed token")
    assert "ghp_abc123SECRET" not in repr(found)
    assert "[REDACTED]" in found.resolution
    assert b"abc123SECRET" not in path.read_bytes()
    for extra in tmp_path.iterdir():  # journal files too
        assert b"abc123SECRET" not in extra.read_bytes()


async def test_store_is_durable_and_setup_idempotent(tmp_path: Path) -> None:
    """Lessons survive reopening; setup() may be called repeatedly."""
    path = tmp_path / "lessons.db"
    async with ExperienceStore(path) as store:
        await store.setup()
        await store.add(ERESOLVE)
    async with ExperienceStore(path) as store:
        assert await store.count() == 1
        assert (await store.search("ERESOLVE"))[0].id == ERESOLVE.id


async def test_fts5_is_used_when_available(tmp_path: Path) -> None:
    """This Python's SQLite has FTS5, so auto mode picks it."""
    sqlite3.connect(":memory:").execute("CREATE VIRTUAL TABLE t USING fts5(a)")  # would raise without FTS5
    async with ExperienceStore(tmp_path / "a.db") as store:
        assert store.fts is True


async def test_missing_fts5_falls_back_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An SQLite without FTS5 (simulated with an unknown module name) logs a warning and uses LIKE."""
    monkeypatch.setattr("tether.agent.experience._FTS", "CREATE VIRTUAL TABLE x USING no_such_module(a)")
    caplog.set_level(logging.WARNING)
    async with ExperienceStore(tmp_path / "a.db") as store:
        await store.add(ERESOLVE)
        assert store.fts is False
        assert (await store.search("ERESOLVE dependency"))[0].id == ERESOLVE.id
    assert "falls back to LIKE" in caplog.text
    with pytest.raises(ConfigError, match="no FTS5"):
        async with ExperienceStore(tmp_path / "b.db", fts=True):
            pass


async def test_like_search_escapes_wildcards(tmp_path: Path) -> None:
    """Underscores and percent signs in queries are literal in the LIKE fallback."""
    async with ExperienceStore(tmp_path / "a.db", fts=False) as store:
        await store.add(ERESOLVE)
        assert await store.search("npm_err") == []


def test_experience_rejects_unknown_outcome() -> None:
    """Only success and failure."""
    with pytest.raises(ConfigError, match="outcome"):
        Experience(project_type="go", outcome="maybe")  # type: ignore[arg-type]


# --- retriever --------------------------------------------------------------------------


async def test_retrieve_prefers_the_project_then_widens_for_errors(tmp_path: Path) -> None:
    """Own project type first; with an error, other project types fill the remaining slots."""
    async with ExperienceStore(tmp_path / "a.db") as store:
        for exp in (ERESOLVE, PORT_IN_USE, DOCKER_PERM, PIP_FAIL):
            await store.add(exp)
        retriever = ExperienceRetriever(store, limit=2)
        found = await retriever.retrieve(
            "nodejs",
            "Next.js",
            error_text="Got permission denied while trying to connect to the Docker daemon socket at "
            "unix:///var/run/docker.sock",
        )
        assert [e.id for e in found] == [ERESOLVE.id, DOCKER_PERM.id]
        no_error = await retriever.retrieve("python", "FastAPI")
        assert no_error[0].id == DOCKER_PERM.id and len(no_error) == 2
        assert await ExperienceRetriever(store, limit=0).retrieve("python") == []


def test_render_exact_block() -> None:
    """One concise bullet per lesson under '## Past experience'."""
    failed = Experience(project_type="go", resolution="run failed after 12 commands", outcome="failure")
    worked = Experience(project_type="go", framework="Gin", commands=["go build ./...", "./app"])
    text = ExperienceRetriever.__new__(ExperienceRetriever)
    text.max_chars, text.max_item_chars = 1_000, 360
    assert text.render([ERESOLVE, worked, failed]) == (
        "## Past experience\n"
        "- [nodejs/Next.js] error `npm ERR! ERESOLVE unable to resolve dependency tree`: "
        "fixed by `npm install --legacy-peer-deps`\n"
        "- [go/Gin] worked: `go build ./...` && `./app`\n"
        "- [go] failed: run failed after 12 commands"
    )
    assert text.render([]) == ""


async def test_render_is_bounded(tmp_path: Path) -> None:
    """Whatever the lessons, the block stays within max_chars and each bullet within max_item_chars."""
    async with ExperienceStore(tmp_path / "a.db") as store:
        retriever = ExperienceRetriever(store, max_chars=300, max_item_chars=120)
        huge = [
            Experience(project_type="nodejs", error_signature="E" * 1_000, commands=[f"cmd {i}" * 50])
            for i in range(20)
        ]
        block = retriever.render(huge)
        assert block.startswith("## Past experience\n- ")
        assert len(block) <= 300
        assert all(len(line) <= 120 for line in block.splitlines())
        assert ExperienceRetriever(store, max_chars=10).render(huge) == ""
    with pytest.raises(ConfigError):
        ExperienceRetriever(store, limit=-1)


# --- lessons from a run -----------------------------------------------------------------


def test_normalize_error_masks_variable_parts() -> None:
    """Paths, numbers, hex ids, urls and times vanish; the same failure gets one signature."""
    a = normalize_error(
        "npm WARN old lockfile\nnpm ERR! code ERESOLVE\nnpm ERR! ERESOLVE unable to resolve dependency "
        "tree at /home/alice/app/node_modules"
    )
    b = normalize_error("npm ERR! ERESOLVE unable to resolve dependency tree at /srv/www/shop/node_modules")
    assert a == b == "npm ERR! ERESOLVE unable to resolve dependency tree at <path>"
    assert normalize_error("container 3f4e5a6b7c8d exited at 2024-01-02T10:00:00Z code 137") == (
        "container <hex> exited at <time> code <n>"
    )
    assert normalize_error("\x1b[31mError\x1b[0m: connect ECONNREFUSED 127.0.0.1:5432") == (
        "Error: connect ECONNREFUSED <ip>"
    )
    assert normalize_error("just output\nlast line") == "last line"
    assert normalize_error("   \n") == ""
    assert len(normalize_error("error " + "x" * 500)) == 200


def test_lessons_from_run_finds_fixes_and_the_outcome() -> None:
    """A failure fixed by a later retry of the same command becomes a lesson; plus one outcome."""
    history = [
        {"command": "ls -la", "success": True, "exit_code": 0, "stdout": "package.json"},
        {
            "command": "npm install",
            "success": False,
            "exit_code": 1,
            "stderr": "npm ERR! code ERESOLVE\nnpm ERR! ERESOLVE unable to resolve dependency tree",
        },
        {"command": "cat package.json", "success": True, "exit_code": 0, "stdout": "{}"},
        {"command": "npm cache clean --force", "success": True, "exit_code": 0},
        {"command": "npm install --legacy-peer-deps", "success": True, "exit_code": 0},
        {
            "command": "npm run build",
            "success": False,
            "exit_code": 1,
            "stderr": "Type error in /app/x.ts:12",
        },
        {"command": "npm run build", "success": True, "exit_code": 0},
        {"command": "pm2 start npm -- start", "exit_code": 0},
    ]
    lessons = lessons_from_run(
        history, project_type="nodejs", framework="Next.js", outcome="success", run_id="r1"
    )
    fix1, fix2, outcome = lessons
    assert fix1.error_signature == "npm ERR! ERESOLVE unable to resolve dependency tree"
    assert fix1.commands == ("npm cache clean --force", "npm install --legacy-peer-deps")
    assert fix1.tags == ("fix",) and fix1.outcome == "success" and fix1.run_id == "r1"
    assert fix2.error_signature == "Type error in <path>:<n>"
    assert fix2.commands == ("npm run build",)
    assert outcome.tags == ("outcome",) and outcome.error_signature == ""
    assert outcome.commands == (
        "npm cache clean --force",
        "npm install --legacy-peer-deps",
        "npm run build",
        "pm2 start npm -- start",
    )
    assert outcome.resolution == "deployed in 8 commands"


def test_lessons_from_a_failed_run_record_the_unresolved_error() -> None:
    """Without a fix, no fix lesson; the outcome carries the first unresolved error."""
    history = [
        {"command": "sudo docker compose up -d", "success": False, "stderr": "no space left on device"},
        {"command": "df -h", "success": True},
        {"command": "sudo docker compose up -d", "success": False, "stderr": "no space left on device"},
    ]
    [outcome] = lessons_from_run(history, project_type="docker", outcome="failure", tags=["compose"])
    assert outcome.outcome == "failure"
    assert outcome.error_signature == "no space left on device"
    assert outcome.tags == ("outcome", "compose")
    assert outcome.commands == ()
    assert lessons_from_run([], project_type="go", outcome="failure")[0].error_signature == ""


async def test_lessons_are_deduplicated_across_runs(tmp_path: Path) -> None:
    """The same fix learnt in two runs is one stored lesson."""
    history = [
        {
            "command": "pip install -r requirements.txt",
            "success": False,
            "stderr": "error: externally-managed",
        },
        {"command": "pip install --user -r requirements.txt", "success": True},
    ]
    async with ExperienceStore(tmp_path / "a.db") as store:
        for run in ("r1", "r2"):
            for lesson in lessons_from_run(history, project_type="python", outcome="success", run_id=run):
                await store.add(lesson)
        assert await store.count() == 2  # one fix, one outcome
