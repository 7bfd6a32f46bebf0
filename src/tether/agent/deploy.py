"""Deployment agents: analyse the repository and the host, then let the durable agent
loop deploy it through a local or SSH session.

* :class:`AsyncDeploymentAgent` is the primary API: async, on a checkpoint store you
  pass, returning a :class:`DeployResult` (run id, status, message, log file); a paused
  or crashed run continues with :meth:`AsyncDeploymentAgent.resume`.
* :class:`DeploymentAgent` is the classic synchronous facade: built from an
  :class:`~tether.models.LLMConfig`, ``deploy(...)`` / ``deploy_local(...)`` return a bool
  and fill ``history``, ``user_interactions`` and ``current_log_file``. It is a thin
  layer over the async agent (every run is still checkpointed and resumable).

Everything the agent keeps lives in the run's checkpointed state; the JSON run log
is written at the end of every run (also a failed or paused one), and lessons go to
the experience store.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tether.agent.config import SYSTEM_PROMPT
from tether.agent.experience import ExperienceRetriever, ExperienceStore, lessons_from_run
from tether.agent.interaction import UserInteractionHandler
from tether.agent.loop import AgentLoop, LoopConfig
from tether.agent.repo import RepoContext, analyze_repo
from tether.errors import TetherError
from tether.models.base import ChatModel
from tether.runtime import Event, RunResult
from tether.state import RunStatus
from tether.state.reserved import runtime_get
from tether.stores.base import CheckpointStore
from tether.tools import CommandPolicy
from tether.tools.base import Session
from tether.tools.redact import default_redactor, install_log_redaction

if TYPE_CHECKING:
    from tether.models import LLMConfig
    from tether.tools import HostFacts

__all__ = [
    "AsyncDeploymentAgent",
    "DeployResult",
    "DeploymentAgent",
    "DEPLOY_SYSTEM_PROMPT",
    "DeploymentRequest",
    "LocalDeploymentRequest",
    "model_info",
]

logger = logging.getLogger(__name__)

PROBE_RULE = """A command that changes the host (an install, a file written, a service started) may
carry an optional "probe": {"action": "execute", "command": "...", "reasoning": "...",
"probe": "<a read-only command exiting 0 when the effect is in place, 1 when it is not>"},
e.g. "systemctl is-active --quiet nginx" or "test -f /etc/app.conf". If the process dies while
the command runs, the probe decides on resume whether it ran, so nobody has to be asked."""

DEPLOY_SYSTEM_PROMPT = SYSTEM_PROMPT + "\n" + PROBE_RULE
"""The deployment agent's system prompt: the loop's rules plus the optional ``probe`` of an
``execute`` action (see :mod:`tether.agent.effects`), since a deploy is mostly side effects."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeployResult:
    run_id: str
    success: bool
    status: RunStatus
    message: str
    log_file: Path | None
    pending_question: Mapping[str, Any] | None = None
    """The question a run PAUSED on, if that is why it paused."""
    pending_decision: Mapping[str, Any] | None = None
    """The failure report a run PAUSED on, waiting for retry / skip / abort."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentRequest:
    """A deployment to a remote host over SSH."""

    repo_url: str
    deploy_dir: str
    host: str = ""
    """``user@host[:port]``, shown in the run log's ``target``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalDeploymentRequest:
    """A deployment on this machine."""

    repo_url: str
    deploy_dir: str


def model_info(model: ChatModel, config: LLMConfig | None = None) -> dict[str, Any]:
    """The run log's ``config`` block: the model that really runs, its temperature and
    endpoint (``config`` is the :class:`LLMConfig` it was built from, if any)."""
    cfg = config if config is not None else getattr(model, "config", None)
    scripted = type(model).__name__ == "ScriptedModel"
    name = getattr(model, "model", None) or getattr(cfg, "model", None) or type(model).__name__
    endpoint = None
    if cfg is not None and not scripted:
        try:
            endpoint = cfg.base_url
        except TetherError:  # a provider without a default endpoint: nothing to show
            endpoint = getattr(cfg, "endpoint", None)
    return {
        "provider": "scripted" if scripted else getattr(cfg, "provider", None),
        "model": str(name),
        "temperature": getattr(cfg, "temperature", None),
        "endpoint": endpoint,
    }


