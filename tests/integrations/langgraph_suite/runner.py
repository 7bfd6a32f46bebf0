"""LangGraph's own graph test suite, run on TetherSaver beside LangGraph's own savers.

The tests ship in the sdist of the installed langgraph version (not in its wheel). The
runner downloads that sdist once into a cache directory (``pip download``), with the
three test-only packages the suite imports and this venv lacks (pytest-mock, syrupy,
pycryptodome: unpacked beside it and put on ``PYTHONPATH``, never installed), copies the
tests into a run directory, makes LangGraph's ``conftest.py`` take its checkpointer
fixtures from ``fixtures.py`` (InMemorySaver, SqliteSaver and TetherSaver on SQLite,
PostgreSQL and Redis, sync and async), runs every test file that uses a checkpointer
in a child pytest, and compares: a test that passes with SqliteSaver must pass with
each TetherSaver variant (same test, same other parameters). Tests known to be flaky on
LangGraph's own savers are listed in ``FLAKY`` with the rate measured, and a failure of
one of them is reported, not counted.

    scripts/langgraph-suite                       # every file, every saver
    scripts/langgraph-suite --quick               # the quick subset the pytest suite runs

On a busy 2-core host, every file with SqliteSaver and TetherSaver over SQLite (about
1,300 tests) took 16 minutes; PostgreSQL and Redis add about as much each.
    scripts/langgraph-suite -k interrupt --savers sqlite,tether_sqlite
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections import defaultdict
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]

SAVER_FIXTURES = ("sync_checkpointer", "async_checkpointer")
REFERENCE = {"sync": "sqlite", "async": "sqlite_aio"}
"""The LangGraph saver each TetherSaver variant is held to, in sync and async tests."""
TETHER = ("tether_sqlite", "tether_postgres", "tether_redis")
TEST_PACKAGES = {"pytest_mock": "pytest-mock", "syrupy": "syrupy", "Crypto": "pycryptodome"}

QUICK_FILES = ("test_subgraph_persistence.py", "test_subgraph_persistence_async.py")
QUICK_SAVERS = ("sqlite", "sqlite_aio", "tether_sqlite")
"""The subset the normal test run takes: nested subgraph persistence (interrupts, resumes and
state of subgraphs two and three levels deep, whose keys are the longest), sync and async,
on SqliteSaver and TetherSaver over SQLite (68 tests; about 6 s of CPU)."""

FLAKY: dict[str, str] = {
    "tests/test_pregel_async.py::test_imp_nested": (
        "asserts the stream order of two concurrent tasks, of which the second starts 10 ms "
        "after the first: any event-loop time a saver spends in that window reorders the "
        "events (InMemorySaver with 3 ms of blocking work in aput_writes fails it the same "
        "way, 'submapper 1' before 'mapper 00'; no event is lost or repeated). Failed runs on a "
        "busy 2-core host (load 20, 8 rounds x 3 durabilities, langgraph 1.2.24): InMemorySaver "
        "8 of 24, AsyncSqliteSaver 1 of 24, TetherSaver sqlite 3 of 24, postgres 8 of 24, "
        "redis 4 of 24; earlier, quieter: InMemorySaver 2 of 15, AsyncSqliteSaver 1 of 15, "
        "TetherSaver sqlite 8 of 15"
    ),
}
"""Tests (node id without parameters) that fail now and then on LangGraph's own savers,
with the rate measured (``--files ... -k NAME --savers memory,sqlite_aio,...`` repeated)."""


@dataclass
class Outcome:
    """What one run found."""

    ran: dict[str, int] = field(default_factory=dict)
    """Tests run per saver."""
    failed: dict[str, int] = field(default_factory=dict)
    regressions: list[str] = field(default_factory=list)
    """``saver: test`` failing with TetherSaver and passing with its reference."""
    flaky: list[str] = field(default_factory=list)
    """Regressions of tests in ``FLAKY``: reported, not counted."""
    errors: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tether" / "langgraph-suite"


def _pip(*args: str, dest: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--disable-pip-version-check",
            "-q",
            "--no-deps",
            "-d",
            str(dest),
            *args,
        ],
        check=True,
    )


def prepare(cache: Path | None = None) -> tuple[Path, Path]:
    """The installed langgraph version's ``tests`` directory and a directory of the test-only
    packages, downloaded once into ``cache``."""
    version = metadata.version("langgraph")
    cache = (cache or cache_dir()) / version
    tests = cache / "tests"
    site = cache / "site"
    if not (tests / "conftest.py").exists():
        cache.mkdir(parents=True, exist_ok=True)
        _pip(f"langgraph=={version}", "--no-binary", ":all:", dest=cache)
        (sdist,) = cache.glob(f"langgraph-{version}.tar.gz")
        with tarfile.open(sdist) as tar, tempfile.TemporaryDirectory(dir=cache) as tmp:
            members = [m for m in tar.getmembers() if m.name.startswith(f"langgraph-{version}/tests/")]
            tar.extractall(tmp, members=members, filter="data")
            shutil.move(str(Path(tmp) / f"langgraph-{version}" / "tests"), tests)
    missing = [pkg for mod, pkg in TEST_PACKAGES.items() if not _importable(mod, site)]
    if missing:
        wheels = cache / "wheels"
        wheels.mkdir(parents=True, exist_ok=True)
        _pip(*missing, "--only-binary", ":all:", dest=wheels)
        for wheel in wheels.glob("*.whl"):
            with zipfile.ZipFile(wheel) as z:
                z.extractall(site)
    return tests, site


def _importable(module: str, site: Path) -> bool:
    if (site / module).exists():
        return True
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def checkpointer_files(tests: Path) -> list[str]:
    """Every test file that takes a checkpointer fixture."""
    pattern = re.compile(r"\b(sync_checkpointer|async_checkpointer)\b")
    return sorted(p.name for p in tests.glob("test_*.py") if pattern.search(p.read_text()))


def run(
    files: list[str] | None = None,
    savers: list[str] | None = None,
    *,
    keyword: str | None = None,
    cache: Path | None = None,
    timeout: int = 120,
    echo: bool = True,
) -> Outcome:
    """Run LangGraph's tests on the chosen savers (parameter names of ``fixtures.py``;
    every one by default) and compare each TetherSaver variant with its reference."""
    tests, site = prepare(cache)
    files = files or checkpointer_files(tests)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lgsuite-") as d:
        work = Path(d)
        shutil.copytree(tests, work / "tests")
        shutil.copy(HERE / "fixtures.py", work / "tether_suite_fixtures.py")
        shutil.copy(HERE / "report.py", work / "tether_suite_report.py")
        with open(work / "tests" / "conftest.py", "a") as f:
            f.write("\nfrom tether_suite_fixtures import async_checkpointer, sync_checkpointer  # noqa\n")
        (work / "pytest.ini").write_text("[pytest]\nasyncio_mode = strict\n")
        report = work / "report.json"
        env = {
            **os.environ,
            "NO_DOCKER": "true",  # LangGraph's PostgreSQL savers want a server of their own
            "TETHER_SUITE_REPORT": str(report),
            "TETHER_SUITE_SAVERS": ",".join(savers or []),
            "PYTHONPATH": os.pathsep.join([str(work), str(ROOT / "src"), str(site)]),
        }
        env.setdefault("TETHER_TEST_POSTGRESQL_URL", "postgresql://127.0.0.1:5432/test")
        env.setdefault("TETHER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            *(f"tests/{f}" for f in files),
            "-p",
            "tether_suite_report",
            "-p",
            "no:cacheprovider",
            # this venv's plugins that LangGraph's tests never use: about 3 s of imports each run
            *("-p", "no:schemathesis", "-p", "no:langsmith_plugin", "-p", "no:hypothesispytest"),
            *("-p", "no:xdist", "-p", "no:xdist.looponfail"),
            "-q",
            "--no-header",
            "-o",
            "console_output_style=classic",
            f"--timeout={timeout}",
            "-W",
            "ignore",
            "-c",
            str(work / "pytest.ini"),
            "--rootdir",
            str(work),
        ]
        if keyword:
            cmd += ["-k", keyword]
        subprocess.run(cmd, cwd=work, env=env, check=False, stdout=None if echo else subprocess.DEVNULL)
        if not report.exists():
            raise RuntimeError("LangGraph's suite did not run (no report); see its output above")
        items = json.loads(report.read_text())
    outcome = compare(items)
    outcome.seconds = time.monotonic() - t0
    return outcome


def compare(items: dict[str, dict[str, Any]]) -> Outcome:
    """Each TetherSaver result against its reference's, for the same test and parameters."""
    out = Outcome()
    by_key: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for nodeid, item in items.items():
        saver = item["saver"]
        if saver is None:
            continue
        out.ran[saver] = out.ran.get(saver, 0) + (item["outcome"] != "notrun")
        if item["outcome"] == "failed":
            out.failed[saver] = out.failed.get(saver, 0) + 1
        by_key[item["key"]][saver] = {**item, "nodeid": nodeid}
    for key, runs in sorted(by_key.items()):
        mode = "async" if "sqlite_aio" in runs else "sync"
        ref = runs.get(REFERENCE[mode])
        if ref is None or ref["outcome"] != "passed":
            continue
        for saver in TETHER:
            got = runs.get(saver)
            if got is None or got["outcome"] != "failed":
                continue
            line = f"{saver}: {got['nodeid']}"
            if key.split("[", 1)[0] in FLAKY:
                out.flaky.append(line)
            else:
                out.regressions.append(line)
                out.errors[line] = got["error"]
    return out


