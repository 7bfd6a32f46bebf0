"""``tether runs|show|history|status|pause|cancel|update|rollback|diff|copy|prune|delete|purge``:
inspecting and operating stored runs, for people (tables) and scripts (``--json``).

A PAUSED or CANCELLED status set here on a live run is seen by its runner at its next
step boundary: the step in progress is checkpointed, then the run stops, and the runner
never overwrites the status.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tether.cli._common import (
    JsonOpt,
    StoreOpt,
    console,
    continue_hint,
    fail,
    on_store,
    print_json,
)
from tether.errors import ConfigError, RunNotFound

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    for fn in (
        runs,
        show,
        history,
        status,
        pause,
        cancel,
        update,
        rollback,
        diff,
        prune,
        copy,
        delete,
        purge,
    ):
        app.command()(fn)


def _status(text: str) -> Any:
    from tether.state import RunStatus

    try:
        return RunStatus(text.upper())
    except ValueError:
        raise typer.BadParameter(f"status must be one of {', '.join(RunStatus)}") from None


def runs(
    store: StoreOpt = None,
    status: Annotated[str | None, typer.Option(help="Only runs with this status.")] = None,
    limit: int = 50,
    as_json: JsonOpt = False,
) -> None:
    """List runs, most recently updated first (a RUNNING run whose process is gone: INTERRUPTED),
    a running one with the process that holds it (host:pid, when it last renewed its lease);
    a paused or interrupted run with why it stopped and the command that continues it."""
    wanted = _status(status) if status else None

    async def go(s: Any) -> list[dict[str, Any]]:
        from tether.runtime.holders import runs_with_holders
        from tether.state.reserved import runtime_get

        listed = []
        for r, holder in await runs_with_holders(s, status=wanted, limit=limit):
            entry = {
                **_info(r),
                "holder": None if holder is None else holder.to_dict(),
                "pause_reason": None,
                "continue_with": None,
            }
            if entry["status"] in ("PAUSED", "INTERRUPTED"):  # one load each, only for these
                cp = await s.load(r.run_id)
                if cp is not None:
                    entry["pause_reason"] = runtime_get(cp.state, "pause_reason")
                    entry["continue_with"] = continue_hint(r.run_id, cp.state, entry["status"])
            listed.append(entry)
        return listed

    result = on_store(store, go)
    if as_json:
        print_json(result)
        return
    from rich.table import Table

    stopped = any(r["continue_with"] for r in result)
    held = any(r["holder"] for r in result)
    table = Table("status", "version", "node", "updated")
    table.add_column("run", no_wrap=True)
    if held:
        table.add_column("held by", no_wrap=True)
        table.add_column("lease renewed")
    if stopped:
        table.add_column("reason")
        table.add_column("continue with", no_wrap=True)
    for r in result:
        cells = [
            r["status"],
            str(r["version"]),
            _text(r["node_id"] or ""),
            r["updated_at"][:19].replace("T", " "),
        ]
        cells.append(_text(r["run_id"]))
        if held:
            cells += _holder_cells(r["holder"])
        if stopped:
            cells += [_text(r["pause_reason"] or ""), _text(r["continue_with"] or "")]
        table.add_row(*cells)
    console().print(table)


def _holder_cells(holder: dict[str, Any] | None) -> list[Any]:
    """``host:pid`` and how long ago it renewed the lease (blank: nobody holds the run)."""
    if holder is None:
        return ["", ""]
    age = holder["age"]
    return [_text(f"{holder['host']}:{holder['pid']}"), "" if age is None else f"{age:.0f}s ago"]


def _info(r: Any) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "status": str(r.status),
        "version": r.version,
        "node_id": r.node_id,
        "created_at": r.created_at.isoformat(),
        "updated_at": r.updated_at.isoformat(),
        "expires_at": r.expires_at.isoformat() if r.expires_at else None,
    }


def _text(value: str) -> Any:
    """User data for a rich table: shown as written, never read as markup."""
    from rich.text import Text

    return Text(value)


def show(run_id: str, store: StoreOpt = None, version: int | None = None, as_json: JsonOpt = True) -> None:
    """Print a run's snapshot (or one version's checkpoint) as JSON."""

    async def go(s: Any) -> dict[str, Any]:
        from tether.runtime import live_status
        from tether.state.reserved import runtime_get

        if version is None:
            snap = await s.snapshot(run_id)
            info = await s.get_run(run_id)
            if snap is None or info is None:
                raise RunNotFound(run_id)
            shown = str(await live_status(s, info))
            return {
                "run_id": snap.run_id,
                "status": shown,
                "version": snap.version,
                "current_node_id": snap.current_node_id,
                "current_node_name": snap.current_node_name,
                "timestamp": snap.timestamp.isoformat(),
                "pause_reason": runtime_get(snap.state, "pause_reason"),
                "continue_with": continue_hint(run_id, snap.state, shown),
                "state": snap.state,
            }
        cp = await s.load(run_id, version)
        if cp is None:
            raise RunNotFound(run_id, version)
        return {"run_id": run_id, "version": cp.version, "node_id": cp.node_id, "state": cp.state}

    print_json(on_store(store, go))


def history(
    run_id: str, store: StoreOpt = None, limit: int = 20, before: int | None = None, as_json: JsonOpt = False
) -> None:
    """List a run's checkpoints, newest first."""

    async def go(s: Any) -> Any:
        if await s.get_run(run_id) is None:
            raise RunNotFound(run_id)
        return await s.history(run_id, before=before, limit=limit)

    result = on_store(store, go)
    if as_json:
        print_json(
            [
                {
                    "version": h.version,
                    "node_id": h.node_id,
                    "status": str(h.status),
                    "kind": h.kind,
                    "bytes": h.size,
                    "timestamp": h.timestamp.isoformat(),
                }
                for h in result
            ]
        )
        return
    from rich.table import Table

    table = Table("version", "node", "status", "kind", "bytes", "time")
    for h in result:
        table.add_row(
            str(h.version),
            _text(h.node_id or ""),
            str(h.status),
            h.kind,
            str(h.size),
            f"{h.timestamp:%H:%M:%S.%f}",
        )
    console().print(table)


