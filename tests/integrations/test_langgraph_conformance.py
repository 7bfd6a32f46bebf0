"""LangGraph's own checkpointer conformance suite, in full, on every tether backend."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from tests.stores.conftest import require_url
from tether.integrations.langgraph import TetherSaver


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "redis", "mysql", "tiered"])
async def test_the_langgraph_conformance_suite_passes_in_full(backend: str, tmp_path: Path) -> None:
    """Every capability (base and extended) is detected and every one of its tests passes."""
    url = require_url(backend, tmp_path)
    failures: list[str] = []

    def on_result(capability: str, test: str, passed: bool, error: str | None) -> None:
        if not passed:
            failures.append(f"{capability}/{test}:\n{error}")

    prefix = f"lg{uuid.uuid4().hex[:8]}"  # the suite reuses run ids such as "run-abc"

    @checkpointer_test(name=f"TetherSaver[{backend}]")
    async def factory():  # type: ignore[no-untyped-def]
        async with TetherSaver.from_url(url, prefix=prefix) as saver:
            yield saver

    report = await validate(factory, progress=ProgressCallbacks(on_test_result=on_result))
    assert not failures, "\n\n".join(failures)
    assert set(report.results) == {c.value for c in ALL_CAPABILITIES}
    for name, result in report.results.items():
        assert result.detected, f"{name} not implemented"
        assert result.passed, f"{name}: {result.failures}"
        assert result.tests_passed > 0


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "redis"])
async def test_the_conformance_suite_passes_on_a_saver_opened_for_sync_graphs(
    backend: str, tmp_path: Path
) -> None:
    """``with TetherSaver.from_url(url)`` runs the saver in its callers' threads, with the
    store calls of a step on the backend's blocking twin (its own constructor's synchronous
    variant): the same suite passes on it."""
    url = require_url(backend, tmp_path)
    failures: list[str] = []

    def on_result(capability: str, test: str, passed: bool, error: str | None) -> None:
        if not passed:
            failures.append(f"{capability}/{test}:\n{error}")

    prefix = f"lg{uuid.uuid4().hex[:8]}"

    @checkpointer_test(name=f"TetherSaver[{backend}, sync]")
    async def factory():  # type: ignore[no-untyped-def]
        with TetherSaver.from_url(url, prefix=prefix) as saver:
            assert saver.inline_store is not None and saver.inline_store.twin is not None
            twin = saver.inline_store.twin.backend
            assert type(twin) is type(saver.store.backend)  # the backend's own class
            if backend == "sqlite":
                assert twin.caller_thread  # type: ignore[attr-defined]
            yield saver

    report = await validate(factory, progress=ProgressCallbacks(on_test_result=on_result))
    assert not failures, "\n\n".join(failures)
    for name, result in report.results.items():
        assert result.detected, f"{name} not implemented"
        assert result.passed, f"{name}: {result.failures}"
