"""What every ``tether`` command shares: the store option, settings, errors as one line,
exit codes, output that scripts can read (``--json``, no markup in user data, full width
when piped), and the command that continues a run."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer

from tether.errors import TetherError

T = TypeVar("T")

StoreOpt = Annotated[
    str | None, typer.Option("--store", help="Store URL (default: TETHER_STORE_URL or SQLite).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]

STATE: dict[str, Any] = {"debug": False, "env_file": None}

EXIT_ERROR = 1
"""A tether error: bad input, a run not found, a store that cannot be reached."""
EXIT_USAGE = 2
"""A malformed command line (click's usage errors)."""
EXIT_FOR_STATUS = {"COMPLETED": 0, "FAILED": 3, "PAUSED": 4, "CANCELLED": 5, "INTERRUPTED": 6}
"""How ``run`` and ``resume`` end: scripts tell a finished run from one that waits."""
EXIT_CTRL_C = 130


def fail(message: str, code: int = EXIT_ERROR) -> typer.Exit:
    """Print ``error: message`` on stderr (never read as markup); the Exit to raise."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(code)


def run_async(coro_fn: Callable[[], Awaitable[T]]) -> T:
    """Run the command's coroutine; a user's mistake ends as one ``error:`` line (the
    traceback only with ``--debug``)."""
    try:
        return asyncio.run(coro_fn())  # type: ignore[arg-type]
    except TetherError as exc:
        if STATE["debug"]:
            raise
        raise fail(str(exc)) from None
    except (OSError, ValueError) as exc:  # a missing file, a malformed value
        if STATE["debug"]:
            raise
        raise fail(f"{type(exc).__name__}: {exc} (--debug shows the traceback)") from None


def on_store(store: str | None, fn: Callable[[Any], Awaitable[T]]) -> T:
    """Open the configured store, run ``fn(store)``, close it."""
    url, options = settings(store)

    async def go() -> T:
        from tether.stores import open_store

        async with open_store(url, **options) as s:
            return await fn(s)

    return run_async(go)


def settings(store: str | None) -> tuple[str, dict[str, Any]]:
    from tether.settings import load_settings

    try:
        extra: dict[str, Any] = {} if store is None else {"store_url": store}
        loaded = load_settings(_env_file=STATE["env_file"], **extra)
    except TetherError as exc:
        if STATE["debug"]:
            raise
        raise fail(str(exc)) from None
    declare_secrets(loaded)
    return loaded.store_url, loaded.store_options()


def declare_secrets(loaded: Any) -> None:
    """Settings read from ``--env-file`` hold secrets the environment did not: redact them too."""
    from tether.tools.redact import _url_passwords, default_redactor

    redactor = default_redactor()
    key = getattr(loaded, "encryption_key", None)
    if key is not None:
        value = key.get_secret_value()
        redactor.add(value, *value.split(","))
    redactor.add(*_url_passwords(str(getattr(loaded, "store_url", "") or "")))


def console() -> Any:
    """A console for tables and progress: on a terminal its width; piped, wide enough that
    nothing is cut or wrapped (scripts read whole lines)."""
    from rich.console import Console

    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(highlight=False, width=100_000, soft_wrap=True)


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=json_default, ensure_ascii=False))


def json_default(obj: Any) -> Any:
    if isinstance(obj, bytes):
        return {"$bytes": len(obj)}
    return str(obj)


def status_word(status: Any) -> str:
    return str(status)


def continue_hint(run_id: str, state: dict[str, Any], status: str) -> str | None:
    """The command that continues a run in ``status``, or None when there is none.

    A run records what started it (``_origin``), so its id is enough; an older run needs
    its workflow named."""
    from tether.state.reserved import runtime_get

    origin = state.get("_origin")
    base = f"tether resume {run_id}" if isinstance(origin, dict) else f"tether resume WORKFLOW {run_id}"
    if status == "INTERRUPTED":
        return base
    if status != "PAUSED":
        return None
    if state.get("pending_approval"):
        return f"tether approve {run_id} [--deny], then {base}"
    pending = runtime_get(state, "pending_decision")
    if isinstance(pending, dict) and pending.get("options"):
        return f"{base} --decision {'|'.join(pending['options'])}"
    if state.get("pending_question"):
        return f"{base} --answer ANSWER"
    return base
