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
from collections.abc import Callable

from tether.agent.config import LoopConfig
from tether.context import ContextItem, ContextWindow, Layer, new_item
from tether.context.notes import matches, plan_steps, status_updates
from tether.state import ExecutionContext

__all__ = ["load_window", "new_window", "refresh_plan", "remind"]

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