class AsyncDeploymentAgent:
    """The durable deployment agent: ``deploy`` (SSH) and ``deploy_local``, async."""

    def __init__(
        self,
        model: ChatModel,
        store: CheckpointStore,
        *,
        model_name: str = "gpt-4o",
        llm_config: LLMConfig | None = None,
        max_iterations: int = 30,
        log_dir: str | Path = "./agent_logs",
        interaction_handler: UserInteractionHandler | None = None,
        experience_store: ExperienceStore | None = None,
        experience_retriever: ExperienceRetriever | None = None,
        policy: CommandPolicy | None = None,
        redact: Callable[[str], str] | None = None,
        budget: int = 24_000,
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        """``model_name`` picks the tokenizer and budget; ``llm_config`` (the
        :class:`LLMConfig` the model was built from) fills the run log's temperature and
        endpoint."""
        self.model = model
        self.store = store
        self.model_name = model_name
        self.llm_config = llm_config
        self.max_iterations = max_iterations
        self.log_dir = Path(log_dir)
        self.interaction_handler = interaction_handler
        self.experience_store = experience_store
        self.experience_retriever = experience_retriever or (
            ExperienceRetriever(experience_store) if experience_store is not None else None
        )
        self.policy = policy
        self.redact = redact if redact is not None else default_redactor()
        install_log_redaction()  # an entry point: its logs are redacted like its state
        self.budget = budget
        self.on_event = on_event
        self.current_log_file: Path | None = None
        self.last_loop: AgentLoop | None = None

    async def deploy(
        self,
        repo: str,
        *,
        session: Session,
        deploy_dir: str,
        target: str = "",
        run_id: str | None = None,
        repo_context: RepoContext | None = None,
        host_facts: HostFacts | None = None,
        origin: Mapping[str, Any] | None = None,
    ) -> DeployResult:
        """Deploy over SSH: ``session`` is an ``SSHSession``."""
        return await self._deploy(
            repo,
            session=session,
            deploy_dir=deploy_dir,
            target=target or "remote host",
            run_id=run_id,
            repo_context=repo_context,
            host_facts=host_facts,
            origin=origin,
        )

    async def deploy_local(
        self,
        repo: str,
        *,
        session: Session,
        deploy_dir: str,
        run_id: str | None = None,
        repo_context: RepoContext | None = None,
        host_facts: HostFacts | None = None,
        origin: Mapping[str, Any] | None = None,
    ) -> DeployResult:
        """Deploy on this machine: ``session`` is a ``LocalSession``.

        ``origin`` is recorded in the run (``_origin``) so that ``tether resume RUN``
        can rebuild the agent; ``host_facts`` skips gathering them again.
        """
        return await self._deploy(
            repo,
            session=session,
            deploy_dir=deploy_dir,
            target="localhost",
            run_id=run_id,
            repo_context=repo_context,
            host_facts=host_facts,
            origin=origin,
        )

    async def resume(
        self, run_id: str, *, session: Session, answer: str | None = None, decision: str | None = None
    ) -> DeployResult:
        """Continue a crashed or paused deployment: ``answer`` answers the question it
        waits on, ``decision`` (retry / skip / abort) the failure it paused on."""
        loop = self._loop(session, self._config())
        if answer is not None:
            await self.store.update_state(run_id, {"answer": answer})
        result = await loop.resume(run_id, decision=decision)  # a command a crash cut is probed
        cp = await self.store.load(run_id)
        header = dict(cp.state.get("log_header") or {}) if cp is not None else {}
        return await self._finish(loop, result, header={**header, "resumed": True})

    # -- internals ---------------------------------------------------------------------
    def _config(self, blocks: dict[str, str] | None = None) -> LoopConfig:
        return LoopConfig(
            system_prompt=DEPLOY_SYSTEM_PROMPT,
            model_name=self.model_name,
            max_iterations=self.max_iterations,
            budget=self.budget,
            blocks=blocks or {},
        )

    async def _deploy(
        self,
        repo: str,
        *,
        session: Session,
        deploy_dir: str,
        target: str,
        run_id: str | None,
        repo_context: RepoContext | None,
        host_facts: HostFacts | None,
        origin: Mapping[str, Any] | None,
    ) -> DeployResult:
        run_id = run_id or f"deploy-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
        ctx = repo_context or await analyze_repo(repo)
        facts = host_facts if host_facts is not None else await session.host_facts()
        blocks = {"repository": ctx.to_prompt(), "host": facts.to_prompt()}
        if self.experience_retriever is not None:
            found = await self.experience_retriever.retrieve(ctx.project_type, ctx.framework)
            blocks["experience"] = self.experience_retriever.render(found)
        loop = self._loop(session, self._config(blocks))
        goal = (
            f"Deploy the repository {repo} into {deploy_dir} on {target}. Strategy preference: "
            f"{ctx.suggested_strategy} (Docker Compose > Docker > traditional). "
            "Verify it runs before saying done."
        )
        header = {
            "repo_url": repo,
            "target": target,
            "deploy_dir": deploy_dir,
            "start_time": dt.datetime.now(dt.UTC).isoformat(),
            "config": {**model_info(self.model, self.llm_config), "max_iterations": self.max_iterations},
            "context": {"project_type": ctx.project_type, "framework": ctx.framework},
        }
        extra: dict[str, Any] = {"log_header": header}
        if origin is not None:
            extra["_origin"] = dict(origin)
        result = await loop.start(run_id, goal, inputs=extra)
        deployed = await self._finish(loop, result, header=header)
        await self._learn(result, ctx)
        return deployed

    def _loop(self, session: Session, config: LoopConfig) -> AgentLoop:
        loop = AgentLoop(
            self.model,
            session,
            self.store,
            config=config,
            policy=self.policy,
            redact=self.redact,
            interaction=self.interaction_handler,
            on_event=self.on_event,
        )
        self.last_loop = loop
        return loop

    async def _finish(self, loop: AgentLoop, result: RunResult, *, header: dict[str, Any]) -> DeployResult:
        log = await loop.run_log(result.run_id, **header)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.log_dir / f"{result.run_id}.json"
        text = json.dumps(log, indent=2, ensure_ascii=False, default=str)
        if loop.redact is not None:
            text = loop.redact(text)
        path.write_text(text, encoding="utf-8")
        self.current_log_file = path
        message = str(result.state.get("final_output") or "")
        logger.info("deployment %s ended %s: %s", result.run_id, result.status, message[:200])
        paused = result.status is RunStatus.PAUSED
        return DeployResult(
            run_id=result.run_id,
            success=result.status is RunStatus.COMPLETED,
            status=result.status,
            message=message,
            log_file=path,
            pending_question=result.state.get("pending_question") if paused else None,
            pending_decision=runtime_get(result.state, "pending_decision") if paused else None,
        )

    async def _learn(self, result: RunResult, ctx: RepoContext) -> None:
        if self.experience_store is None or result.status is RunStatus.PAUSED:
            return
        lessons = lessons_from_run(
            result.state.get("command_history", []),
            project_type=ctx.project_type,
            framework=ctx.framework,
            outcome="success" if result.status is RunStatus.COMPLETED else "failure",
            run_id=result.run_id,
        )
        await self.experience_store.add_many(lessons)


# == the synchronous facade ==========================================================
T = TypeVar("T")


def _run_sync(fn: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to the end from sync code, even when this thread already runs an
    event loop (a notebook, an async app): then it runs on a private loop in a worker
    thread, and the caller's loop waits, as any blocking call makes it wait."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(fn())  # type: ignore[arg-type]
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-deploy") as pool:
        return pool.submit(lambda: asyncio.run(fn())).result()  # type: ignore[arg-type]


class DeploymentAgent:
    """The synchronous deployment agent: ``deploy`` (SSH) and ``deploy_local`` return a
    bool, as scripts expect; every run is still checkpointed in ``store_url``.

    Args:
        config: which model to call (:class:`~tether.models.LLMConfig`); providers that
            need an API key must have one.
        max_iterations: model turns before the run gives up.
        log_dir: where the JSON run logs go (default ``./agent_logs``).
        interaction_handler: answers the agent's questions; None pauses the run on a
            question (``deploy`` returns False, ``last_result.pending_question`` holds it,
            :meth:`resume` answers it).
        experience_retriever: past lessons put in the prompt.
        model: a ready :class:`ChatModel` to use instead of building one from ``config``
            (a ``ScriptedModel`` for tests and offline demos).
        store_url: the checkpoint store (default: the CLI's SQLite file, so ``tether
            runs`` / ``tether resume`` see these runs).
        policy: checks each command first (default: :class:`~tether.tools.CommandPolicy`,
            which refuses destructive commands unless the handler confirms them).
        redact: hides secrets in prompts, logs and state (default: a
            :class:`~tether.tools.Redactor` that spots API keys, tokens and passwords).
        on_event: receives every loop event (commands, results, pauses).

    Attributes:
        history: the last run's commands (``iteration``, ``command``, ``success``,
            ``exit_code``, ``stdout``, ``stderr``...).
        user_interactions: the last run's questions and answers.
        current_log_file: the last run's JSON log.
        last_result: the last run's :class:`DeployResult` (run id, status, message).
    """

    def __init__(
        self,
        config: LLMConfig,
        max_iterations: int = 30,
        log_dir: str | None = None,
        interaction_handler: UserInteractionHandler | None = None,
        experience_retriever: ExperienceRetriever | None = None,
        *,
        model: ChatModel | None = None,
        store_url: str = "sqlite:///.tether/tether.db",
        policy: CommandPolicy | None = None,
        redact: Callable[[str], str] | None = None,
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        if model is None:
            config.require_model()
            config.api_key_value()  # a missing key fails here, not at the first model call
        self.config = config
        self.max_iterations = max_iterations
        self.log_dir = Path(log_dir) if log_dir is not None else Path("./agent_logs")
        self.interaction_handler = interaction_handler
        self.experience_retriever = experience_retriever
        self.store_url = store_url
        self.policy = policy if policy is not None else CommandPolicy()
        self.redact = redact if redact is not None else default_redactor()
        install_log_redaction()
        self.on_event = on_event
        self.history: list[dict[str, Any]] = []
        self.user_interactions: list[dict[str, Any]] = []
        self.current_log_file: Path | None = None
        self.last_result: DeployResult | None = None
        self._model = model

    def deploy(
        self,
        request: DeploymentRequest,
        host_facts: HostFacts | None,
        ssh_session: Session,
        repo_context: RepoContext | None = None,
    ) -> bool:
        """Deploy over SSH; True when the agent said done (see the class for pauses)."""
        origin = self._origin(request.repo_url, request.deploy_dir, host=request.host or None)

        async def go(agent: AsyncDeploymentAgent) -> DeployResult:
            try:
                return await agent.deploy(
                    request.repo_url,
                    session=ssh_session,
                    deploy_dir=request.deploy_dir,
                    target=request.host,
                    repo_context=repo_context,
                    host_facts=host_facts,
                    origin=origin,
                )
            finally:  # its connection belongs to this call's event loop
                await ssh_session.close()

        return self._call(go)

    def deploy_local(
        self,
        request: LocalDeploymentRequest,
        host_facts: HostFacts | None,
        local_session: Session,
        repo_context: RepoContext | None = None,
    ) -> bool:
        """Deploy on this machine; True when the agent said done."""
        origin = self._origin(request.repo_url, request.deploy_dir, host=None)
        return self._call(
            lambda agent: agent.deploy_local(
                request.repo_url,
                session=local_session,
                deploy_dir=request.deploy_dir,
                repo_context=repo_context,
                host_facts=host_facts,
                origin=origin,
            )
        )

    def resume(
        self, run_id: str, session: Session, *, answer: str | None = None, decision: str | None = None
    ) -> bool:
        """Continue a paused or crashed run (``answer`` a question, ``decision`` a failure)."""
        return self._call(
            lambda agent: agent.resume(run_id, session=session, answer=answer, decision=decision)
        )

    # -- internals ---------------------------------------------------------------------
    def _origin(self, repo: str, deploy_dir: str, *, host: str | None) -> dict[str, Any]:
        return {
            "kind": "deploy",
            "repo": repo,
            "deploy_dir": deploy_dir,
            "host": host,
            "max_iterations": self.max_iterations,
            "log_dir": str(self.log_dir),
            "model": self.config.public_dict(),
        }

    def _call(self, fn: Callable[[AsyncDeploymentAgent], Awaitable[DeployResult]]) -> bool:
        async def go() -> DeployResult:
            from tether.models import create_model
            from tether.stores import open_store

            model = self._model if self._model is not None else create_model(self.config)
            try:
                async with open_store(self.store_url) as store:
                    agent = AsyncDeploymentAgent(
                        model,
                        store,
                        model_name=self.config.model or "gpt-4o",
                        llm_config=self.config,
                        max_iterations=self.max_iterations,
                        log_dir=self.log_dir,
                        interaction_handler=self.interaction_handler,
                        experience_retriever=self.experience_retriever,
                        policy=self.policy,
                        redact=self.redact,
                        on_event=self.on_event,
                    )
                    result = await fn(agent)
                    cp = await store.load(result.run_id)
                    state = cp.state if cp is not None else {}
                    self.history = list(state.get("command_history") or [])
                    self.user_interactions = list(state.get("user_interactions") or [])
                    return result
            finally:
                if model is not self._model and hasattr(model, "aclose"):
                    await model.aclose()

        result = _run_sync(go)
        self.last_result = result
        self.current_log_file = result.log_file
        return result.success
