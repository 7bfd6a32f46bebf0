"""``tether orchestrate``: MAIN, TEST, DEV, REVIEW and FINISH_REVIEW on a working directory.

Roles are chosen with ``--agent ROLE=SPEC`` (ROLE: TEST, DEV, REVIEW, FINISH_REVIEW or
``*`` for all):

* ``cmd:COMMAND``      an external coding agent, prompt on stdin (``{report_file}``,
  ``{prompt_file}``, ``{role}``, ``{iteration}``, ``{workdir}`` are filled in)
* ``cmdfile:COMMAND``  the same, with the prompt only in ``{prompt_file}``
* ``agent[:MODEL]``    tether's agent loop with a model (from ``TETHER_MODEL_*``)
* ``demo``             the offline demo's scripted role (TEST runs pytest, DEV fixes the sample)

``--main`` is ``rules`` (decides from the verdicts, offline), ``model[:MODEL]`` or
``script:FILE.json`` (a scripted model's replies, for rehearsals).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

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
    max_iterations: Annotated[int, typer.Option(help="MAIN rounds before the run ends FAILED.")] = 30,
    run_id: Annotated[str | None, typer.Option(help="Id of a new run (default: generated).")] = None,
    store: Annotated[
        str | None, typer.Option("--store", help="Store URL (default: TETHER_STORE_URL or SQLite).")
    ] = None,
) -> None:
    """Run MAIN and the TEST/DEV/REVIEW agents on a task, checkpointed after every stage."""
    from tether.cli.app import _console, _run, _settings
    from tether.errors import ConfigError

    console = _console()
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
    # `tether resume RUN` rebuilds the roles from this
    origin: dict[str, Any] = {"kind": "orchestrate", "workdir": str(root.resolve()), "main": main}
    origin.update(agents=specs, max_iterations=max_iterations)

    async def go() -> Any:
        from tether.orchestrator import Orchestrator, OrchestratorConfig
        from tether.stores import open_store

        async with open_store(url, **options) as st:
            orch = Orchestrator(
                root,
                st,
                main=_main_policy(main),
                runners=_runners(specs, st),
                config=OrchestratorConfig(max_iterations=max_iterations),
                on_event=_live_view(console),
            )
            if resume_run and answer is not None:
                return await orch.answer(resume_run, answer)
            if resume_run:
                return await orch.resume(resume_run)
            return await orch.start(run_id or f"orch-{uuid.uuid4().hex[:8]}", task, origin=origin)

    try:
        result = _run(go)
    except ConfigError as exc:  # raised before the run starts (bad --agent/--main)
        raise typer.BadParameter(str(exc)) from None
    status = result.status.value
    colour = {"COMPLETED": "green", "PAUSED": "yellow"}.get(status, "red")
    console.print(f"[{colour}]{status}[/] {result.run_id}: {result.state.get('final_output') or ''}")
    if status == "PAUSED":
        question = result.state.get("pending_question")
        hint = f"--resume {result.run_id} --answer '...'" if question else f"--resume {result.run_id}"
        console.print(f"{question or 'paused'}; continue with: tether orchestrate {hint}")
    if status not in ("COMPLETED", "PAUSED"):
        raise typer.Exit(3)


def _agent_specs(items: list[str], demo: bool) -> dict[str, str]:
    specs = dict.fromkeys(ROLE_NAMES, "demo") if demo else {}
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
        for r in ROLE_NAMES if role == "*" else (role,):
            specs[r] = spec
    missing = [r for r in ROLE_NAMES if r not in specs]
    if missing:
        raise typer.BadParameter(
            f"no --agent for {', '.join(missing)} (e.g. --agent '*=cmd:my-agent' or --demo)"
        )
    return specs


def _runners(specs: dict[str, str], store: Any) -> dict[str, Any]:
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
            out[role] = CommandRunner(arg, prompt_via="stdin" if kind == "cmd" else "file")
        elif kind == "agent":
            out[role] = AgentRunner(_model(arg), store)
        else:
            raise ConfigError(
                f"--agent {role}={spec}: use cmd:COMMAND, cmdfile:COMMAND, agent[:MODEL] or demo"
            )
    return out


def _model(name: str) -> Any:
    from tether.models import LLMConfig, create_model

    return create_model(LLMConfig.from_env(os.environ, **({"model": name} if name else {})))


def _main_policy(spec: str) -> Any:
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
        return ModelMain(ScriptedModel(json.loads(Path(arg).read_text(encoding="utf-8"))))
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
        if stage == "WARNING":
            parts = [f"[yellow]warning[/] {d.get('metric')}: {d.get('message')}"]
        console.print("  ".join(parts))

    return show
