"""The agents tether ships, as named workflows a worker runs from a submission's input.

* ``deploy``: the deployment agent on this machine. Input: ``repo`` (a local path),
  ``deploy_dir`` (default: the repo), ``model``, ``max_iterations`` (30), ``safety``
  (``ask``: a command not plainly safe pauses the run for an approval; ``trusted``).
  Its first step analyses the repository and the host (what ``tether deploy`` does
  before its loop starts), so the analysis happens on the worker that runs it.
* ``plan``: the plan orchestrator. Input: ``plan`` (the JSON of ``tether plan``:
  ``{"project_name", "deploy_dir", "strategy", "steps": [{"name", "goal", ...}]}``),
  ``deploy_dir``, ``model``, ``max_iterations``.
* ``orchestrate``: the multi-agent orchestrator on ``workdir`` with ``task``. ``main``:
  ``"rules"`` (the default) or ``{"script": [replies]}``; ``roles``: a mapping of TEST,
  DEV, REVIEW, FINISH_REVIEW (or ``*``) to ``"agent"`` (tether's agent loop on the run's
  model) or ``"demo"`` (the offline demo's roles). External command roles are not
  offered here: a submission must not choose what a worker executes.
* ``orchestrate-demo``: the orchestrator with MAIN by rules and the offline demo roles.

``model`` is ``{"provider": "scripted", "replies": [...]}`` (tests and rehearsals: a
resumed deploy run continues at the reply it had reached, counted from its prompt
records), or ``{"provider", "model", "endpoint", "temperature"}`` built by the
registry's model factory (``tether worker`` configures it from ``TETHER_MODEL_*``).
Without one the agents use the worker's configured model.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.errors import ConfigError
from tether.runtime import Runner, RunResult, Step, StepContext, Workflow
from tether.state import RunStatus
from tether.stores.base import CheckpointStore
from tether.workers.registry import Entry

if TYPE_CHECKING:
    from tether.agent.loop import AgentLoop

__all__ = ["ModelFactory", "bundled_entries"]

ModelFactory = Callable[[Mapping[str, Any]], Any]
"""Builds a chat model from a run's ``model`` spec (a real provider; scripted is built here)."""

ROLES = ("TEST", "DEV", "REVIEW", "FINISH_REVIEW")


def bundled_entries(model: ModelFactory | None) -> list[Entry]:
    """The bundled workflows, their models made by ``model`` (None: scripted only)."""
    return [_deploy(model), _plan(model), _orchestrate(model), _orchestrate_demo()]


def _model(spec: Any, factory: ModelFactory | None, *, done: int = 0) -> Any:
    """The chat model a run names; a scripted one starts after the ``done`` replies."""
    from tether.models import ScriptedModel

    spec = dict(spec or {})
    if spec.get("provider") == "scripted":
        replies = spec.get("replies")
        if not isinstance(replies, list):
            raise ConfigError('a scripted model needs "replies": a list of the model\'s replies')
        return ScriptedModel(replies[done:], model=str(spec.get("model") or "scripted"))
    if factory is None:
        raise ConfigError(
            "this worker has no model configured: set TETHER_MODEL_PROVIDER / TETHER_MODEL (and the "
            'API key) where it runs, or submit with {"model": {"provider": "scripted", "replies": [...]}}'
        )
    return factory(spec)


def _text(inputs: Mapping[str, Any], key: str, workflow: str, example: str) -> str:
    value = inputs.get(key)
    if not isinstance(value, str) or not value:
        raise ConfigError(f'{workflow} needs {{"{key}": {example}}} in its input')
    return value


def _policy(safety: Any) -> Any:
    from tether.tools import CommandPolicy

    if safety not in (None, "ask", "trusted"):
        raise ConfigError(f'"safety" must be "ask" or "trusted", not {safety!r}')
    return CommandPolicy(mode=safety or "ask")


