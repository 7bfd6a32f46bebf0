"""``tether eval``: how well compression keeps the facts of your own runs.

Runs come from a store (ids or shell-style globs over the run ids) or from JSONL
transcripts in the OpenAI message format (one ``{"messages": [...]}`` per line, or one
message per line for a whole file). Each run's context is compressed at the levels and
budgets asked for; the report gives, per fact category, the share kept and the token
ratio, as a table, JSON (``--json``) or an HTML page with charts (``--html FILE``), plus
the token-count accuracy per model family where the runs recorded the provider's counts.
Runs are spread over ``--workers`` processes. ``--acceptance`` also measures the design's
acceptance metrics on the suites bundled with the package (see :mod:`tether.cli.acceptance`).
"""

from __future__ import annotations

import asyncio
import fnmatch
import html
import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Annotated, Any

import typer

from tether.cli._common import JsonOpt, StoreOpt, console, print_json, run_async, settings

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    app.command(name="eval")(evaluate)


def evaluate(
    runs: Annotated[
        list[str] | None, typer.Argument(help="Run ids or globs (quote them): 'deploy-*'.")
    ] = None,
    jsonl: Annotated[
        list[Path] | None, typer.Option("--jsonl", help="OpenAI-format transcripts, one run per line.")
    ] = None,
    level: Annotated[
        list[str] | None, typer.Option("--level", help="standard and/or deep (default: both).")
    ] = None,
    budget: Annotated[
        list[int] | None, typer.Option("--budget", help="Also fit to this many tokens.")
    ] = None,
    model: Annotated[str, typer.Option(help="Tokenizer for transcripts (a model name).")] = "gpt-4o",
    workers: Annotated[int, typer.Option(min=1, help="Processes to spread the runs over.")] = 2,
    html_out: Annotated[
        Path | None, typer.Option("--html", help="Write an HTML report with charts here.")
    ] = None,
    acceptance: Annotated[
        bool,
        typer.Option(
            "--acceptance",
            help="Also measure the design's acceptance metrics on the bundled suites "
            "(task success after compression, rollback success, FINISH accuracy, MAIN calls saved).",
        ),
    ] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Replay runs' contexts through compression; report what each fact category keeps."""
    levels = tuple(level or ("standard", "deep"))
    bad = [lv for lv in levels if lv not in ("standard", "deep")]
    if bad:
        raise typer.BadParameter(f"--level must be standard or deep, got {', '.join(bad)}")
    budgets = tuple(budget or ())
    if not runs and not jsonl and not acceptance:
        raise typer.BadParameter("name runs (ids or globs), pass --jsonl FILE or --acceptance")
    if not runs and not jsonl:
        _acceptance_only(html_out, as_json)
        return
    url, options = settings(store)
    jobs: list[tuple[str, Any]] = []
    if runs:
        ids = run_async(lambda: _match(url, options, runs))
        jobs += [("run", rid) for rid in ids]
    for path in jsonl or ():
        jobs += [("jsonl", (str(path), i, *span)) for i, span in enumerate(_transcripts(path))]
    if not jobs:
        raise typer.BadParameter("no run matched")
    chunks = [jobs[i::workers] for i in range(min(workers, len(jobs)))]
    args = [(url, options, chunk, levels, budgets, model) for chunk in chunks]
    if len(chunks) == 1:
        parts = [_work(*args[0])]
    else:
        with ProcessPoolExecutor(max_workers=len(chunks)) as pool:
            parts = list(pool.map(_work, *zip(*args, strict=True)))
    from tether.context.evaluation import merge_reports

    results = [r for part in parts for r in part]
    report = merge_reports(results)
    report["perRun"] = [r.to_dict() for r in results]
    if acceptance:
        report["acceptance"] = _measure_acceptance()
    if html_out is not None:
        html_out.write_text(render_html(report), encoding="utf-8")
    if as_json:
        print_json(report)
        return
    _table(report)
    if acceptance:
        _acceptance_table(report["acceptance"])
    if html_out is not None:
        console().print(f"HTML report: {html_out}")


def _measure_acceptance() -> dict[str, Any]:
    from tether.cli.acceptance import acceptance_report

    return run_async(acceptance_report)


def _acceptance_only(html_out: Path | None, as_json: bool) -> None:
    report = {"acceptance": _measure_acceptance()}
    if html_out is not None:
        html_out.write_text(_acceptance_html(report["acceptance"]), encoding="utf-8")
    if as_json:
        print_json(report)
        return
    _acceptance_table(report["acceptance"])
    if html_out is not None:
        console().print(f"HTML report: {html_out}")


_LABELS = {
    "tokenCountAccuracy": "token counts against the model's tokenizer (worst family)",
    "taskSuccessAfterStandardCompression": "task success after standard compression",
    "rollbackSuccess": "rollback success under injected failures",
    "finishAccuracy": "orchestrator FINISH accuracy",
    "mainCallsSavedBySubloop": "MAIN calls saved by the sub-loop",
}


def _shown(name: str, value: Any) -> str:
    if value is None:
        return "—"
    return str(value) if name == "mainCallsSavedBySubloop" else f"{value * 100:.1f}%"


def _acceptance_table(acc: dict[str, Any]) -> None:
    from rich.table import Table

    out = console()
    table = Table(title="acceptance metrics (bundled suites, scripted models)")
    for column in ("metric", "value", "goal", ""):
        table.add_column(column)
    for name, goal in acc["goals"].items():
        verdict = "[green]MET[/]" if goal["met"] else "[red]NOT MET[/]"
        table.add_row(_LABELS.get(name, name), _shown(name, goal["value"]), str(goal["goal"]), verdict)
    out.print(table)
    for family, row in acc["tokens"]["families"].items():
        shown = f"{row['accuracy'] * 100:.2f}%" if row["accuracy"] is not None else row["note"]
        out.print(f"token counts, {family} ({row['model']}): {shown}", highlight=False)
    for failed in acc["tasks"]["failed"]:
        out.print(
            f"task {failed['task']}: {failed['status']} (written: {failed['written']!r})", highlight=False
        )
    for failed in acc["rollback"]["failed"]:
        out.print(
            f"rollback trial {failed['trial']} ({failed['kind']}): {failed['problem']}", highlight=False
        )
    orch = acc["orchestrator"]
    out.print(
        f"MAIN calls over {orch['tasks']} recorded tasks: {orch['mainCallsWith']} with the sub-loop, "
        f"{orch['mainCallsWithout']} without",
        highlight=False,
    )


def _acceptance_html(acc: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(_LABELS.get(n, n))}</td><td>{_shown(n, g['value'])}</td>"
        f"<td>{html.escape(str(g['goal']))}</td><td>{'MET' if g['met'] else 'NOT MET'}</td></tr>"
        for n, g in acc["goals"].items()
    )
    return (
        "<h2>Acceptance metrics</h2><table><tr><th>metric</th><th>value</th><th>goal</th><th></th></tr>"
        f"{rows}</table>"
    )


