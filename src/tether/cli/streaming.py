"""The CLI's live view of a reply while the model writes it (``model_delta`` events).

On a terminal the pieces are written as they arrive, dimmed, on one growing line that the
next event closes; piped output stays one line per event (scripts read whole lines), so
the pieces are dropped there: the complete reply is in the run's prompt records
(``tether prompt RUN``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["DeltaPrinter"]

DELTA = "model_delta"


class DeltaPrinter:
    """Call it with every event; it returns True for the events it consumed (the deltas)."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.open = False
        self.live = bool(getattr(console, "is_terminal", False))

    def __call__(self, event: Any) -> bool:
        if event.kind != DELTA:
            self.close()
            return False
        if not self.live:
            return True
        text = str(event.detail.get("text", ""))
        if not self.open:
            self.console.print("  [dim]model:[/] ", end="")
            self.open = True
        self.console.print(text, end="", style="dim", markup=False, highlight=False, soft_wrap=True)
        return True

    def close(self) -> None:
        if self.open:
            self.console.print()
            self.open = False
