"""``tether orchestrate``: MAIN, TEST, DEV, REVIEW and FINISH_REVIEW on a working directory.

Roles are chosen with ``--agent ROLE=SPEC`` (ROLE: TEST, DEV, REVIEW, FINISH_REVIEW or
``*`` for every role without its own ``--agent``):

* ``cmd:COMMAND``      an external coding agent, prompt on stdin (``{report_file}``,
  ``{prompt_file}``, ``{role}``, ``{iteration}``, ``{workdir}`` are filled in)
* ``cmdfile:COMMAND``  the same, with the prompt only in ``{prompt_file}``
* ``agent[:MODEL]``    tether's agent loop with a model (from ``TETHER_MODEL_*``)
* ``demo``             the offline demo's scripted role (TEST runs pytest, DEV fixes the sample)

``--main`` is ``rules`` (decides from the verdicts, offline), ``model[:MODEL]`` or
``script:FILE.json`` (a scripted model's replies, for rehearsals; a resumed run continues
at the reply it had reached).

The whole configuration comes from ``TETHER_ORCH_*`` environment variables, then ``--set
FIELD=VALUE`` and the named options (see ``tether.orchestrator.settings``); it is recorded
with the run, so ``tether resume`` continues with the same. ``--env NAME[=VALUE]`` passes
an environment variable to ``cmd:`` roles (they get a scrubbed environment otherwise);
only names are recorded, so a resumed run reads the values from its own environment.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

from tether.cli._common import EXIT_FOR_STATUS, ResultJsonOpt, print_json, progress_console

__all__ = ["orchestrate"]

ROLE_NAMES = ("TEST", "DEV", "REVIEW", "FINISH_REVIEW")


def orchestrate(
    task: Annotated[str, typer.Argument(help="What the agents should achieve.")] = "",
    workdir: Annotated[
        str, typer.Option(help="The project the agents work in (the blackboard lives there).")
    ] = ".",
    resume_run: Annotated[str | None, typer.Option("--resume", help="Continue this run id.")] = None,
    main: Annotated[str, typer.Option(help="MAIN: rules | model[:NAME] | script:FILE.json.")] = "rules",
    agent: Annotated[
        list[str] | None, typer.Option("--agent", help="ROLE=SPEC (cmd:…, cmdfile:…, agent[:MODEL], demo).")
    ] = None,
    demo: Annotated[
        bool, typer.Option(help="Offline demo: write a sample project with a bug into --workdir and fix it.")
    ] = False,
    answer: Annotated[str | None, typer.Option(help="Answer to the question a paused run waits on.")] = None,
    decision: Annotated[
        str | None,
        typer.Option(help="Decide on the failure a paused run waits on (retry, takeover, abort…)."),
    ] = None,
    note: Annotated[str | None, typer.Option(help="With --decision takeover: what you did by hand.")] = None,
    max_iterations: Annotated[
        int | None, typer.Option(help="MAIN rounds before the run ends FAILED (TETHER_ORCH_MAX_ITERATIONS).")
    ] = None,
    stall_rounds: Annotated[
        int | None, typer.Option(help="Rounds without progress before a re-plan.")
    ] = None,
    subloop_rounds: Annotated[int | None, typer.Option(help="TEST->DEV sub-loop rounds at most.")] = None,
    subloop_timeout: Annotated[float | None, typer.Option(help="Seconds the sub-loop may take.")] = None,
    stage_timeout: Annotated[float | None, typer.Option(help="Seconds one role may take.")] = None,
    no_subloop: Annotated[
        bool, typer.Option("--no-subloop", help="Never enter the TEST->DEV sub-loop.")
    ] = False,
    acceptance: Annotated[
        list[str] | None, typer.Option("--acceptance", help="An acceptance criterion (repeat it).")
    ] = None,
    max_prompt_bytes: Annotated[int | None, typer.Option(help="MAIN's prompt limit in bytes.")] = None,
    lookback: Annotated[
        int | None,
        typer.Option(help="Recent reports of each source a role sees (SUBAGENT_HISTORY_LOOKBACK)."),
    ] = None,
    setting: Annotated[
        list[str] | None, typer.Option("--set", help="FIELD=VALUE for any configuration field (repeat it).")
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", help="NAME[=VALUE] passed to cmd: roles (repeat it).")
    ] = None,
    run_id: Annotated[str | None, typer.Option(help="Id of a new run (default: generated).")] = None,
    store: Annotated[
        str | None, typer.Option("--store", help="Store URL (default: TETHER_STORE_URL or SQLite).")
    ] = None,
    as_json: ResultJsonOpt = False,
) -> None:
    """Run MAIN and the TEST/DEV/REVIEW agents on a task, checkpointed after every stage.

    Exit code: 0 COMPLETED, 3 FAILED, 4 PAUSED (waits for an answer or a decision),
    5 CANCELLED, 6 INTERRUPTED, 1 an error.
    """
    from tether.cli.app import _console, _run, _settings
    from tether.errors import ConfigError

    console = progress_console() if as_json else _console()
    url, options = _settings(store)
    root = Path(workdir)
    if demo:
        from tether.orchestrator.demo import make_sample_repo

        root.mkdir(parents=True, exist_ok=True)
        if not (root / "stats.py").exists():
            make_sample_repo(root)
        task = task or "Make the test suite of this project pass (median() of an even count is wrong)."
    if not resume_run and not task.strip():
        raise typer.BadParameter("give a TASK (or --resume RUN_ID)")
    specs = _agent_specs(agent or [], demo)
    env_values, env_names = _env(env or [])
    try:
        config = _config(
            setting or [],
            max_iterations=max_iterations,
            stall_rounds=stall_rounds,
            subloop_max_iterations=subloop_rounds,
            subloop_timeout=subloop_timeout,
            stage_timeout=stage_timeout,
            subloop=False if no_subloop else None,
            acceptance=tuple(acceptance) if acceptance else None,
            max_prompt_bytes=max_prompt_bytes,
            lookback=lookback,
        )
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from None
    # `tether resume RUN` rebuilds the roles and the configuration from this
    origin: dict[str, Any] = {"kind": "orchestrate", "workdir": str(root.resolve()), "main": main}
    origin.update(agents=specs, max_iterations=config.max_iterations, env=env_names)

    async def go() -> Any:
        from tether.cli.streaming import traced_events
        from tether.orchestrator import Orchestrator
        from tether.orchestrator.settings import config_dict
        from tether.stores import open_store

        origin["config"] = config_dict(config)
        async with open_store(url, **options) as st:
            skip = await _main_replies(st, resume_run) if resume_run else 0
            orch = Orchestrator(
                root,
                st,
                main=_main_policy(main, skip=skip),
                runners=_runners(specs, st, env_values),
                config=config,
                on_event=traced_events(_live_view(console)),
            )
            if resume_run and answer is not None:
                return await orch.answer(resume_run, answer)
            if resume_run:
                return await orch.resume(resume_run, decision=decision, note=note)
            return await orch.start(run_id or f"orch-{uuid.uuid4().hex[:8]}", task, origin=origin)

    try:
        result = _run(go)
    except ConfigError as exc:  # raised before the run starts (bad --agent/--main)
        raise typer.BadParameter(str(exc)) from None
    status = result.status.value
    question = result.state.get("pending_question") if status == "PAUSED" else None
    hint = None
    if status == "PAUSED":
        hint = f"--resume {result.run_id} --answer '...'" if question else f"--resume {result.run_id}"
        if result.report is not None and not question:
            hint = f"--resume {result.run_id} --decision {'|'.join(str(o) for o in result.report.options)}"
    if as_json:
        print_json(
            {
                "run_id": result.run_id,
                "status": status,
                "version": result.version,
                "exit_code": EXIT_FOR_STATUS.get(status, 1),
                "final_output": result.state.get("final_output"),
                "question": question,
                "report": result.report.to_dict() if result.report is not None and not question else None,
                "continue_with": f"tether orchestrate {hint}" if hint else None,
            }
        )
    else:
        _print_outcome(console, result, status, question, hint)
    if status != "COMPLETED":
        raise typer.Exit(EXIT_FOR_STATUS.get(status, 1))


def _print_outcome(console: Any, result: Any, status: str, question: Any, hint: str | None) -> None:
    colour = {"COMPLETED": "green", "PAUSED": "yellow"}.get(status, "red")
    console.print(f"[{colour}]{status}[/] {result.run_id}: {result.state.get('final_output') or ''}")
    if status == "PAUSED":
        if result.report is not None and not question:
            console.print(result.report.render(), highlight=False, markup=False)
        console.print(f"{question or 'paused'}; continue with: tether orchestrate {hint}")


def _agent_specs(items: list[str], demo: bool) -> dict[str, str]:
    """Each role's spec: its own ``--agent``, else ``*``'s, else the demo's (with --demo)."""
    own: dict[str, str] = {}
    star: str | None = None
    for item in items:
        role, sep, spec = item.partition("=")
        role = role.strip().upper()
        if not sep or not spec or (role not in ROLE_NAMES and role != "*"):
            raise typer.BadParameter(
                f"--agent {item!r}: use ROLE=SPEC with ROLE one of {', '.join(ROLE_NAMES)} or *"
            )
        kind, _, arg = spec.partition(":")
        if kind not in ("cmd", "cmdfile", "agent", "demo") or (kind.startswith("cmd") and not arg):
            raise typer.BadParameter(
                f"--agent {item!r}: use cmd:COMMAND, cmdfile:COMMAND, agent[:MODEL] or demo"
            )
        if role == "*":
            star = spec
        else:
            own[role] = spec
    specs = {r: s for r in ROLE_NAMES if (s := own.get(r) or star or ("demo" if demo else None))}
    missing = [r for r in ROLE_NAMES if r not in specs]
    if missing:
        raise typer.BadParameter(
            f"no --agent for {', '.join(missing)} (e.g. --agent '*=cmd:my-agent' or --demo)"
        )
    return specs


