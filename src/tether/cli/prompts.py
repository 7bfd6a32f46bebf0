"""``tether prompt`` and ``tether replay``: what the model saw at each call of a run, what
changed between two calls, and one call re-run on the side.

The agent loop records every model call as a delta against the call before (state key
``prompt_log``); these commands rebuild the exact messages from those records. A replay
sends them again (as recorded, or edited in a file) and prints the new reply beside the
old one; the run itself is never touched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from tether.cli._common import JsonOpt, StoreOpt, console, on_store, print_json

__all__ = ["register"]

LAYER_NAMES = {1: "System", 2: "Session", 3: "Working", 4: "Instant"}


def register(app: typer.Typer) -> None:
    app.command()(prompt)
    app.command()(replay)


def prompt(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    iteration: Annotated[
        int | None,
        typer.Option("--iteration", "-i", help="The call of this iteration (default: the latest)."),
    ] = None,
    version: Annotated[
        int | None, typer.Option("--version", help="The latest call as of this checkpoint version.")
    ] = None,
    diff: Annotated[
        tuple[int, int] | None,
        typer.Option("--diff", help="Two iterations N M: what entered, left or was compressed from N to M."),
    ] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the exact messages a run's model call was sent, by layer, with token counts.

    Examples: `tether prompt RUN`, `tether prompt RUN -i 37`, `tether prompt RUN --diff 36 37`,
    `tether prompt RUN -i 37 --json > p.json` (edit it, then `tether replay RUN -i 37 --edit p.json`).
    """
    from tether.agent.replay import load_records, pick_call, prompt_diff

    if diff is not None and (iteration is not None or version is not None):
        raise typer.BadParameter("--diff takes its own two iterations: drop --iteration/--version")

    async def go(s: Any) -> Any:
        records = await load_records(s, run_id, version=version)
        if diff is not None:
            return prompt_diff(records, diff[0], diff[1])
        return pick_call(records, iteration)

    found = on_store(store, go)
    if diff is not None:
        _print_diff(found, as_json)
        return
    call = found
    if as_json:
        print_json({**call.summary(), "messages": call.messages, "items": call.meta})
        return
    out = console()
    rec = call.record
    layers = " · ".join(f"{k} {v}" for k, v in (rec.get("layers") or {}).items())
    out.print(
        f"[bold]{run_id}[/] iteration {rec.get('iteration')} · {rec.get('provider')} {rec.get('model')} · "
        f"{rec.get('tokens')}/{rec.get('budget')} tokens ({layers})",
        highlight=False,
    )
    current = None
    for meta, message in zip(call.meta, call.messages, strict=True):
        layer = int(meta.get("layer") or 0)
        if layer != current:
            current = layer
            out.print(f"[bold]── layer {layer} · {LAYER_NAMES.get(layer, '?')} ──[/]", highlight=False)
        head = f"{message.get('role')} · {meta.get('id')} ({meta.get('kind')}, {meta.get('tokens')} tokens)"
        out.print(f"[bold cyan]{head}[/]", highlight=False)
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(message, ensure_ascii=False)
        out.print(text, markup=False, highlight=False)
    out.print("[bold]── reply ──[/]", highlight=False)
    out.print(str(rec.get("reply") or ""), markup=False, highlight=False)


def _print_diff(d: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(d)
        return
    out = console()
    out.print(
        f"iteration {d['before']} → {d['after']}: {d['tokensBefore']} → {d['tokensAfter']} tokens, "
        f"{d['kept']} items unchanged",
        highlight=False,
    )
    for title, key, mark in (
        ("entered", "entered", "+"),
        ("left", "left", "-"),
        ("compressed into the summary", "compressed", "~"),
        ("changed", "changed", "*"),
    ):
        rows = d[key]
        if not rows:
            continue
        out.print(f"[bold]{title}[/] ({len(rows)})")
        for r in rows:
            line = (
                f"  {mark} {r['id']} [{r['kind']}, layer {r['layer']}, {r['tokens']} tokens] {r['preview']}"
            )
            out.print(line, markup=False, highlight=False)


def replay(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    iteration: Annotated[int, typer.Option("--iteration", "-i", help="The call to re-run.")],
    edit: Annotated[
        Path | None,
        typer.Option(
            "--edit", help="Send these messages instead (a JSON list, or `tether prompt --json` output)."
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="A real model by name (provider and key from TETHER_MODEL*)."),
    ] = None,
    script: Annotated[
        Path | None,
        typer.Option("--script", help="Offline: a JSON list whose first item is the scripted model's reply."),
    ] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-run one model call of a run and print the new reply beside the recorded one.

    The run is not changed. Offline: `--script replies.json`; a real model: `--model NAME`
    with TETHER_MODEL_PROVIDER and TETHER_API_KEY set (or the provider the run used).
    """
    import os

    from tether.agent.replay import load_records, pick_call, replay_call, validate_messages
    from tether.errors import ConfigError

    edited = None
    if edit is not None:
        try:
            edited = validate_messages(json.loads(edit.read_text(encoding="utf-8")))
        except json.JSONDecodeError as exc:
            raise typer.BadParameter(f"--edit: {edit} is not JSON: {exc}") from None
    replies = None
    if script is not None:
        try:
            replies = json.loads(script.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise typer.BadParameter(f"--script: {script} is not JSON: {exc}") from None
        if not isinstance(replies, list) or not replies:
            raise typer.BadParameter("--script must hold a non-empty JSON list of replies")

    async def go(s: Any) -> Any:
        from tether.models import LLMConfig, ScriptedModel, create_model

        call = pick_call(await load_records(s, run_id), iteration)
        if replies is not None:
            chat: Any = ScriptedModel(replies[:1], model=str(call.record.get("model") or "scripted"))
        else:
            provider = str(call.record.get("provider") or "")
            if provider == "scripted" and not os.environ.get("TETHER_MODEL_PROVIDER"):
                raise ConfigError(
                    "this run used a scripted model: pass --script FILE, or --model NAME with "
                    "TETHER_MODEL_PROVIDER set to a real provider"
                )
            wanted: dict[str, Any] = {"model": model or call.record.get("model")}
            if provider in ("openai", "anthropic") and not os.environ.get("TETHER_MODEL_PROVIDER"):
                wanted["provider"] = provider
            chat = create_model(LLMConfig.from_env(os.environ, **wanted))
        try:
            return await replay_call(chat, call, messages=edited)
        finally:
            await chat.aclose()

    result = on_store(store, go)
    if as_json:
        print_json(result.to_dict())
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title=f"{run_id} iteration {result.iteration}" + (" (edited prompt)" if result.edited else "")
    )
    table.add_column("recorded reply", overflow="fold")
    table.add_column(f"new reply ({result.new_reply.model}, {result.seconds:.2f}s)", overflow="fold")
    table.add_row(Text(_pretty(result.old_reply)), Text(_pretty(result.new_reply.text)))
    console().print(table)


def _pretty(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text