async def _match(url: str, options: dict[str, Any], patterns: list[str]) -> list[str]:
    from tether.stores import open_store

    async with open_store(url, **options) as s:
        if all(not any(ch in p for ch in "*?[") for p in patterns):
            return list(dict.fromkeys(patterns))
        known = [info.run_id for info in await s.list_runs(limit=1_000_000)]
    out = [rid for rid in known if any(fnmatch.fnmatchcase(rid, p) for p in patterns)]
    return sorted(dict.fromkeys(out))


def _transcripts(path: Path) -> list[tuple[int, int]]:
    """Where each transcript of a JSONL file is: ``(offset, length)`` of its line, or one
    ``(0, -1)`` when every line is a message of a single transcript. Workers read only
    their own lines (a hot path: see benchmarks/bench_eval.py)."""
    spans: list[tuple[int, int]] = []
    first: bytes | None = None
    with path.open("rb") as f:
        offset = 0
        for line in f:
            if line.strip():
                if first is None:
                    first = line
                spans.append((offset, len(line)))
            offset += len(line)
    if first is None:
        return []
    head = json.loads(first)
    return spans if isinstance(head, dict) and "messages" in head else [(0, -1)]


def _load_transcript(path: str, offset: int, length: int) -> list[dict[str, Any]]:
    if length < 0:
        text = Path(path).read_text(encoding="utf-8")
        return [json.loads(ln) for ln in text.splitlines() if ln.strip()]
    with open(path, "rb") as f:
        f.seek(offset)
        line = f.read(length)
    return list(json.loads(line)["messages"])


