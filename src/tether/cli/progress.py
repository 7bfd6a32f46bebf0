"""Rendering runner events: a live table (phases, items, status, retries) or plain lines."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from tether.errors import ConfigError
from tether.runtime import Event, Workflow

__all__ = ["LiveView", "load_workflow"]

_STYLE = {"pending": "dim", "running": "yellow", "done": "green", "failed": "red", "skipped": "magenta"}


def load_workflow(target: str) -> Workflow:
    """``module:attr`` naming a Workflow or a function returning one."""
    module, _, attr = target.partition(":")
    if not module or not attr:
        raise ConfigError(f"workflow must be 'module:attribute', got {target!r}")
    if os.getcwd() not in sys.path:  # a project's own module, as `python -m` would find it
        sys.path.insert(0, os.getcwd())
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load workflow {target!r}: {exc}") from exc
    wf = obj() if callable(obj) and not isinstance(obj, Workflow) else obj
    if not isinstance(wf, Workflow):
        raise ConfigError(f"{target!r} is not a Workflow")
    return wf


class LiveView:
    """Keeps per-step status from events and renders it with rich (or as plain lines)."""

    def __init__(self, workflow: Workflow, console: Any, *, plain: bool = False) -> None:
        self.workflow = workflow
        self.console = console
        self.plain = plain
        self.status = {s.id: "pending" for s in workflow.steps}
        self.attempts = {s.id: 0 for s in workflow.steps}
        self.live: Any = None

    def seed(self, todo: dict[str, dict[str, Any]]) -> None:
        for sid, item in todo.items():
            self.status[sid] = item.get("status", "pending")
            self.attempts[sid] = item.get("attempts", 0)

    def __enter__(self) -> LiveView:
        if not self.plain:
            from rich.live import Live

            self.live = Live(self.render(), console=self.console, refresh_per_second=8, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.update(self.render())
            self.live.__exit__(None, None, None)

    def __call__(self, event: Event) -> None:
        sid = event.step
        if sid is not None and sid not in self.status:
            self.status[sid] = "pending"
            self.attempts[sid] = 0
        if event.kind == "step_started" and sid:
            self.status[sid], self.attempts[sid] = "running", max(1, self.attempts[sid])
        elif event.kind == "step_retry" and sid:
            self.attempts[sid] = int(event.detail.get("attempt", 0)) + 1
        elif event.kind == "step_done" and sid:
            self.status[sid] = "done"
        elif event.kind == "step_failed" and sid:
            self.status[sid] = "failed"
        elif event.kind == "decision" and sid:
            self.status[sid] = "skipped" if event.detail.get("decision") == "skip" else "pending"
        if self.plain:
            extra = " ".join(f"{k}={v}" for k, v in event.detail.items())
            line = f"  {event.kind:<15} {sid or '':<12} {extra}".rstrip()
            self.console.print(line, highlight=False, markup=False)  # user data: never markup
        elif self.live is not None:
            self.live.update(self.render())

    def render(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        table = Table(title=f"{self.workflow.name}", show_lines=False)
        table.add_column("phase")
        table.add_column("step")
        table.add_column("status")
        table.add_column("tries", justify="right")
        for step in self.workflow.steps:
            st = self.status.get(step.id, "pending")
            table.add_row(
                Text(step.phase),
                Text(step.title),
                Text(st, style=_STYLE.get(st, "")),
                str(self.attempts.get(step.id, 0)),
            )
        return table
