"""The Python snippets of docs/langgraph.md run as written and print what their comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "langgraph.md"


def test_the_snippets_of_the_langgraph_page_run_and_print_what_they_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks run in order in one namespace, in an empty directory."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)
    expected = [m.group(1).strip() for b in blocks for m in re.finditer(r"print\(.*\)\s+# (.*)", b)]
    out = io.StringIO()
    namespace: dict[str, object] = {"__name__": "docs_langgraph"}
    with contextlib.redirect_stdout(out):
        for block in blocks:
            exec(compile(block, str(DOC), "exec", dont_inherit=True), namespace)
    assert out.getvalue().splitlines() == expected
