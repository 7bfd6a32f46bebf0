"""The agent's context window: built from the goal, read back from a run's state, and its
plan and instant layers refreshed before each model call.

The layers hold what the design gives each one: the session layer the goal and the TODO
list with each item's state (a ``- [ ]`` or numbered plan in the goal becomes the list),
the working layer the current TODO item, the instant layer the checkpoint the run last
saved (version, last step, time), the iteration reminder and the last error.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tether.agent.config import LoopConfig
from tether.context import ContextItem, ContextWindow, Layer, new_item
from tether.context.notes import matches, plan_steps, status_updates
from tether.state import ExecutionContext

__all__ = ["KeptWindows", "load_window", "new_window", "refresh_plan", "remind"]

_MARK = {"pending": " ", "done": "x", "in_progress": "~", "skipped": "-"}


def new_window(config: LoopConfig, goal: str, redact: Callable[[str], str]) -> ContextWindow:
    """A run's first window: the system prompt and the goal (pinned), its plan as TODO
    items, then the session blocks."""
    window = ContextWindow(config.model_name, budget=config.budget)
    window.start_journal()
    window.add(new_item("system", config.system_prompt, id="system", pinned=True))
    window.add(new_item("goal", goal, id="goal", pinned=True))  # the item labels itself "Goal:"
    for k, step in enumerate(plan_steps(goal), 1):
        window.add(_todo(k, step.text, step.status))
    for name, text in config.blocks.items():
        if text.strip():
            window.add(new_item("state", redact(text), id=f"block-{name}", layer=Layer.SESSION))
    refresh_plan(window)
    return window


def _todo(k: int, text: str, status: str) -> ContextItem:
    return new_item(
        "todo", f"#{k} [{_MARK.get(status, ' ')}] {text}", id=f"todo-{k}", phase=str(k),
        metadata={"status": status, "text": text, "number": k},
    )  # fmt: skip


def load_window(ctx: ExecutionContext) -> ContextWindow:
    """The run's window as its state holds it, journalling what this iteration changes."""
    if ctx.get("context_meta") is not None:
        window = ContextWindow.from_log(ctx.get("context_meta"), ctx.get("context_log") or [])
    else:  # a run started before the window was stored as a log
        window = ContextWindow.from_state(ctx.get("context_window"))
    window.start_journal()
    return window


@dataclass(frozen=True, slots=True)
class _Kept:
    """A window and the ``context_meta`` and ``context_log`` a state holding it has."""

    window: ContextWindow
    meta: dict[str, Any]
    length: int
    last: object
    """The log's last entry (None: an empty log)."""

    def held_by(self, meta: object, log: object) -> bool:
        """Whether a state with this meta and log holds this window: its step was committed
        and nothing (another process, an edit through the server) changed the log since."""
        if not isinstance(log, list) or len(log) != self.length or meta != self.meta:
            return False
        return (log[-1] if log else None) == self.last


class KeptWindows:
    """Each run's window as its last step left it, for its next step.

    Rebuilding a window replays the run's whole log, a cost that grows with every
    iteration; a step whose state still holds exactly the window kept (same meta, same log
    length and last entry) reuses it. Anything else (a step that failed or was not
    committed, another process, an edit of the stored window) rebuilds it from the state.
    """

    def __init__(self, size: int = 16) -> None:
        self.size = size
        """Runs kept (the least recently used go first)."""
        self._kept: OrderedDict[str, _Kept] = OrderedDict()

    def load(self, run_id: str, ctx: ExecutionContext) -> ContextWindow:
        """The run's window (see :func:`load_window`). Taken out of the cache: a step that
        fails midway may have changed it, and its state is not committed."""
        kept = self._kept.pop(run_id, None)
        if kept is not None and kept.held_by(ctx.get("context_meta"), ctx.get("context_log")):
            return kept.window
        return load_window(ctx)

    def keep(self, run_id: str, window: ContextWindow, update: dict[str, object], log: object) -> None:
        """Put the window's changes in ``update`` (the state's log was ``log``) and keep it."""
        meta, journal = window.meta_state(), window.take_journal()
        update.update(context_meta=meta, context_log=journal)
        before = log if isinstance(log, list) else []
        last = journal[-1] if journal else (before[-1] if before else None)
        # its own copy of the meta: the one in the update goes into the state, where it may change
        self._kept[run_id] = _Kept(window, window.meta_state(), len(before) + len(journal), last)
        self._kept.move_to_end(run_id)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)


