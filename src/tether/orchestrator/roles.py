"""Who does the work: one protocol for TEST/DEV/REVIEW/FINISH_REVIEW, one for MAIN.

A :class:`RoleRunner` gets a :class:`RoleRequest` (the prompt, the working directory, the
path the report should be written to) and returns a :class:`RoleOutput` (the report
text). Three implementations:

* :class:`ScriptedRunner`: a Python function per role (tests and the offline demo).
* :class:`CommandRunner`: an external coding agent run non-interactively from a command
  template, the prompt on stdin or in a file, the report read from the file it wrote or
  from its output; timeout and output cap as in :class:`~tether.tools.LocalSession`.
* :class:`AgentRunner`: tether's own agent loop with a model and a local session in the
  working directory (a nested durable run per stage).

MAIN is a :class:`MainPolicy`: :class:`ScriptedMain` (a function) or :class:`ModelMain`
(a chat model answering JSON).
"""

from __future__ import annotations

import inspect
import json
import logging
import shlex
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from tether.errors import ConfigError, ModelOutputError, ToolError
from tether.models.base import ChatModel
from tether.orchestrator.blackboard import Blackboard
from tether.stores.base import CheckpointStore

__all__ = [
    "NEXT_AGENTS",
    "AgentRunner",
    "CommandRunner",
    "MainDecision",
    "MainPolicy",
    "MainRequest",
    "ModelMain",
    "RoleOutput",
    "RoleRequest",
    "RoleRunner",
    "ScriptedMain",
    "ScriptedRunner",
]

logger = logging.getLogger("tether.orchestrator")

NEXT_AGENTS = ("TEST", "DEV", "REVIEW", "FINISH", "USER")


@dataclass(frozen=True, slots=True, kw_only=True)
class RoleRequest:
    role: str
    """TEST, DEV, REVIEW or FINISH_REVIEW."""
    iteration: int
    prompt: str
    workdir: Path
    report_path: Path
    """Where the report should be written (the runner may write it, or just return it)."""
    run_id: str
    subloop_round: int = 0
    timeout: float | None = None
    """Seconds this stage may take (the sub-loop passes what is left of its 600 s)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RoleOutput:
    report: str
    """The report's markdown (the orchestrator writes it to the blackboard)."""
    report_file: str | None = None
    """A file the agent wrote instead, relative to the working directory (checked: inside it)."""
    exit_code: int = 0


@runtime_checkable
class RoleRunner(Protocol):
    async def run(self, request: RoleRequest) -> RoleOutput: ...


RoleFn = Callable[[RoleRequest], "str | RoleOutput | Awaitable[str | RoleOutput]"]


class ScriptedRunner:
    """Runs a Python function per role: ``ScriptedRunner({"TEST": fn, "DEV": fn})``."""

    def __init__(self, roles: Mapping[str, RoleFn]) -> None:
        self.roles = {k.upper(): v for k, v in roles.items()}
        self.calls: list[RoleRequest] = []

    async def run(self, request: RoleRequest) -> RoleOutput:
        fn = self.roles.get(request.role)
        if fn is None:
            raise ConfigError(f"ScriptedRunner has no function for role {request.role}; add it")
        self.calls.append(request)
        out = fn(request)
        if inspect.isawaitable(out):
            out = await out
        return out if isinstance(out, RoleOutput) else RoleOutput(report=str(out))