# == deploy =============================================================================
def _deploy(factory: ModelFactory | None) -> Entry:
    def prepare(inputs: Mapping[str, Any]) -> dict[str, Any]:
        repo = _text(inputs, "repo", "deploy", '"/path/of/the/project"')
        _policy(inputs.get("safety"))
        return {**inputs, "deploy_dir": str(inputs.get("deploy_dir") or repo)}

    def runner(store: CheckpointStore, state: Mapping[str, Any]) -> Runner:
        return parts(store, state)[1]

    async def settle(
        store: CheckpointStore, state: Mapping[str, Any], runner: Runner, result: RunResult
    ) -> RunResult:
        """What ``tether resume`` does for a deployment, here on the worker: a command the
        previous holder's crash cut is probed, and the run continues (under this worker's
        runner) when the probe tells whether the command ran; else it waits for a person."""
        if result.status is not RunStatus.PAUSED:
            return result
        from tether.agent.effects import settle_cut

        return await settle_cut(parts(store, state)[0], result, resume=runner.resume)

    def parts(store: CheckpointStore, state: Mapping[str, Any]) -> tuple[AgentLoop, Runner]:
        """A run's agent loop (its model, session and command policy) and its runner."""
        from tether.agent.config import LoopConfig, loop_reducers
        from tether.agent.deploy import model_info
        from tether.agent.loop import AgentLoop
        from tether.agent.prompt import new_window
        from tether.agent.repo import analyze_repo
        from tether.tools import LocalSession

        repo, deploy_dir = str(state.get("repo")), str(state.get("deploy_dir"))
        model = _model(state.get("model"), factory, done=len(state.get("prompt_log") or ()))
        session = LocalSession(cwd=deploy_dir)
        config = LoopConfig(max_iterations=int(state.get("max_iterations") or 30))
        loop = AgentLoop(model, session, store, config=config, policy=_policy(state.get("safety")))

        async def analyse(sc: StepContext) -> dict[str, Any]:
            """What the deployment agent does before its loop: the repository and the host
            in the prompt, the goal pinned."""
            ctx = await analyze_repo(repo)
            facts = await session.host_facts()
            blocks = {"repository": ctx.to_prompt(), "host": facts.to_prompt()}
            goal = (
                f"Deploy the repository {repo} into {deploy_dir} on localhost. Strategy preference: "
                f"{ctx.suggested_strategy} (Docker Compose > Docker > traditional). "
                "Verify it runs before saying done."
            )
            window = new_window(dataclasses.replace(config, blocks=blocks), goal, loop.redact)
            header = {
                "repo_url": repo,
                "target": "localhost",
                "deploy_dir": deploy_dir,
                "start_time": dt.datetime.now(dt.UTC).isoformat(),
                "config": {**model_info(model), "max_iterations": config.max_iterations},
                "context": {"project_type": ctx.project_type, "framework": ctx.framework},
            }
            return {
                "goal": goal,
                "invalid_replies": 0,
                "log_header": header,
                "context_meta": window.meta_state(),
                "context_log": window.take_journal(),
            }

        inner = loop.workflow()
        workflow = Workflow(
            [Step(id="analyse", name="Analyse", fn=analyse, phase="setup"), *inner.steps],
            name="deploy",
            max_routed=inner.max_routed,
        )
        return loop, Runner(workflow, store, reducers=loop_reducers())

    return Entry(name="deploy", factory=runner, prepare=prepare, settle=settle)


# == plan ===============================================================================
def _plan_steps(spec: Any) -> list[Any]:
    from tether.agent.plan import PlanStep

    if not isinstance(spec, Mapping) or not isinstance(spec.get("steps"), list) or not spec["steps"]:
        raise ConfigError('plan needs {"plan": {"steps": [{"name": ..., "goal": ...}, ...]}} in its input')
    steps = []
    for i, s in enumerate(spec["steps"], 1):
        if not isinstance(s, Mapping) or not s.get("name") or not s.get("goal"):
            raise ConfigError(f'plan step {i} needs a "name" and a "goal"')
        steps.append(
            PlanStep(
                name=str(s["name"]),
                goal=str(s["goal"]),
                category=str(s.get("category") or "general"),
                success_criteria=str(s.get("success_criteria") or ""),
            )
        )
    return steps


def _plan(factory: ModelFactory | None) -> Entry:
    def prepare(inputs: Mapping[str, Any]) -> dict[str, Any]:
        from tether.context.summaries import SummaryManager

        spec = inputs.get("plan")
        _plan_steps(spec)
        assert isinstance(spec, Mapping)
        deploy_dir = str(inputs.get("deploy_dir") or spec.get("deploy_dir") or ".")
        manager = SummaryManager(
            str(spec.get("project_name") or ""), deploy_dir, str(spec.get("strategy") or "")
        )
        started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        return {
            **inputs,
            "deploy_dir": deploy_dir,
            "execution_summary": manager.to_state(),
            "started_at": started,
        }

    def runner(store: CheckpointStore, state: Mapping[str, Any]) -> Runner:
        from tether.agent.config import LoopConfig
        from tether.agent.loop import AgentLoop
        from tether.agent.plan import PlanOrchestrator
        from tether.tools import CommandPolicy, LocalSession

        spec = state.get("plan") or {}
        model = _model(state.get("model"), factory)
        deploy_dir = str(state.get("deploy_dir") or ".")
        session = LocalSession(cwd=deploy_dir)
        orchestrator = PlanOrchestrator(
            store=store,
            steps=_plan_steps(spec),
            loop_factory=lambda config: AgentLoop(
                model, session, store, config=config, policy=CommandPolicy()
            ),
            project_name=str(spec.get("project_name") or ""),
            deploy_dir=deploy_dir,
            strategy=str(spec.get("strategy") or ""),
            base_config=LoopConfig(max_iterations=int(state.get("max_iterations") or 30)),
            log_dir=None,
        )
        return orchestrator.runner()

    return Entry(name="plan", factory=runner, prepare=prepare)


