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
ResultJsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print the outcome as one JSON object on stdout (progress on stderr); exit codes unchanged.",
    ),
]

STATE: dict[str, Any] = {"debug": False, "env_file": None}

EXIT_ERROR = 1
"""A tether error: bad input, a run not found, a store that cannot be reached."""
EXIT_USAGE = 2
"""A malformed command line (click's usage errors)."""
EXIT_FOR_STATUS = {"COMPLETED": 0, "FAILED": 3, "PAUSED": 4, "CANCELLED": 5, "INTERRUPTED": 6}
"""How ``run`` and ``resume`` end: scripts tell a finished run from one that waits."""
EXIT_MISSING_EXTRA = 7
"""An optional extra is not installed (``pip install 'tether[server]'``)."""
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
        from tether.errors import RunInProgress

        message = str(exc)
        if isinstance(exc, RunInProgress):  # the library's advice, said the command line's way
            message = message.replace("resume with force=True", "run the command again with --force")
        raise fail(message) from None
    except (OSError, ValueError) as exc:  # a missing file, a malformed value
        if STATE["debug"]:
            raise
        raise fail(f"{type(exc).__name__}: {exc} (--debug shows the traceback)") from None


def on_store(store: str | None, fn: Callable[[Any], Awaitable[T]]) -> T:
    """Open the configured store, run ``fn(store)``, close it.

    Every command that comes here reads or changes runs that exist, so a SQLite store whose
    folder does not exist is a mistyped ``--store`` (or nothing has run yet): said in one
    line, and the folder is not created.
    """
    url, options = settings(store)
    missing = missing_sqlite(url)
    if missing is not None:
        raise fail(
            f"no store at {missing}: its folder does not exist (check --store or TETHER_STORE_URL; "
            "`tether run` or `tether demo` creates it)"
        )

    async def go() -> T:
        from tether.stores import open_store

        async with open_store(url, **options) as s:
            return await fn(s)

    return run_async(go)


def missing_sqlite(url: str) -> str | None:
    """The path of a ``sqlite:///`` store whose folder does not exist (a mistyped path, or
    nothing has run here yet), else None."""
    import os

    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != "sqlite":
        return None
    path = rest.partition("?")[0]
    path = path[1:] if path.startswith("/") else path
    if not path or path == ":memory:" or os.path.isdir(os.path.dirname(path) or "."):
        return None
    return path


def settings(store: str | None) -> tuple[str, dict[str, Any]]:
    from tether.settings import load_settings

    try:
        extra: dict[str, Any] = {} if store is None else {"store_url": store}
        loaded = load_settings(_env_file=STATE["env_file"], **extra)
    except TetherError as exc:
        if STATE["debug"]:
            raise
        raise fail(str(exc), EXIT_USAGE) from None  # a bad setting, like a bad flag: exit 2
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


def progress_console() -> Any:
    """Progress lines on stderr, plain: stdout carries only the ``--json`` result."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, width=100_000, soft_wrap=True, force_terminal=False)


def result_json(run_id: str, result: Any) -> dict[str, Any]:
    """What a command that ends or continues a run prints with ``--json``: where the run
    stands, why it waits and the command that continues it (as ``tether status --json``),
    plus the failure report when there is one."""
    from tether.state.reserved import runtime_get

    status = str(result.status)
    report = getattr(result, "report", None)
    return {
        "run_id": run_id,
        "status": status,
        "version": result.version,
        "exit_code": EXIT_FOR_STATUS.get(status, 1),
        "pause_reason": runtime_get(result.state, "pause_reason"),
        "continue_with": continue_hint(run_id, result.state, status),
        "report": report.to_dict() if report is not None else None,
    }


def print_json(data: Any) -> None:
    typer.echo(
        json.dumps(readable(data), indent=2, default=json_default, ensure_ascii=False, allow_nan=False)
    )


def readable(data: Any) -> Any:
    """``data`` with what JSON cannot hold made readable: a float NaN or infinity as the
    strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (bare ``NaN`` is not JSON), bytes as
    their text when it is UTF-8 or ``"<N bytes: hex…>"`` (see ``json_default``)."""
    import math

    if isinstance(data, float) and not math.isfinite(data):
        return "NaN" if math.isnan(data) else ("Infinity" if data > 0 else "-Infinity")
    if isinstance(data, dict):
        return {k: readable(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [readable(v) for v in data]
    if isinstance(data, bytes | bytearray):
        return json_default(bytes(data))
    return data


def json_default(obj: Any) -> Any:
    if isinstance(obj, bytes | bytearray):
        raw = bytes(obj)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None and text.isprintable():
            return f"<{len(raw)} bytes: {text[:200]!r}>"
        shown = raw[:32].hex()
        return f"<{len(raw)} bytes: {shown}{'…' if len(raw) > 32 else ''}>"
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