def _env(items: list[str]) -> tuple[dict[str, str], list[str]]:
    """``--env NAME[=VALUE]``: the values for cmd: roles (NAME alone: from this process's
    environment) and the names to record with the run (never the values)."""
    values: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not name or not (name[0].isalpha() or name[0] == "_") or not name.replace("_", "").isalnum():
            raise typer.BadParameter(f"--env {item!r}: use NAME or NAME=VALUE")
        if sep:
            values[name] = value
        elif name in os.environ:
            values[name] = os.environ[name]
        else:
            raise typer.BadParameter(f"--env {name}: not set in this environment; use --env {name}=VALUE")
    return values, sorted(values)


def _config(pairs: list[str], **given: Any) -> Any:
    from tether.orchestrator.settings import config_from

    return config_from(os.environ, pairs, **given)


async def _main_replies(store: Any, run_id: str) -> int:
    """MAIN replies a run has read already (a resumed scripted MAIN starts after them)."""
    cp = await store.load(run_id)
    return int((cp.state.get("main_replies") or 0) if cp is not None else 0)


def _runners(specs: dict[str, str], store: Any, env: dict[str, str] | None = None) -> dict[str, Any]:
    from tether.errors import ConfigError
    from tether.orchestrator import AgentRunner, CommandRunner, ScriptedRunner
    from tether.orchestrator import demo as d

    demo_roles: dict[str, Any] = {
        "TEST": d.run_tests_role,
        "DEV": d.dev_role(),
        "REVIEW": d.review_role,
        "FINISH_REVIEW": d.finish_review_role,
    }
    out: dict[str, Any] = {}
    for role, spec in specs.items():
        kind, _, arg = spec.partition(":")
        if kind == "demo":
            out[role] = ScriptedRunner({role: demo_roles[role]})
        elif kind in ("cmd", "cmdfile") and arg:
            out[role] = CommandRunner(arg, prompt_via="stdin" if kind == "cmd" else "file", env=env)
        elif kind == "agent":
            out[role] = AgentRunner(_model(arg), store)
        else:
            raise ConfigError(
                f"--agent {role}={spec}: use cmd:COMMAND, cmdfile:COMMAND, agent[:MODEL] or demo"
            )
    return out


