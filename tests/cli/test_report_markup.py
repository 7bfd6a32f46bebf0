"""The closing lines of `tether deploy` / `tether plan` print a run id as written, even one
that looks like console markup."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from tether.cli.agents import _report


@pytest.mark.parametrize(
    ("status", "kwargs"),
    [
        ("COMPLETED", {}),
        ("PAUSED", {"approval": {"command": "rm -rf [red]x", "reason": "outside [b]workdir"}}),
        ("PAUSED", {"question": {"question": "which [i]one", "options": ["[a]", "b"]}}),
        ("PAUSED", {}),
        ("FAILED", {}),
    ],
)
def test_a_run_id_that_looks_like_markup_is_printed_as_written(status: str, kwargs: dict) -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, highlight=False, color_system=None)
    run_id = "deploy-[bold]x[/bold]-1"
    _report(
        console, run_id, status, "done [dim]ok", kwargs.get("question"), None, approval=kwargs.get("approval")
    )
    text = out.getvalue()
    assert f"{status} {run_id}" in text
    assert f"tether resume {run_id}" in text or status in {"COMPLETED", "FAILED"}
    if "approval" in kwargs:
        assert "rm -rf [red]x" in text and "outside [b]workdir" in text
    if "question" in kwargs:
        assert "which [i]one" in text and "[a], b" in text
