"""A pytest plugin for LangGraph's suite (copied as the top-level ``tether_suite_report``):
writes each test's outcome and checkpointer to the JSON file ``TETHER_SUITE_REPORT``."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

_SAVER_FIXTURES = ("sync_checkpointer", "async_checkpointer")
_items: dict[str, dict[str, Any]] = {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        params = dict(getattr(getattr(item, "callspec", None), "params", {}) or {})
        saver = next((str(params.pop(f)) for f in _SAVER_FIXTURES if f in params), None)
        base = item.nodeid.split("[", 1)[0]
        key = base + "[" + ",".join(f"{k}={params[k]!s}" for k in sorted(params)) + "]"
        _items[item.nodeid] = {"saver": saver, "key": key, "outcome": "notrun", "error": ""}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _items.get(report.nodeid)
    if entry is None:
        return
    if report.failed:
        if entry["outcome"] != "failed":
            entry["error"] = f"{report.when}: " + str(report.longrepr)[-1500:]
        entry["outcome"] = "failed"
    elif report.skipped and entry["outcome"] == "notrun":
        entry["outcome"] = "skipped"
    elif report.passed and report.when == "call" and entry["outcome"] == "notrun":
        entry["outcome"] = "passed"


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("TETHER_SUITE_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump(_items, f)