# == the multi-agent orchestrator =======================================================
def _orchestrate(factory: ModelFactory | None) -> Entry:
    def prepare(inputs: Mapping[str, Any]) -> dict[str, Any]:
        from tether.orchestrator.engine import initial_state

        workdir = _text(inputs, "workdir", "orchestrate", '"/path/of/the/project"')
        task = _text(inputs, "task", "orchestrate", '"what the agents should achieve"')
        _roles(inputs.get("roles"))
        kept = {k: inputs[k] for k in ("main", "roles", "model") if k in inputs}
        return {**initial_state(task, workdir=workdir), **kept}

    def runner(store: CheckpointStore, state: Mapping[str, Any]) -> Runner:
        from tether.orchestrator import AgentRunner, ModelMain, Orchestrator, ScriptedMain, ScriptedRunner
        from tether.orchestrator import demo as d

        demo_roles: dict[str, Any] = {
            "TEST": d.run_tests_role,
            "DEV": d.dev_role(),
            "REVIEW": d.review_role,
            "FINISH_REVIEW": d.finish_review_role,
        }
        runners: dict[str, Any] = {}
        for role, kind in _roles(state.get("roles")).items():
            if kind == "demo":
                runners[role] = ScriptedRunner({role: demo_roles[role]})
            else:
                runners[role] = AgentRunner(_model(state.get("model"), factory), store)
        main_spec = state.get("main") or "rules"
        if main_spec == "rules":
            main: Any = ScriptedMain(d.rule_main)
        elif isinstance(main_spec, Mapping) and isinstance(main_spec.get("script"), list):
            done = int(state.get("main_replies") or 0)  # a resumed MAIN continues its script
            main = ModelMain(
                _model({"provider": "scripted", "replies": main_spec["script"]}, None, done=done)
            )
        else:
            raise ConfigError('"main" must be "rules" or {"script": [MAIN\'s replies]}')
        root = Path(str(state.get("workdir") or "."))
        return Orchestrator(root, store, main=main, runners=runners).runner()

    return Entry(name="orchestrate", factory=runner, prepare=prepare)


def _roles(spec: Any) -> dict[str, str]:
    """Every role's kind, from ``{"ROLE" or "*": "agent" | "demo"}`` (default: demo)."""
    spec = dict(spec or {})
    for role, kind in spec.items():
        if role not in (*ROLES, "*") or kind not in ("agent", "demo"):
            raise ConfigError(
                f'roles: {role!r}: {kind!r} is not offered; use {{"TEST"|"DEV"|"REVIEW"|"FINISH_REVIEW"|"*": '
                '"agent"|"demo"}'
            )
    default = spec.get("*", "demo")
    return {role: str(spec.get(role, default)) for role in ROLES}


def _orchestrate_demo() -> Entry:
    """The multi-agent orchestrator with MAIN by rules and the offline demo roles, on the
    ``workdir`` of the run's input (the demo's sample project is written there if absent)."""

    def prepare(inputs: Mapping[str, Any]) -> dict[str, Any]:
        workdir, task = inputs.get("workdir"), inputs.get("task")
        if not isinstance(workdir, str) or not workdir:
            raise ConfigError('orchestrate-demo needs {"workdir": "/path/of/the/project"} in its input')
        from tether.orchestrator.engine import initial_state

        default = "Make the test suite of this project pass (median() of an even count is wrong)."
        return initial_state(str(task or default), workdir=workdir)

    def factory(store: CheckpointStore, state: Mapping[str, Any]) -> Runner:
        from tether.orchestrator import Orchestrator, ScriptedMain, ScriptedRunner
        from tether.orchestrator import demo as d

        root = Path(str(state.get("workdir") or "."))
        root.mkdir(parents=True, exist_ok=True)
        if not (root / "stats.py").exists():
            d.make_sample_repo(root)
        roles = {
            "TEST": d.run_tests_role,
            "DEV": d.dev_role(),
            "REVIEW": d.review_role,
            "FINISH_REVIEW": d.finish_review_role,
        }
        orch = Orchestrator(root, store, main=ScriptedMain(d.rule_main), runners=ScriptedRunner(roles))
        return orch.runner()

    return Entry(name="orchestrate-demo", factory=factory, prepare=prepare)