def _reasoning(window: ContextWindow) -> str:
    """What the agent said with its last action (its ``reasoning`` or ``message``)."""
    call = next((i for i in reversed(window.items(Layer.WORKING)) if i.kind == "tool_call"), None)
    if call is None:
        return ""
    try:
        action = json.loads(call.content)
    except ValueError:
        return call.content
    if not isinstance(action, dict):
        return ""
    return "\n".join(str(action.get(k) or "") for k in ("reasoning", "message"))


def refresh_plan(window: ContextWindow) -> None:
    """Tick off the TODO items the agent's last action reports done ("Done: <item>",
    "step 2 done", ``- [x] item``), then show the first open one as the current TODO item
    (working layer) and make its number the window's phase."""
    todos = [i for i in window.items(Layer.SESSION) if i.kind == "todo" and "number" in i.metadata]
    if not todos:
        return
    for update in status_updates(_reasoning(window)):
        for todo in todos:
            hit = (update.number is not None and todo.metadata.get("number") == update.number) or (
                bool(update.text) and matches(str(todo.metadata.get("text", "")), update.text)
            )
            if hit and todo.metadata.get("status") != update.status:
                window.replace(_todo(int(todo.metadata["number"]), str(todo.metadata["text"]), update.status))
    todos = [i for i in window.items(Layer.SESSION) if i.kind == "todo" and "number" in i.metadata]
    current = next((t for t in todos if t.metadata.get("status") not in ("done", "skipped")), None)
    if current is None:
        if window.get("todo-current") is not None:
            window.remove("todo-current")
        window.phase = None
        return
    number = int(current.metadata["number"])
    text = f"#{number} of {len(todos)}: {current.metadata['text']}"
    meta = {"current": True, "status": "in_progress", "number": number}
    window.upsert(
        new_item("todo", text, id="todo-current", layer=Layer.WORKING, phase=str(number), metadata=meta)
    )
    window.phase = str(number)


def remind(
    window: ContextWindow, n: int, max_iterations: int, error: str | None, saved_at: float | None = None
) -> None:
    """Refresh the plan and the instant layer: where the loop stands, the checkpoint the
    run last saved (``saved_at``: when its iteration ended, epoch seconds; a resumed run
    then sends the very prompt it sent before its crash), and the last error if any."""
    refresh_plan(window)
    reminder = f"Iteration {n} of {max_iterations} ({max_iterations - n} left)."
    window.upsert(new_item("reminder", reminder, id="instant-iteration"))
    if n > 1:
        window.upsert(new_item("checkpoint", _checkpoint(window, n - 1, saved_at), id="instant-checkpoint"))
    if error:
        window.upsert(new_item("error", f"Last error: {error}", id="instant-error"))
    elif window.get("instant-error") is not None:
        window.remove("instant-error")


def _checkpoint(window: ContextWindow, saved: int, saved_at: float | None) -> str:
    """``version 12 saved after iteration 12; last step: `cmd` → exit 0; at 10:42 UTC``."""
    last = ""
    for item in reversed(window.items(Layer.WORKING)):
        if item.kind == "tool_call":
            try:
                action = json.loads(item.content)
            except ValueError:
                action = {}
            what = action.get("command") or action.get("question") or action.get("action") or ""
            last = str(what)[:120]
            break
    result = next((i for i in reversed(window.items(Layer.WORKING)) if i.kind == "tool_result"), None)
    status = result.content.split("\n", 1)[0][:40] if result is not None else ""
    when = dt.datetime.now(dt.UTC) if saved_at is None else dt.datetime.fromtimestamp(saved_at, dt.UTC)
    at = when.strftime("%H:%M UTC")
    step = f"; last step: `{last}`" + (f" → {status}" if status else "") if last else ""
    return f"version {saved} saved after iteration {saved}{step}; at {at}"