def _work(
    url: str,
    options: dict[str, Any],
    jobs: list[tuple[str, Any]],
    levels: tuple[str, ...],
    budgets: tuple[int, ...],
    model: str,
) -> list[Any]:
    """One worker: evaluate its runs (store reads in one event loop, then pure work)."""
    from tether.context.evaluation import RunEvaluation, evaluate_window, token_accuracy, window_from_messages
    from tether.context.records import PROMPT_LOG_KEY
    from tether.context.window import window_from_run_state

    states: dict[str, Any] = {}
    stored = [rid for kind, rid in jobs if kind == "run"]
    if stored:

        async def load() -> None:
            from tether.stores import open_store

            async with open_store(url, **options) as s:
                for rid in stored:
                    cp = await s.load(rid)
                    states[rid] = None if cp is None else cp.state

        asyncio.run(load())
    out: list[RunEvaluation] = []
    for kind, ref in jobs:
        name = ref if kind == "run" else f"{ref[0]}#{ref[1] + 1}"
        try:
            if kind == "run":
                state = states.get(ref)
                if state is None:
                    raise LookupError(f"run {ref!r} not found")
                window = window_from_run_state(state)
                if window is None:
                    raise LookupError(f"run {ref!r} keeps no context window")
                accuracy = token_accuracy(state.get(PROMPT_LOG_KEY) or [])
            else:
                window = window_from_messages(_load_transcript(ref[0], ref[2], ref[3]), model=model)
                accuracy = {}
            result = evaluate_window(window, run=name, levels=levels, budgets=budgets)  # type: ignore[arg-type]
            result.accuracy = accuracy
        except Exception as exc:  # one bad run is reported, the others still count
            result = RunEvaluation(run=name, tokens=0, error=f"{type(exc).__name__}: {exc}")
        out.append(result)
    return out


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def _table(report: dict[str, Any]) -> None:
    from rich.table import Table

    from tether.context.evaluation import CATEGORIES

    out = console()
    table = Table(title=f"facts kept over {report['runs']} run(s)")
    table.add_column("category")
    table.add_column("facts", justify="right")
    for label in report["levels"]:
        table.add_column(label, justify="right")
    for category in CATEGORIES:
        cells = [_pct(report["levels"][lv]["kept"][category]) for lv in report["levels"]]
        table.add_row(category, str(report["facts"][category]), *cells)
    table.add_row("token ratio", "", *[_pct(report["levels"][lv]["tokenRatio"]) for lv in report["levels"]])
    out.print(table)
    for family, acc in report["tokenAccuracy"].items():
        out.print(
            f"token counts, {family}: {acc['accuracy'] * 100:.1f}% accurate over {acc['calls']} calls "
            f"(ours / billed = {acc['meanRatio']:.3f})",
            highlight=False,
        )
    for failed in report["failed"]:
        out.print(f"[red]{failed['run']}[/]: {failed['error']}", highlight=False)


def render_html(report: dict[str, Any]) -> str:
    """A self-contained page: a bar chart per level (share kept by category) and the numbers."""
    from tether.context.evaluation import CATEGORIES

    charts = []
    for label, data in report["levels"].items():
        bars = []
        for i, category in enumerate(CATEGORIES):
            value = data["kept"][category]
            width = 0 if value is None else 300 * value
            y = 10 + i * 26
            bars.append(
                f'<text x="0" y="{y + 14}" font-size="12">{html.escape(category)}</text>'
                f'<rect x="150" y="{y}" width="{width:.1f}" height="18" fill="#2456c7"></rect>'
                f'<text x="{155 + width:.1f}" y="{y + 14}" font-size="12">{_pct(value)}</text>'
            )
        ratio = _pct(data["tokenRatio"])
        charts.append(
            f"<section><h2>{html.escape(label)} <small>tokens kept: {ratio}</small></h2>"
            f'<svg width="520" height="{20 + 26 * len(CATEGORIES)}" role="img" '
            f'aria-label="facts kept at {html.escape(label)}">{"".join(bars)}</svg></section>'
        )
    accuracy = "".join(
        f"<tr><td>{html.escape(f)}</td><td>{a['calls']}</td><td>{a['accuracy'] * 100:.1f}%</td></tr>"
        for f, a in report["tokenAccuracy"].items()
    )
    data = html.escape(json.dumps({k: v for k, v in report.items() if k != "perRun"}, indent=2))
    extra = _acceptance_html(report["acceptance"]) if "acceptance" in report else ""
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>tether eval</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:2rem;max-width:900px}"
        "table{border-collapse:collapse}td,th{padding:.3rem .6rem;border-bottom:1px solid #ddd}</style>"
        f"</head><body><h1>Facts kept by compression over {report['runs']} run(s)</h1>"
        f"{''.join(charts)}<h2>Token-count accuracy</h2><table><tr><th>family</th><th>calls</th>"
        f"<th>accuracy</th></tr>{accuracy}</table>{extra}<details><summary>numbers</summary><pre>{data}</pre>"
        "</details></body></html>"
    )
