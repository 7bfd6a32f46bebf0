"""``tether deploy`` and ``tether plan``: the agents from the command line, and how
``tether resume RUN`` continues their runs.

Every run records what started it in its state (``_origin``: ``kind`` deploy, plan or
workflow, plus what is needed to rebuild it), so ``tether resume RUN`` needs nothing
but the run id. Exit codes: 0 completed, 1 a usage or configuration error, 3 failed,
4 paused (waiting for ``--answer`` or ``--decision``), 5 cancelled.

``--script FILE`` runs offline on a scripted model: the file is a JSON list of the
model's replies for this invocation, one object per turn, e.g.
``[{"action": "execute", "command": "make test"}, {"action": "done", "message": "ok"}]``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from tether.cli._common import (
    EXIT_FOR_STATUS,
    JsonOpt,
    ResultJsonOpt,
    print_json,
    progress_console,
    run_async,
)
from tether.errors import ConfigError, TetherError

EXIT_FAILED = EXIT_FOR_STATUS["FAILED"]
EXIT_PAUSED = EXIT_FOR_STATUS["PAUSED"]
"""The run is PAUSED: it waits for an answer or a decision (the output says which)."""

StoreOpt = Annotated[
    str | None, typer.Option("--store", help="Store URL (default: TETHER_STORE_URL or SQLite).")
]
ScriptOpt = Annotated[
    str | None,
    typer.Option(
        help="Offline: a JSON file with the scripted model's replies for this invocation, "
        '[{"action": "execute", "command": "..."}, {"action": "done", "message": "..."}].'
    ),
]
AnswerOpt = Annotated[str | None, typer.Option(help="Answer to the question a paused run waits on.")]
DecisionOpt = Annotated[
    str | None, typer.Option(help="Decide on the failure a paused run waits on: retry, skip or abort.")
]


def _settings(store: str | None) -> tuple[str, dict[str, Any]]:
    from tether.cli._common import settings

    return settings(store)


def _run(fn: Callable[[], Any]) -> Any:
    return run_async(fn)


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False)


def _check_decision(decision: str | None) -> None:
    if decision is not None and decision not in {"retry", "skip", "abort", "replan", "takeover"}:
        raise typer.BadParameter("--decision must be retry, skip, replan, takeover or abort")


def _replies(script: str | None) -> list[Any] | None:
    if script is None:
        return None
    try:
        data = json.loads(Path(script).read_text(encoding="utf-8"))
    except OSError as exc:
        raise typer.BadParameter(f"--script: cannot read {script}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--script: {script} is not JSON: {exc}") from None
    if not isinstance(data, list):
        raise typer.BadParameter(
            '--script must hold a JSON list of replies, e.g. [{"action": "done", "message": "ok"}]'
        )
    return data


def _model(
    replies: list[Any] | None, spec: dict[str, Any] | None, model: str | None = None
) -> tuple[Any, Any]:
    """The chat model and the LLMConfig it came from: scripted when replies are given,
    else built from ``spec`` (a run's recorded config) and the TETHER_MODEL* variables."""
    from tether.cli.streaming import traced_model
    from tether.models import LLMConfig, ScriptedModel, create_model

    if replies is not None:
        name = (spec or {}).get("model") if (spec or {}).get("provider") == "scripted" else None
        return traced_model(ScriptedModel(replies, model=name or "scripted")), None
    if spec is not None and spec.get("provider") == "scripted":
        raise ConfigError("this run used a scripted model: pass --script FILE with the next replies")
    wanted = {k: spec.get(k) for k in ("provider", "model", "endpoint", "temperature")} if spec else {}
    if model:
        wanted["model"] = model
    cfg = LLMConfig.from_env(os.environ, **wanted)
    return traced_model(create_model(cfg)), cfg


def _spec(chat: Any, cfg: Any) -> dict[str, Any]:
    if cfg is not None:
        public: dict[str, Any] = cfg.public_dict()
        return public
    return {"provider": "scripted", "model": chat.model}


def _handler() -> Any:
    """Ask on the terminal; with stdin not a terminal a question pauses the run instead."""
    if not sys.stdin.isatty():
        return None
    from tether.agent.interaction import CLIInteractionHandler

    return CLIInteractionHandler()


def _printer(console: Any) -> Any:
    """The live view: one line per iteration, command and result."""
    from tether.cli.streaming import DeltaPrinter, ModelActivity, run_tracer

    streamed = DeltaPrinter(console)  # the model's reply as it is written (terminals only)
    waiting = ModelActivity(console)  # a spinner and the seconds while the model thinks
    traced = run_tracer()  # spans when OTEL_TRACES_EXPORTER asks for them

    def show(event: Any) -> None:
        if traced is not None:
            traced.on_event(event)
        waiting(event)
        if streamed(event):
            return
        d = event.detail
        if event.kind == "step_started":
            console.print(f"[bold]{event.step}[/]")
        elif event.kind == "command":
            console.print(f"  $ {d.get('command')}", highlight=False, markup=False)
        elif event.kind == "command_result":
            mark = "[green]ok[/]" if d.get("exit_code") == 0 else f"[red]exit {d.get('exit_code')}[/]"
            console.print(f"    {mark} {d.get('tail', '')}", highlight=False)
        elif event.kind in ("step_failed", "finish_requested"):
            console.print(f"  {event.kind}: {d}", highlight=False, markup=False)
        elif event.kind.startswith("context_"):
            console.print(f"  [cyan]{_context_line(event.kind, d)}[/]", highlight=False)

    return show


def _context_line(kind: str, d: dict[str, Any]) -> str:
    """One line for a context event: the warning, a compression, an overflow."""
    if kind == "context_compressed":
        return (
            f"context: {d.get('level')} compression {d.get('before_tokens')} -> {d.get('after_tokens')} "
            f"tokens, {d.get('folded')} items folded ({d.get('reason')})"
        )
    return f"context: {kind.removeprefix('context_')} {d.get('reason') or ''}".rstrip()


# == deploy ===========================================================================
def deploy(
    repo: Annotated[str, typer.Argument(help="Local path or git URL of the project to deploy.")],
    host: Annotated[
        str | None, typer.Option(help="user@host[:port] to deploy over SSH (default: this machine).")
    ] = None,
    key: Annotated[str | None, typer.Option(help="SSH private key file.")] = None,
    deploy_dir: Annotated[
        str | None, typer.Option("--dir", help="Where to deploy (default: the repo path).")
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Model name (provider from TETHER_MODEL_PROVIDER).")
    ] = None,
    script: ScriptOpt = None,
    resume_run: Annotated[str | None, typer.Option("--resume", help="Continue this run id.")] = None,
    answer: AnswerOpt = None,
    decision: DecisionOpt = None,
    run_id: Annotated[str | None, typer.Option(help="Run id (default: generated).")] = None,
    max_iterations: int = 30,
    store: StoreOpt = None,
    log_dir: str = "./agent_logs",
    safety: Annotated[
        str,
        typer.Option(
            help="sandboxed: each command in a bubblewrap sandbox, host changes asked first; "
            "ask: no sandbox, anything not plainly safe asked; trusted: no sandbox (dangerous)."
        ),
    ] = "sandboxed",
    as_json: ResultJsonOpt = False,
) -> None:
    """Deploy a project with the agent, checkpointed every iteration.

    A question from the agent is asked on the terminal; without one (stdin not a
    terminal) the run pauses and `tether resume RUN --answer TEXT` answers it.
    """
    _check_decision(decision)
    if safety not in ("sandboxed", "ask", "trusted"):
        raise typer.BadParameter("--safety must be sandboxed, ask or trusted")
    if resume_run:
        resume_run_id(
            resume_run, store=store, script=script, answer=answer, decision=decision, as_json=as_json
        )
        return
    replies = _replies(script)
    target_dir = deploy_dir or (repo if Path(repo).exists() else ".")
    origin = {
        "kind": "deploy",
        "safety": safety,
        "repo": repo,
        "deploy_dir": target_dir,
        "host": host,
        "key": key,
        "max_iterations": max_iterations,
        "log_dir": log_dir,
    }
    rid = run_id or f"deploy-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10_000:04d}"
    _deploy_run(origin, store=store, replies=replies, model=model, start=rid, as_json=as_json)


def _deploy_run(
    origin: dict[str, Any],
    *,
    store: str | None,
    replies: list[Any] | None,
    model: str | None = None,
    start: str | None = None,
    resume: str | None = None,
    answer: str | None = None,
    decision: str | None = None,
    as_json: bool = False,
) -> None:
    url, options = _settings(store)
    console = progress_console() if as_json else _console()

    async def go() -> Any:
        from tether.agent.deploy import AsyncDeploymentAgent
        from tether.stores import open_store
        from tether.tools import CommandPolicy, LocalSession, SSHCredentials, SSHSession
        from tether.tools.redact import default_redactor
        from tether.tools.sandbox import Sandbox

        chat, cfg = _model(replies, origin.get("model"), model)
        origin["model"] = _spec(chat, cfg)
        safety = origin.get("safety") or "sandboxed"
        redactor = default_redactor()  # the environment's secrets, shared with the log sink
        if origin.get("host"):
            creds = SSHCredentials.from_target(origin["host"])
            if origin.get("key"):
                creds = SSHCredentials(
                    host=creds.host, port=creds.port, username=creds.username, key_path=origin["key"]
                )
            session: Any = SSHSession(creds, redact=redactor)
            mode = "ask" if safety == "sandboxed" else safety  # the remote host has no sandbox of ours
        else:
            sandbox = Sandbox.detect() if safety == "sandboxed" else None
            mode = "ask" if safety == "sandboxed" and sandbox is None else safety
            session = LocalSession(cwd=origin["deploy_dir"], sandbox=sandbox, redact=redactor)
        if mode != safety:
            console.print(
                f"[yellow]no sandbox for this target (install bubblewrap locally): using the {mode} mode[/]"
            )
        elif mode == "trusted":
            console.print("[red]trusted mode: commands run unsandboxed; only risky ones are asked[/]")
        try:
            async with open_store(url, **options) as st, session:
                agent = AsyncDeploymentAgent(
                    chat,
                    st,
                    llm_config=cfg,
                    max_iterations=int(origin.get("max_iterations") or 30),
                    log_dir=origin.get("log_dir") or "./agent_logs",
                    policy=CommandPolicy(mode=mode),  # type: ignore[arg-type]  # checked in deploy()
                    redact=redactor,
                    interaction_handler=_handler(),
                    on_event=_printer(console),
                )
                if resume is not None:
                    result = await agent.resume(resume, session=session, answer=answer, decision=decision)
                else:
                    kwargs = {
                        "session": session,
                        "deploy_dir": origin["deploy_dir"],
                        "run_id": start,
                        "origin": origin,
                    }
                    if origin.get("host"):
                        result = await agent.deploy(origin["repo"], target=origin["host"], **kwargs)
                    else:
                        result = await agent.deploy_local(origin["repo"], **kwargs)
                return result, await _pending_approval(st, result.run_id, str(result.status))
        finally:
            if hasattr(chat, "aclose"):
                await chat.aclose()

    result, approval = _run(go)
    if as_json:
        print_json(
            _agent_json(
                result.run_id,
                str(result.status),
                result.message,
                result.pending_question,
                result.pending_decision,
                approval,
                log_file=str(Path(result.log_file).resolve()),
            )
        )
        _exit(str(result.status))
    _report(
        console,
        result.run_id,
        str(result.status),
        result.message,
        result.pending_question,
        result.pending_decision,
        approval=approval,
    )
    console.print(f"run log: {result.log_file}")
    _exit(str(result.status))


def _agent_json(
    run_id: str,
    status: str,
    message: str,
    question: Any,
    decision: Any,
    approval: dict[str, Any] | None,
    *,
    log_file: str | None,
) -> dict[str, Any]:
    """An agent command's ``--json`` result: the same facts as :func:`_report`'s lines."""
    if status != "PAUSED":
        waits, continue_with = None, None
    elif approval:
        waits, continue_with = "approval", f"tether approve {run_id} [--deny], then tether resume {run_id}"
    elif question:
        waits, continue_with = "answer", f"tether resume {run_id} --answer ANSWER"
    elif decision:
        options = [str(o) for o in (decision.get("options") or []) if str(o) != "takeover"] or ["abort"]
        waits, continue_with = "decision", f"tether resume {run_id} --decision {'|'.join(options)}"
    else:
        waits, continue_with = None, f"tether resume {run_id}"
    return {
        "run_id": run_id,
        "status": status,
        "exit_code": EXIT_FOR_STATUS.get(status, 1),
        "message": message,
        "waits_for": waits,
        "question": question,
        "report": decision if waits == "decision" else None,
        "approval": approval,
        "continue_with": continue_with,
        "log_file": log_file,
    }


def _report(
    console: Any,
    run_id: str,
    status: str,
    message: str,
    question: Any,
    decision: Any,
    *,
    approval: dict[str, Any] | None = None,
) -> None:
    """The last lines of an agent command: how the run ended and what to run next."""
    from rich.markup import escape

    rid = escape(run_id)  # user data: never read as markup

    if status == "PAUSED" and approval:
        console.print(f"[yellow]PAUSED[/] {rid}: a command waits for your approval:")
        console.print(f"  $ {approval.get('command', '')}", highlight=False, markup=False)
        console.print(f"  why: {approval.get('reason', '')}", highlight=False, markup=False)
        console.print(f"  approve with: tether approve {rid} (or --deny), then: tether resume {rid}")
        return

    if status == "COMPLETED":
        console.print(f"[green]COMPLETED[/] {rid}: {escape(message)}")
    elif status == "PAUSED" and question:
        options = question.get("options") or []
        console.print(f"[yellow]PAUSED[/] {rid}: the agent asks: {escape(str(question.get('question')))}")
        if options:
            console.print(f"  options: {escape(', '.join(map(str, options)))}")
        console.print(f"  answer it with: tether resume {rid} --answer <your answer>")
    elif status == "PAUSED" and decision:
        from tether.runtime import FailureReport

        console.print(f"[yellow]PAUSED[/] {rid} after a failure:")
        report = FailureReport.from_dict(decision)
        console.print(report.render(), highlight=False, markup=False)
        choices = "|".join(str(o) for o in report.options if str(o) != "takeover") or "abort"
        console.print(f"  continue with: tether resume {rid} --decision {choices}")
        if "takeover" in {str(o) for o in report.options}:
            console.print(
                f"  or, if you did it by hand: tether decide {rid} takeover --note '<what you did>'"
            )
    elif status == "PAUSED":
        console.print(f"[yellow]PAUSED[/] {rid}: {escape(message or 'paused')}")
        console.print(f"  continue with: tether resume {rid}")
    else:
        console.print(f"[red]{status}[/] {rid}: {escape(message or 'no message')}")


def _exit(status: str) -> None:
    code = EXIT_FOR_STATUS.get(status, 1)
    if code:
        raise typer.Exit(code)


# == plan =============================================================================
def plan(
    plan_file: Annotated[
        str,
        typer.Argument(
            help='A JSON plan: {"project_name", "deploy_dir", "strategy", "steps": '
            '[{"name", "goal", "category", "success_criteria"}]}.'
        ),
    ],
    deploy_dir: Annotated[
        str | None, typer.Option("--dir", help="Where the commands run (default: the plan's deploy_dir).")
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Model name (provider from TETHER_MODEL_PROVIDER).")
    ] = None,
    script: ScriptOpt = None,
    run_id: Annotated[str | None, typer.Option(help="Run id (default: generated).")] = None,
    max_iterations: Annotated[int, typer.Option(help="Agent turns per plan step.")] = 30,
    store: StoreOpt = None,
    log_dir: str = "./agent_logs",
    replan_after_steps: Annotated[
        bool,
        typer.Option(
            "--replan-after-steps",
            help="After every step, let the model revise the steps left (one model call per step).",
        ),
    ] = False,
    as_json: ResultJsonOpt = False,
) -> None:
    """Run a plan of steps with the agent; each step sees the rolling summary.

    The plan log goes to LOG_DIR/RUN.json. A failed step pauses the plan:
    `tether resume RUN --decision retry|skip|replan|abort` (replan: the model revises the
    failed step and those after it; with --script, its reply comes first in the file).
    """
    try:
        spec = json.loads(Path(plan_file).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise typer.BadParameter(f"cannot read the plan {plan_file}: {exc}") from None
    _plan_steps(spec)
    origin = {
        "kind": "plan",
        "plan": spec,
        "deploy_dir": deploy_dir or spec.get("deploy_dir") or ".",
        "max_iterations": max_iterations,
        "log_dir": log_dir,
        "replan_after_steps": replan_after_steps,
    }
    rid = run_id or f"plan-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10_000:04d}"
    _plan_run(origin, store=store, replies=_replies(script), model=model, start=rid, as_json=as_json)


def _plan_steps(spec: Any) -> list[Any]:
    from tether.agent.plan import PlanStep

    if not isinstance(spec, dict) or not isinstance(spec.get("steps"), list) or not spec["steps"]:
        raise typer.BadParameter('the plan must be a JSON object with a non-empty "steps" list')
    steps = []
    for i, s in enumerate(spec["steps"], 1):
        if not isinstance(s, dict) or not s.get("name") or not s.get("goal"):
            raise typer.BadParameter(f'plan step {i} needs a "name" and a "goal"')
        steps.append(
            PlanStep(
                name=str(s["name"]),
                goal=str(s["goal"]),
                category=str(s.get("category") or "general"),
                success_criteria=str(s.get("success_criteria") or ""),
            )
        )
    return steps


def _plan_run(
    origin: dict[str, Any],
    *,
    store: str | None,
    replies: list[Any] | None,
    model: str | None = None,
    start: str | None = None,
    resume: str | None = None,
    answer: str | None = None,
    decision: str | None = None,
    as_json: bool = False,
) -> None:
    url, options = _settings(store)
    console = progress_console() if as_json else _console()
    spec = origin["plan"]
    steps = _plan_steps(spec)

    async def go() -> Any:
        from tether.agent.loop import AgentLoop, LoopConfig
        from tether.agent.plan import PlanOrchestrator
        from tether.agent.replan import ModelReplanner
        from tether.stores import open_store
        from tether.tools import CommandPolicy, LocalSession
        from tether.tools.redact import default_redactor

        chat, cfg = _model(replies, origin.get("model"), model)
        origin["model"] = _spec(chat, cfg)
        session = LocalSession(cwd=origin["deploy_dir"])
        redactor, handler, printer = default_redactor(), _handler(), _printer(console)
        try:
            async with open_store(url, **options) as st:
                orchestrator = PlanOrchestrator(
                    store=st,
                    steps=steps,
                    loop_factory=lambda config: AgentLoop(
                        chat,
                        session,
                        st,
                        config=config,
                        policy=CommandPolicy(),
                        redact=redactor,
                        interaction=handler,
                        on_event=printer,
                    ),  # fmt: skip
                    project_name=str(spec.get("project_name") or ""),
                    deploy_dir=str(spec.get("deploy_dir") or origin["deploy_dir"]),
                    strategy=str(spec.get("strategy") or ""),
                    base_config=LoopConfig(max_iterations=int(origin.get("max_iterations") or 30)),
                    log_dir=origin.get("log_dir") or "./agent_logs",
                    on_event=printer,
                    replanner=ModelReplanner(chat, after_steps=bool(origin.get("replan_after_steps"))),
                )
                if resume is None:
                    result = await orchestrator.start(str(start), origin=origin)
                else:
                    choice = decision
                    if answer is not None:
                        choice = await _answer_nested(st, resume, len(steps), answer)
                    result = await orchestrator.resume(resume, decision=choice)
                question = (
                    await _nested_question(st, result.run_id, len(steps))
                    if str(result.status) == "PAUSED"
                    else None
                )
                approval = await _pending_approval(st, result.run_id, str(result.status))
                return result, question, orchestrator.current_log_file, approval
        finally:
            if hasattr(chat, "aclose"):
                await chat.aclose()

    from tether.state.reserved import runtime_get

    result, question, log_file, approval = _run(go)
    pending = runtime_get(result.state, "pending_decision") if str(result.status) == "PAUSED" else None
    if as_json:
        message = str(result.state.get("final_output") or "")
        found = None if question else pending
        log = None if log_file is None else str(Path(log_file).resolve())
        print_json(
            _agent_json(result.run_id, str(result.status), message, question, found, approval, log_file=log)
        )
        _exit(str(result.status))
    _report(
        console,
        result.run_id,
        str(result.status),
        str(result.state.get("final_output") or ""),
        question,
        None if question else pending,
        approval=approval,
    )
    if log_file is not None:
        console.print(f"plan log: {log_file}")
    _exit(str(result.status))


async def _nested_runs(store: Any, run_id: str, count: int) -> list[str]:
    """The nested runs of a plan's steps, those of its revisions included."""
    from tether.agent.plan import attempt_runs, nested_run_ids

    outer = await store.load(run_id)
    runs = []
    for nested in nested_run_ids(outer.state if outer is not None else {}, run_id, count):
        runs += await attempt_runs(store, nested)
    return runs


async def _nested_question(store: Any, run_id: str, count: int) -> dict[str, Any] | None:
    """The question a plan step's agent paused on, if that is why the plan paused."""
    for nested in await _nested_runs(store, run_id, count):
        cp = await store.load(nested)
        if cp is not None and cp.state.get("pending_question"):
            question: dict[str, Any] = cp.state["pending_question"]
            return question
    return None


async def _answer_nested(store: Any, run_id: str, count: int, answer: str) -> str | None:
    """Give ``answer`` to the plan step waiting on a question; the step then runs again."""
    for nested in await _nested_runs(store, run_id, count):
        cp = await store.load(nested)
        if cp is not None and cp.state.get("pending_question"):
            await store.update_state(nested, {"answer": answer})
            return "retry"
    raise ConfigError(f"run {run_id!r} is not waiting on a question: continue it with --decision")


async def _pending_approval(store: Any, run_id: str, status: str) -> dict[str, Any] | None:
    """What a PAUSED run (or its plan step) waits on an approval for, if it does."""
    if status != "PAUSED":
        return None
    from tether.agent.approvals import find_pending_approval

    found = await find_pending_approval(store, run_id)
    return found[1] if found is not None else None


# == approve ==========================================================================
def approve(
    run_id: Annotated[str, typer.Argument(help="The paused run (a deploy, or a plan: its step is found).")],
    deny: Annotated[bool, typer.Option("--deny", help="Refuse the command instead.")] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Approve (or --deny) the command a paused agent run waits on.

    The decision is stored in the run's checkpoint and the run stays PAUSED: `tether
    resume RUN` continues it. Approved, the command runs when the agent proposes it again
    (and is not asked again in that run); denied, the agent is told and adapts.
    """
    from tether.cli._common import on_store

    async def go(st: Any) -> tuple[str, dict[str, Any]]:
        from tether.agent.approvals import decide_approval

        return await decide_approval(st, run_id, approved=not deny)

    waiting, pending = on_store(store, go)
    if as_json:
        print_json(
            {
                "run_id": run_id,
                "waiting_run_id": waiting,
                "approved": not deny,
                "command": pending.get("command"),
                "continue_with": f"tether resume {run_id}",
            }
        )
        return
    from rich.markup import escape

    console = _console()
    word = "[red]denied[/]" if deny else "[green]approved[/]"
    where = "" if waiting == run_id else f" (plan step {escape(waiting)})"
    console.print(f"{word}{where}: {escape(str(pending.get('command', '')))}")
    console.print(f"  continue with: tether resume {escape(run_id)}")


# == decide ===========================================================================
def decide(
    run_id: Annotated[str, typer.Argument(help="The paused run (a deploy, a plan or an orchestrate run).")],
    decision: Annotated[str, typer.Argument(help="retry, skip, replan, takeover or abort.")],
    note: Annotated[
        str | None,
        typer.Option(help="What you did by hand (required for takeover); kept in the run's log."),
    ] = None,
    store: StoreOpt = None,
    script: ScriptOpt = None,
    as_json: ResultJsonOpt = False,
) -> None:
    """Decide on the failure report a paused run waits on, then continue it.

    `takeover` says you did the failed step (or the command a crash cut) by hand: the step
    counts as done, your --note is recorded in the run's event log and history, and the
    agent reads it as the step's result. The report's own suggestions name the decision
    each applies (`tether status RUN` shows them).
    """
    _check_decision(decision)
    if decision == "takeover" and not (note or "").strip():
        raise typer.BadParameter("takeover needs --note: what did you do by hand?")
    if note:
        from tether.cli._common import on_store

        async def record(st: Any) -> bool:
            from tether.runtime.control import amend_pending_report

            return await amend_pending_report(st, run_id, note=note)

        if not on_store(store, record):
            raise typer.BadParameter(f"run {run_id!r} is not paused on a failure report: nothing to decide")
    resume_run_id(run_id, store=store, script=script, decision=decision, as_json=as_json)


# == resume ===========================================================================
def resume_run_id(
    run_id: str,
    *,
    store: str | None,
    script: str | None = None,
    answer: str | None = None,
    decision: str | None = None,
    force: bool = False,
    plain: bool = False,
    as_json: bool = False,
) -> None:
    """Continue any run from its recorded origin (deploy, plan, orchestrate or workflow)."""
    url, options = _settings(store)

    async def load() -> dict[str, Any]:
        from tether.stores import open_store

        async with open_store(url, **options) as st:
            cp = await st.load(run_id)
        if cp is None:
            raise TetherError(f"run {run_id!r} not found in {url}: check the id with `tether runs`")
        origin = cp.state.get("_origin")
        parent, _, step = run_id.rpartition(".")
        if not isinstance(origin, dict) and parent and re.fullmatch(r"\d+(r\d+)?(-\d+)?", step):
            async with open_store(url, **options) as st:
                outer = await st.load(parent)
            if outer is not None and (outer.state.get("_origin") or {}).get("kind") == "plan":
                raise ConfigError(
                    f"{run_id!r} is step {step} of the plan {parent!r}: `tether resume {parent}`"
                )
        if not isinstance(origin, dict) or "kind" not in origin:
            raise ConfigError(
                f"run {run_id!r} does not record what started it: "
                f"pass its workflow, `tether resume module:workflow {run_id}`"
            )
        return origin

    origin = _run(load)
    kind = origin["kind"]
    if kind == "deploy":
        _deploy_run(
            origin,
            store=store,
            replies=_replies(script),
            resume=run_id,
            answer=answer,
            decision=decision,
            as_json=as_json,
        )
    elif kind == "plan":
        _plan_run(
            origin,
            store=store,
            replies=_replies(script),
            resume=run_id,
            answer=answer,
            decision=decision,
            as_json=as_json,
        )
    elif kind == "orchestrate":
        if script is not None:
            raise typer.BadParameter("an orchestrate run takes --answer or --decision, not --script")
        from tether.cli.orchestrate import orchestrate

        orchestrate(
            workdir=str(origin["workdir"]),
            resume_run=run_id,
            main=str(origin.get("main", "rules")),
            agent=[f"{role}={spec}" for role, spec in dict(origin.get("agents") or {}).items()],
            answer=answer,
            decision=decision,
            max_iterations=int(origin.get("max_iterations", 30)),
            setting=[f"{k}={json.dumps(v)}" for k, v in dict(origin.get("config") or {}).items()],
            env=list(origin.get("env") or []),
            store=store,
            as_json=as_json,
        )
    elif kind == "workflow":
        if answer is not None or script is not None:
            raise typer.BadParameter("--answer and --script are for agent runs; a workflow takes --decision")
        from tether.cli.app import resume_workflow

        resume_workflow(
            str(origin["workflow"]),
            run_id,
            store=store,
            decision=decision,
            force=force,
            plain=plain,
            as_json=as_json,
        )
    else:
        raise typer.BadParameter(f"run {run_id!r} was started by an unknown kind {kind!r}")
