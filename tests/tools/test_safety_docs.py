"""Every Python snippet in docs/safety.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "safety.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_page_has_snippets() -> None:
    """The page is found and holds examples."""
    assert len(SNIPPETS) >= 2


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[f"snippet{i}" for i in range(len(SNIPPETS))])
def test_snippet_runs(snippet: str) -> None:
    """The snippet runs and its assertions hold."""
    exec(compile(snippet, str(DOC), "exec"), {})
