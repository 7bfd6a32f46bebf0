"""``DeploymentAgent`` (seed 002): analyse the repository and the host, then let the
durable agent loop deploy it through a local or SSH session.

Everything the seed's agent kept in lists lives in the run's checkpointed state; the
JSON run log in the seed's format is written at the end of every run (also a failed
or paused one), and lessons go to the experience store.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.agent.experience import ExperienceRetriever, ExperienceStore, lessons_from_run
from tether.agent.loop import AgentLoop, LoopConfig
from tether.agent.repo import RepoContext, analyze_repo
from tether.models.base import ChatModel
from tether.runtime import Event, RunResult
from tether.state import RunStatus
from tether.stores.base import CheckpointStore

__all__ = ["DeployResult", "DeploymentAgent"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeployResult:
    run_id: str
    success: bool
    status: RunStatus
    message: str
    log_file: Path | None


class DeploymentAgent:
    """Seed 002's agent, made durable: ``deploy`` (SSH) and ``deploy_local``."""

    def __init__(
        self,
        model: ChatModel,
        store: CheckpointStore,
        *,
        model_name: str = "gpt-4o",
        max_iterations: int = 30,
        log_dir: str | Path = "./agent_logs",
        interaction_handler: Any = None,
        experience_store: ExperienceStore | None = None,
        experience_retriever: ExperienceRetriever | None = None,
        policy: Any = None,
        redact: Callable[[str], str] | None = None,
        budget: int = 24_000,
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        self.model = model
        self.store = store
        self.model_name = model_name
        self.max_iterations = max_iterations
        self.log_dir = Path(log_dir)
        self.interaction_handler = interaction_handler
        self.experience_store = experience_store
        self.experience_retriever = experience_retriever or (
            ExperienceRetriever(experience_store) if experience_store is not None else None
        )
        self.policy = policy
        self.redact = redact
        self.budget = budget
        self.on_event = on_event
        self.current_log_file: Path | None = None
        self.last_loop: AgentLoop | None = None

    async def deploy(
        self,
        repo: str,
        *,
        session: Any,
        deploy_dir: str,
        target: str = "",
        run_id: str | None = None,
        repo_context: RepoContext | None = None,
    ) -> DeployResult:
        """Deploy over SSH: ``session`` is an ``SSHSession``."""
        return await self._deploy(
            repo,
            session=session,
            deploy_dir=deploy_dir,
            target=target or "remote host",
            run_id=run_id,
            repo_context=repo_context,
        )

    async def deploy_local(
        self,
        repo: str,
        *,
        session: Any,
        deploy_dir: str,
        run_id: str | None = None,
        repo_context: RepoContext | None = None,
    ) -> DeployResult:
        """Deploy on this machine: ``session`` is a ``LocalSession``."""
        return await self._deploy(
            repo,
            session=session,
            deploy_dir=deploy_dir,
            target="localhost",
            run_id=run_id,
            repo_context=repo_context,
        )

    async def resume(self, run_id: str, *, session: Any, answer: str | None = None) -> DeployResult:
        """Continue a crashed or paused deployment (``answer``: a pending question's answer)."""
        loop = self._loop(
            session,
            LoopConfig(model_name=self.model_name, max_iterations=self.max_iterations, budget=self.budget),
        )
        result = await (loop.answer(run_id, answer) if answer is not None else loop.resume(run_id))
        return await self._finish(loop, result, header={"resumed": True})

    # -- internals ---------------------------------------------------------------------
    async def _deploy(
        self,
        repo: str,
        *,
        session: Any,
        deploy_dir: str,
        target: str,
        run_id: str | None,
        repo_context: RepoContext | None,
    ) -> DeployResult:
        run_id = run_id or f"deploy-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
        ctx = repo_context or await analyze_repo(repo)
        facts = await session.host_facts()
        blocks = {"repository": ctx.to_prompt(), "host": facts.to_prompt()}
        if self.experience_retriever is not None:
            found = await self.experience_retriever.retrieve(ctx.project_type, ctx.framework)
            blocks["experience"] = self.experience_retriever.render(found)
        config = LoopConfig(
            model_name=self.model_name, max_iterations=self.max_iterations, budget=self.budget, blocks=blocks
        )
        loop = self._loop(session, config)
        goal = (
            f"Deploy the repository {repo} into {deploy_dir} on {target}. Strategy preference: "
            f"{ctx.suggested_strategy} (Docker Compose > Docker > traditional). "
            "Verify it runs before saying done."
        )
        started = dt.datetime.now(dt.UTC).isoformat()
        result = await loop.start(run_id, goal)
        header = {
            "repo_url": repo,
            "target": target,
            "deploy_dir": deploy_dir,
            "start_time": started,
            "config": {"model": self.model_name, "max_iterations": self.max_iterations},
            "context": {"project_type": ctx.project_type, "framework": ctx.framework},
        }
        deployed = await self._finish(loop, result, header=header)
        await self._learn(result, ctx)
        return deployed

    def _loop(self, session: Any, config: LoopConfig) -> AgentLoop:
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
        log["execution_summary"] = result.state.get("execution_summary")
        log["structured_outputs"] = result.state.get("structured_outputs")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.log_dir / f"{result.run_id}.json"
        text = json.dumps(log, indent=2, ensure_ascii=False, default=str)
        if loop.redact is not None:
            text = loop.redact(text)
        path.write_text(text, encoding="utf-8")
        self.current_log_file = path
        message = str(result.state.get("final_output") or "")
        logger.info("deployment %s ended %s: %s", result.run_id, result.status, message[:200])
        return DeployResult(
            run_id=result.run_id,
            success=result.status is RunStatus.COMPLETED,
            status=result.status,
            message=message,
            log_file=path,
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