def _model(name: str) -> Any:
    from tether.cli.streaming import traced_model
    from tether.models import LLMConfig, create_model

    return traced_model(create_model(LLMConfig.from_env(os.environ, **({"model": name} if name else {}))))


def _main_policy(spec: str, *, skip: int = 0) -> Any:
    from tether.errors import ConfigError
    from tether.models import ScriptedModel
    from tether.orchestrator import ModelMain, ScriptedMain
    from tether.orchestrator.demo import rule_main

    kind, _, arg = spec.partition(":")
    if kind == "rules":
        return ScriptedMain(rule_main)
    if kind == "model":
        return ModelMain(_model(arg))
    if kind == "script" and arg:
        replies = json.loads(Path(arg).read_text(encoding="utf-8"))
        from tether.cli.streaming import traced_model

        return ModelMain(traced_model(ScriptedModel(replies[skip:])))
    raise ConfigError(f"--main {spec!r}: use rules, model[:NAME] or script:FILE.json")


def _live_view(console: Any) -> Any:
    """One line per stage: iteration, stage, verdict, sub-loop round, prompt size and level."""

    def show(event: Any) -> None:
        if event.kind != "orchestrator":
            if event.kind == "step_failed":
                console.print(f"[red]  {event.step} failed:[/] {event.detail.get('error', '')[:200]}")
            return
        d = event.detail
        stage = d.get("stage", "?")
        parts = [f"iter {d.get('iteration', '-'):>2}", f"{stage:<13}"]
        if "next" in d:
            parts.append(f"-> {d['next']:<6}")
        if "verdict" in d:
            parts.append(f"verdict {d['verdict']}")
        if d.get("subloop_round"):
            parts.append(f"sub-loop round {d['subloop_round']}")
        if "success" in d:
            parts.append(f"success={d['success']} ({d.get('condition', '')})")
        if "accepted" in d:
            parts.append("accepted" if d["accepted"] else "rejected")
        if "prompt_size" in d:
            parts.append(f"prompt {d['prompt_size'] / 1024:.1f} KB level {d.get('level')}")
        if stage == "WARNING":  # each alert at its level
            level = str(d.get("level") or "warning")
            colour = "yellow" if level == "warning" else "cyan"
            parts = [f"[{colour}]{level}[/] {d.get('metric')}: {d.get('message')}"]
        console.print("  ".join(parts))

    return show