def status(
    run_id: str,
    new_status: Annotated[
        str | None, typer.Argument(help="Set this status (omit to show the run's).")
    ] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a run's status, why it stopped and how to continue it; or set it."""
    wanted = _status(new_status) if new_status else None

    async def go(s: Any) -> dict[str, Any]:
        from tether.runtime import live_status
        from tether.state.reserved import runtime_get

        if wanted is not None:
            await s.set_status(run_id, wanted)
        info = await s.get_run(run_id)
        cp = await s.load(run_id) if info is not None else None
        if info is None or cp is None:
            raise RunNotFound(run_id)
        shown = str(await live_status(s, info))
        return {
            "run_id": run_id,
            "status": shown,
            "version": info.version,
            "node_id": info.node_id,
            "pause_reason": runtime_get(cp.state, "pause_reason"),
            "continue_with": continue_hint(run_id, cp.state, shown),
        }

    data = on_store(store, go)
    if as_json:
        print_json(data)
        return
    typer.echo(f"{run_id}: {data['status']} at version {data['version']}")
    if data["pause_reason"]:
        typer.echo(f"reason: {data['pause_reason']}")
    if data["continue_with"]:
        typer.echo(f"continue with: {data['continue_with']}")


def pause(
    run_id: str,
    store: StoreOpt = None,
    reason: Annotated[
        str | None, typer.Option(help="Why: stored with the run, shown by show, status and runs.")
    ] = None,
    wait: Annotated[
        float, typer.Option(help="Seconds to wait for a live runner to stop, to store the reason.")
    ] = 60.0,
    as_json: JsonOpt = False,
) -> None:
    """Pause a run: a live runner checkpoints the step in progress and stops there."""
    if reason is None:
        _request(run_id, store, "PAUSED", as_json)
        return

    async def go(s: Any) -> tuple[Any, str | None]:
        from tether.runtime.control import pause_run

        outcome = await pause_run(s, run_id, reason=reason, wait=wait)
        cp = await s.load(run_id)
        return outcome, continue_hint(run_id, cp.state, "PAUSED") if cp is not None else None

    outcome, hint = on_store(store, go)
    was = str(outcome.was)
    if as_json:
        print_json(
            {
                "run_id": run_id,
                "status": "PAUSED",
                "was": was,
                "stopped": outcome.stopped,
                "reason_recorded": outcome.reason_recorded,
                "continue_with": hint if outcome.stopped else None,
            }
        )
        return
    typer.echo(f"{run_id}: already PAUSED" if was == "PAUSED" else f"{run_id}: PAUSED (was {was})")
    if outcome.reason_recorded:
        typer.echo(f"reason: {reason}")
    elif not outcome.stopped:
        typer.echo(
            f"its runner is still inside a step after {wait:g}s: it stops at the next step boundary; "
            f"the reason is stored when you run this again once it has stopped"
        )
    else:
        typer.echo("the reason was not stored: the run was resumed or changed meanwhile")
    if hint and outcome.stopped:
        typer.echo(f"continue with: {hint}")


def cancel(run_id: str, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Cancel a run for good: a live runner checkpoints the step in progress and stops there."""
    _request(run_id, store, "CANCELLED", as_json)


def _request(run_id: str, store: str | None, wanted: str, as_json: bool) -> None:
    from tether.state import RunStatus

    async def go(s: Any) -> tuple[str, str]:
        from tether.runtime import live_status

        info = await s.get_run(run_id)
        if info is None:
            raise RunNotFound(run_id)
        shown = await live_status(s, info)
        if shown in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED):
            raise ConfigError(f"run {run_id!r} is {shown}: there is nothing to {wanted.lower()[:-2]}e")
        if str(shown) == wanted:
            return str(shown), f"{run_id}: already {wanted}"
        await s.set_status(run_id, RunStatus(wanted))
        if shown is RunStatus.RUNNING:
            return str(shown), f"{run_id}: {wanted} requested; its runner stops at the next step boundary"
        return str(shown), f"{run_id}: {wanted}"

    was, said = on_store(store, go)
    if as_json:
        requested = was == "RUNNING"  # a live runner stops at its next step boundary
        print_json({"run_id": run_id, "status": wanted, "was": was, "requested": requested})
        return
    typer.echo(said)


def update(
    run_id: str,
    data: Annotated[
        str, typer.Argument(help='JSON object merged through the reducers, e.g. \'{"goal": "x"}\'')
    ],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Merge a JSON update into a PAUSED run's state."""
    patch = json_object(data, "the update")
    result = on_store(store, lambda s: s.update_state(run_id, patch))
    if as_json:
        print_json({"run_id": run_id, "version": result})
        return
    typer.echo(f"{run_id}: updated, version {result}")


def rollback(
    run_id: str,
    version: int,
    store: StoreOpt = None,
    force: Annotated[bool, typer.Option(help="Even if a live runner executes it.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Make VERSION the latest state again (history stays: later versions remain readable)."""

    async def go(s: Any) -> int:
        from tether.runtime import live_status
        from tether.state import RunStatus

        info = await s.get_run(run_id)
        if info is None:
            raise RunNotFound(run_id)
        if not force and await live_status(s, info) is RunStatus.RUNNING:
            raise ConfigError(f"run {run_id!r} is being executed; pause it first (tether pause {run_id})")
        return int(await s.rollback(run_id, version))

    restored = on_store(store, go)
    if as_json:
        print_json({"run_id": run_id, "restored_version": version, "version": restored})
        return
    typer.echo(f"{run_id}: version {version} restored as version {restored}")


def diff(run_id: str, v1: int, v2: int, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """What changed in a run's state between two versions, key by key."""

    async def go(s: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        a, b = await s.load(run_id, v1), await s.load(run_id, v2)
        for cp, v in ((a, v1), (b, v2)):
            if cp is None:
                raise RunNotFound(run_id, v)
        return a.state, b.state

    old, new = on_store(store, go)
    changes = {
        "added": {k: new[k] for k in new if k not in old},
        "removed": {k: old[k] for k in old if k not in new},
        "changed": {k: {"from": old[k], "to": new[k]} for k in old if k in new and old[k] != new[k]},
    }
    if as_json:
        print_json(changes)
        return
    import json

    def short(value: Any) -> str:
        text = json.dumps(value, ensure_ascii=False, default=str)
        return text if len(text) <= 200 else f"{text[:200]}… ({len(text)} chars)"

    for key, value in changes["added"].items():
        typer.echo(f"+ {key}: {short(value)}")
    for key, value in changes["removed"].items():
        typer.echo(f"- {key}: {short(value)}")
    for key, pair in changes["changed"].items():
        typer.echo(f"~ {key}: {short(pair['from'])} -> {short(pair['to'])}")
    if not any(changes.values()):
        typer.echo(f"{run_id}: versions {v1} and {v2} hold the same state")


def prune(
    run_id: str,
    keep: Annotated[int, typer.Option(help="Versions to keep.")],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Drop all but the latest KEEP versions of a run (safe with deltas)."""
    result = on_store(store, lambda s: s.prune(run_id, keep=keep))
    if as_json:
        print_json({"run_id": run_id, "removed_versions": result})
        return
    typer.echo(f"{run_id}: removed {result} versions")


def copy(
    run_id: str,
    new_run_id: str,
    store: StoreOpt = None,
    version: int | None = None,
    as_json: JsonOpt = False,
) -> None:
    """Fork a run (at VERSION, default latest) into NEW_RUN_ID."""
    forked = on_store(store, lambda s: s.copy(run_id, new_run_id, version=version))
    if as_json:
        print_json({"run_id": new_run_id, "from": run_id, "from_version": version, "version": forked})
        return
    typer.echo(f"{new_run_id}: forked from {run_id}")


def delete(run_id: str, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Delete a run, all its checkpoints and its agent artefacts."""

    async def go(s: Any) -> bool:
        from tether.agent.config import delete_artifacts

        found: bool = await s.delete(run_id)
        delete_artifacts(s, run_id)  # also the leftovers of a run deleted without them
        return found

    result = on_store(store, go)
    if not result:
        raise fail(f"run {run_id!r} not found")
    if as_json:
        print_json({"run_id": run_id, "deleted": True})
        return
    typer.echo(f"{run_id}: deleted")


def purge(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Delete expired runs now (SQL stores; Redis expires keys by itself), and the agent
    artefacts of runs no longer stored that nothing touched for an hour."""

    async def go(s: Any) -> tuple[int, int]:
        from tether.agent.config import sweep_artifacts

        runs = await s.purge_expired()
        return runs, await sweep_artifacts(s)

    runs, dirs = on_store(store, go)
    if as_json:
        print_json({"purged_runs": runs, "artifact_dirs_removed": dirs})
        return
    typer.echo(f"purged {runs} expired runs, removed the artefacts of {dirs} runs no longer stored")


def json_object(text: str, what: str) -> dict[str, Any]:
    import json

    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"{what} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise typer.BadParameter(f"{what} must be a JSON object")
    return data