class CommandRunner:
    """An external coding agent run non-interactively for each stage.

    ``command`` is a shell template; ``{prompt_file}``, ``{report_file}``, ``{role}``,
    ``{iteration}`` and ``{workdir}`` are replaced (shell-quoted). With
    ``prompt_via="stdin"`` the prompt is also fed on standard input. The report is the file
    ``{report_file}`` if the agent wrote it, else its standard output. A non-zero exit or a
    timeout raises :class:`~tether.errors.ToolError` (in the sub-loop: back to MAIN).

    Example: ``CommandRunner("codex exec --full-auto - > {report_file}", prompt_via="stdin")``.
    """

    def __init__(
        self,
        command: str,
        *,
        prompt_via: Literal["stdin", "file"] = "stdin",
        timeout: float = 1800.0,
        max_output_bytes: int = 1_000_000,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if prompt_via not in ("stdin", "file"):
            raise ConfigError("CommandRunner prompt_via must be 'stdin' or 'file'")
        self.command = command
        self.prompt_via = prompt_via
        self.timeout = timeout
        self.max_output_bytes = max_output_bytes
        self.env = dict(env or {})

    async def run(self, request: RoleRequest) -> RoleOutput:
        from tether.tools.local import LocalSession

        board = Blackboard(request.workdir)
        tag = f"{request.role.lower()}_{request.iteration}" + (
            f"_subloop_{request.subloop_round}" if request.subloop_round else ""
        )
        prompt_file = board.write(f".tether/prompts/{tag}.md", request.prompt)
        report_file = request.report_path
        report_file.unlink(missing_ok=True)
        values = {
            "prompt_file": shlex.quote(str(prompt_file)),
            "report_file": shlex.quote(str(report_file)),
            "role": shlex.quote(request.role),
            "iteration": str(request.iteration),
            "workdir": shlex.quote(str(board.root)),
        }
        try:
            line = self.command.format(**values)
        except (KeyError, IndexError) as exc:
            raise ConfigError(f"command template {self.command!r}: unknown placeholder {exc}") from exc
        if self.prompt_via == "stdin":
            line = f"( {line} ) < {values['prompt_file']}"
        limit = min(self.timeout, request.timeout) if request.timeout else self.timeout
        session = LocalSession(
            board.root, env=self.env, max_output_bytes=self.max_output_bytes, persist_cwd=False
        )
        result = await session.run(line, timeout=limit)
        if result.timed_out:
            raise ToolError(f"{request.role} agent timed out after {limit:.0f}s: {self.command}")
        if result.exit_code != 0:
            tail = (result.stderr or result.stdout)[-500:]
            raise ToolError(f"{request.role} agent exited {result.exit_code}: {tail}")
        if report_file.is_file() and report_file.stat().st_size:
            return RoleOutput(report=report_file.read_text(encoding="utf-8", errors="replace"))
        return RoleOutput(report=result.stdout, exit_code=result.exit_code)


class AgentRunner:
    """tether's agent loop as a role: a model driving a shell in the working directory.

    Each stage is a nested durable run (``{run_id}-{role}-{iteration}``) on ``store``; the
    agent is told to write its report to the report path and finish with ``done``; if it
    did not write the file, its final message is the report.
    """

    def __init__(
        self,
        model: ChatModel,
        store: CheckpointStore,
        *,
        max_iterations: int = 30,
        command_timeout: float = 600.0,
    ) -> None:
        self.model = model
        self.store = store
        self.max_iterations = max_iterations
        self.command_timeout = command_timeout

    async def run(self, request: RoleRequest) -> RoleOutput:
        from tether.agent.loop import AgentLoop, LoopConfig
        from tether.state import RunStatus
        from tether.tools.local import LocalSession

        sub = f"_s{request.subloop_round}" if request.subloop_round else ""
        run_id = f"{request.run_id}-{request.role.lower()}-{request.iteration}{sub}"
        goal = (
            f"{request.prompt}\n\nWrite your report (markdown, starting with "
            f"'iteration: {request.iteration}' "
            f"and a verdict line '结论：PASS|FAIL|BLOCKED') to {request.report_path}, then answer done."
        )
        config = LoopConfig(max_iterations=self.max_iterations, command_timeout=self.command_timeout)
        async with LocalSession(request.workdir) as session:
            loop = AgentLoop(self.model, session, self.store, config=config)
            existing = await self.store.get_run(run_id)
            result = await (loop.resume(run_id) if existing is not None else loop.start(run_id, goal))
        if request.report_path.is_file():
            return RoleOutput(report=request.report_path.read_text(encoding="utf-8", errors="replace"))
        message = str(result.state.get("final_output") or "")
        if result.status is not RunStatus.COMPLETED:
            raise ToolError(f"{request.role} agent run {run_id} ended {result.status.value}: {message[:300]}")
        return RoleOutput(report=message)


# == MAIN ===========================================================================
@dataclass(frozen=True, slots=True, kw_only=True)
class MainRequest:
    mode: Literal["main", "finish_check"]
    iteration: int
    prompt: str
    task: str
    verdicts: dict[str, str] = field(default_factory=dict)
    """The latest verdict of each role (what a scripted MAIN decides on)."""
    dev_plan: list[dict[str, Any]] = field(default_factory=list)
    replan: bool = False
    """The orchestrator saw a stall and asks MAIN to re-plan."""
    last_stage: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class MainDecision:
    next_agent: str
    """TEST, DEV, REVIEW, FINISH or USER (in FINISH_CHECK: FINISH accepts, others reject)."""
    reason: str = ""
    dev_plan: list[dict[str, Any]] | None = None
    """Tasks to add or update: ``{"id", "title"?, "status"}`` (None: no change)."""
    question: str = ""
    """For USER: what to ask."""

    def __post_init__(self) -> None:
        if self.next_agent not in NEXT_AGENTS:
            raise ModelOutputError(
                f"next_agent must be one of {', '.join(NEXT_AGENTS)}, not {self.next_agent!r}"
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MainDecision:
        plan = data.get("dev_plan")
        return cls(
            next_agent=str(data.get("next_agent", "")).upper(),
            reason=str(data.get("reason", "")),
            dev_plan=[dict(t) for t in plan] if isinstance(plan, list) else None,
            question=str(data.get("question", "")),
        )


@runtime_checkable
class MainPolicy(Protocol):
    async def decide(self, request: MainRequest) -> MainDecision: ...


class ScriptedMain:
    """MAIN as a function of the request: ``ScriptedMain(lambda req: MainDecision(...))``."""

    def __init__(
        self, fn: Callable[[MainRequest], MainDecision | Mapping[str, Any] | Awaitable[Any]]
    ) -> None:
        self.fn = fn
        self.requests: list[MainRequest] = []

    async def decide(self, request: MainRequest) -> MainDecision:
        self.requests.append(request)
        out = self.fn(request)
        if inspect.isawaitable(out):
            out = await out
        return out if isinstance(out, MainDecision) else MainDecision.from_dict(out)


MAIN_FORMAT = (
    'Answer with ONE JSON object: {"next_agent": "TEST|DEV|REVIEW|FINISH|USER", "reason": "...", '
    '"dev_plan": [{"id": "t1", "title": "...", "status": "TODO|DOING|DONE|BLOCKED"}], '
    '"question": "(USER only)"}'
)


class ModelMain:
    """MAIN as a chat model answering JSON; an invalid reply is sent back (up to 2 times)."""

    def __init__(self, model: ChatModel, *, retries: int = 2) -> None:
        self.model = model
        self.retries = retries
        self.replies = 0
        """Model replies read by this process (a resumed scripted MAIN skips those a run recorded)."""

    async def decide(self, request: MainRequest) -> MainDecision:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are MAIN, the orchestrator of TEST, DEV and REVIEW agents."},
            {"role": "user", "content": request.prompt + "\n\n" + MAIN_FORMAT},
        ]
        for attempt in range(self.retries + 1):
            started = time.monotonic()
            reply = await self.model.complete(messages, json_mode=True)
            self.replies += 1
            logger.debug("MAIN replied in %.1fs: %s", time.monotonic() - started, reply.text[:500])
            try:
                data = json.loads(reply.text)
                if not isinstance(data, dict):
                    raise ModelOutputError("the reply is not a JSON object")
                return MainDecision.from_dict(data)
            except (ValueError, ModelOutputError) as exc:
                if attempt == self.retries:
                    raise ModelOutputError(f"MAIN gave no valid decision: {exc}") from exc
                messages += [
                    {"role": "assistant", "content": reply.text},
                    {"role": "user", "content": f"Invalid reply ({exc}). {MAIN_FORMAT}"},
                ]
        raise AssertionError("unreachable")  # pragma: no cover
