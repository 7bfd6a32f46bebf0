"""LangGraph's own graph tests, a quick subset, on TetherSaver beside SqliteSaver.

Two files of the installed langgraph version's test suite (nested subgraph persistence, sync
and async: interrupts, resumes and state two and three levels deep), run with SqliteSaver and
TetherSaver on SQLite in their checkpointer fixtures: every test that passes with SqliteSaver
passes with TetherSaver.
The whole suite, on every backend: ``scripts/langgraph-suite``. The first run downloads the
langgraph sdist (for its tests) into ``~/.cache/tether/langgraph-suite``.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.integrations.langgraph_suite import runner
from tests.stores.conftest import IN_CI


@pytest.mark.slow
def test_langgraphs_own_tests_pass_on_tethersaver_as_on_sqlitesaver() -> None:
    try:
        runner.prepare()
    except subprocess.CalledProcessError as exc:  # no package index reachable
        if IN_CI:
            raise
        pytest.skip(f"could not download LangGraph's tests: {exc}")
    out = runner.run(list(runner.QUICK_FILES), list(runner.QUICK_SAVERS), echo=False)
    assert not out.regressions, runner.summary(out)
    assert out.ran.get("tether_sqlite", 0) >= 30, out.ran  # the fixtures did take TetherSaver
    assert out.ran["tether_sqlite"] == out.ran.get("sqlite", 0) + out.ran.get("sqlite_aio", 0)