def summary(out: Outcome) -> str:
    lines = [f"LangGraph's suite in {out.seconds:.0f} s; tests run (failed) per saver:"]
    for saver in sorted(out.ran):
        lines.append(f"  {saver:16} {out.ran[saver]:5} ({out.failed.get(saver, 0)} failed)")
    for line in out.flaky:
        lines.append(
            f"  known flaky, failed with TetherSaver: {line} ({FLAKY[line.split(': ', 1)[1].split('[', 1)[0]]})"
        )
    lines.append(
        f"{len(out.regressions)} tests fail with TetherSaver and pass with SqliteSaver"
        + (":" if out.regressions else "")
    )
    for line in out.regressions:
        lines.append(
            f"  {line}\n      {out.errors[line].strip().splitlines()[-1][:300] if out.errors[line] else ''}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the subset the pytest suite runs")
    ap.add_argument(
        "--files", default="", help="comma-separated test files (default: all with a checkpointer)"
    )
    ap.add_argument(
        "--savers",
        default="",
        help="comma-separated: " + ", ".join(("memory", "sqlite", "sqlite_aio", *TETHER)),
    )
    ap.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per test")
    ap.add_argument("--json", default=None, help="write the outcome here as JSON")
    args = ap.parse_args(argv)
    files = [f.strip() for f in args.files.split(",") if f.strip()] or (
        list(QUICK_FILES) if args.quick else None
    )
    savers = [s.strip() for s in args.savers.split(",") if s.strip()] or (
        list(QUICK_SAVERS) if args.quick else None
    )
    out = run(files, savers, keyword=args.keyword, timeout=args.timeout)
    print(summary(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out.__dict__, indent=1))
    return 1 if out.regressions else 0
