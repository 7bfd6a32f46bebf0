"""The agent loop as a durable workflow: one runtime step that loops, once per iteration.

Each iteration builds the prompt from the run's context window (system, session,
working and instant layers), calls the model, parses an :class:`AgentAction`, acts,
and returns a state update. The :class:`~tether.runtime.Runner` checkpoints after every
iteration, so a crashed agent resumes with its whole history, and a question the agent
asked can be answered later, from another process.

State keys: ``iteration`` (iterations done), ``goal``; the context window as
``context_meta`` (budget, calibration, ...: small, rewritten each step) and ``context_log``
(append: the items each step added, replaced or removed, so a checkpoint stores what
changed, not the window); ``command_history``, ``user_interactions``, ``event_log`` and
``actions`` (append; ``actions`` holds every action that is not a command: questions,
done, failed, invalid replies), ``invalid_replies``, ``pending_question`` (a question
waiting for an answer), ``final_output``.

Before each model call a :class:`~tether.context.policy.ContextPolicy` applies the
configured thresholds; its events (the warning, each compression, overflow recoveries)
are emitted and appended to ``event_log``. Trimmed command outputs go to a durable
artefact store (beside an SQLite store's file, one directory per run), and the model can
read them back with the ``read_artifact`` action.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.agent.actions import AgentAction, parse_action
from tether.agent.approvals import decide_approval
from tether.context import ContextWindow, FileArtifactStore, InMemoryArtifactStore, Layer, new_item
from tether.context.artifacts import ArtifactNotFound, ArtifactStore
from tether.context.monitor import Thresholds
from tether.context.policy import ContextEvent, ContextPolicy
from tether.context.recovery import call_with_recovery, is_prompt_too_long
from tether.context.trim import trim_output
from tether.errors import ApprovalRequired, ModelOutputError, ToolError
from tether.models.base import ChatModel
from tether.runtime import Event, Runner, RunResult, Step, StepContext, Workflow
from tether.state import ExecutionContext, RunStatus, default_registry
from tether.state.reserved import runtime_update
from tether.stores.base import CheckpointStore
from tether.tools.base import Session
from tether.tools.guard import GuardedSession

__all__ = ["AgentLoop", "LoopConfig"]

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = """You are an autonomous DevOps agent working through a shell session.
Answer every turn with ONE JSON object and nothing else:
  {"action": "execute", "command": "<one shell command>", "reasoning": "<why>"}
  {"action": "ask_user", "question": "...", "options": ["..."], "input_type": "choice|text|confirm|secret"}
  {"action": "done", "message": "<what was achieved, with URLs/ports>"}
  {"action": "failed", "message": "<why it cannot be done>"}
  {"action": "read_artifact", "artifact_id": "<id>", "start": 1, "end": 200, "unit": "lines"}
    (reads back the part of a trimmed output you need; unit "lines" or "bytes")
Rules: prefer Docker Compose > Docker > a traditional install; run non-interactive commands
(-y, --no-input); never run destructive commands; start long-running services in the
background and verify them (e.g. curl the health endpoint) before saying done; when a
command fails, read its error and fix the cause instead of repeating it. Secrets the user
gives you are in environment variables named in the conversation: use "$NAME", never the value."""


@dataclass(slots=True, kw_only=True)
class LoopConfig:
    max_iterations: int = 30
    max_invalid_replies: int = 3
    """Invalid replies in a row before the run fails."""
    model_name: str = "gpt-4o"
    """Picks the tokenizer and the default budget."""
    budget: int = 24_000
    """Prompt tokens the window may use."""
    output_tokens: int = 600
    """A command's output above this is trimmed to head + tail; the full text is an artefact."""
    command_timeout: float = 600.0
    system_prompt: str = SYSTEM_PROMPT
    blocks: dict[str, str] = field(default_factory=dict)
    """Session-layer context: repository analysis, host facts, experience, rolling summary."""
    thresholds: Thresholds = field(default_factory=Thresholds)
    """Warn / standard / deep compression points, as fractions of ``budget``."""
    artifacts_dir: str | None = None
    """Where trimmed outputs are kept (a directory per run); default beside the SQLite file."""


class AgentLoop:
    """Drives one agent run on a store; see the module docstring.

    ``policy`` (``check(command)`` → verdict with ``action`` allow/confirm/deny and
    ``reason``), ``redact`` (str → str) and ``interaction`` (``ask(request)``) are optional;
    without an interaction handler a question pauses the run until :meth:`answer`.
    """

    def __init__(
        self,
        model: ChatModel,
        session: Session,
        store: CheckpointStore,
        *,
        config: LoopConfig | None = None,
        policy: Any = None,
        redact: Callable[[str], str] | None = None,
        interaction: Any = None,
        artifacts: ArtifactStore | None = None,
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        self.model = model
        self.store = store
        self.config = config or LoopConfig()
        self.policy = policy
        # the policy is enforced by GuardedSession, confirmations go to the interaction handler
        self.session: Any = (
            session if policy is None else GuardedSession(session, policy, confirm=self._confirm)
        )
        self.redact = redact or (lambda text: text)
        self.interaction = interaction
        self._artifacts = artifacts
        self._run_artifacts: dict[str, ArtifactStore] = {}
        self._policies: dict[str, ContextPolicy] = {}
        self.on_event = on_event
        self.prompt_sizes: list[int] = []
        """Prompt tokens sent at each iteration of this process (for measurements)."""
        self._windows: dict[str, tuple[int, ContextWindow]] = {}
        self._secret_env: dict[str, str] = {}

    # == entry points ===============================================================
    def workflow(self) -> Workflow:
        """One step that loops (``goto`` itself) until the agent finishes or the iteration
        limit stops it; the iteration number is the state's ``iteration``."""
        n = self.config.max_iterations
        return Workflow(
            [Step(id="iteration", name="Iteration", fn=self._iterate, phase="agent")],
            name="agent",
            max_routed=2 * n + 10,  # a safety bound: the loop itself stops at max_iterations
        )

    def runner(self) -> Runner:
        reducers = (
            default_registry()
            .register("command_history", "append")
            .register("user_interactions", "append")
            .register("actions", "append")
            .register("context_log", "append")
        )
        return Runner(self.workflow(), self.store, reducers=reducers, on_event=self.on_event)

    async def start(self, run_id: str, goal: str, *, inputs: Mapping[str, Any] | None = None) -> RunResult:
        """Start a run on ``goal``; ``inputs`` adds keys to its initial state."""
        window = self._new_window(goal)
        state = {
            **(inputs or {}),
            "goal": goal,
            "context_meta": window.meta_state(),
            "context_log": window.take_journal(),
            "invalid_replies": 0,
        }
        return await self.runner().start(run_id, state)

    async def resume(self, run_id: str) -> RunResult:
        return await self.runner().resume(run_id)

    async def approve(self, run_id: str, approved: bool = True) -> RunResult:
        """Decide the approval a paused run waits on (``pending_approval``), then resume it.

        Approved: the command runs when the model proposes it again. Refused: the model is
        told so and adapts.
        """
        await decide_approval(self.store, run_id, approved)
        return await self.resume(run_id)

    async def answer(self, run_id: str, value: str) -> RunResult:
        """Answer the question a paused run is waiting on, then resume it."""
        await self.store.update_state(run_id, {"answer": value})
        return await self.resume(run_id)

    # == one iteration ==============================================================
    async def _iterate(self, sc: StepContext) -> Mapping[str, Any]:
        n = int(sc.get("iteration", 0)) + 1
        update = dict(await self._iteration(sc, n))
        update["iteration"] = n
        if sc.finish_requested is None:
            if n >= self.config.max_iterations and not sc.pause_requested:
                sc.finish("FAILED", f"stopped after {n} iterations without the agent saying done")
            else:  # the next iteration (after a pause: once the answer is in)
                sc.goto("iteration", reason=f"iteration {n + 1}")
        return update

    async def _iteration(self, sc: StepContext, n: int) -> Mapping[str, Any]:
        window = self._window(sc.state)
        update: dict[str, Any] = {}
        if sc.get("pending_question"):
            self._take_answer(sc, window, update)
            if sc.pause_requested:
                return update
        self._instant(window, n, sc.get("last_error"))
        events: list[ContextEvent] = []
        reply = await call_with_recovery(
            window,
            lambda w: self._call_model(sc.run_id, w, events),
            max_attempts=2,  # one compression, then a DATA failure: a third call is refused as well
            archive=self.artifacts_for(sc.run_id),
        )
        self._context_events(sc, events, update)
        usage = getattr(reply, "usage", None)
        if usage is not None and getattr(usage, "prompt_tokens", None):
            window.observe_provider_usage(int(usage.prompt_tokens))
        try:
            action = parse_action(reply.text)
        except ModelOutputError as exc:
            return self._invalid(sc, window, n, exc, update)
        update["invalid_replies"] = 0
        update["last_error"] = None
        await self._act(sc, window, n, action, update)
        if sc.finish_requested is None and not sc.pause_requested and n >= self.config.max_iterations:
            sc.finish("FAILED", f"stopped after {n} iterations without the agent saying done")
        self._save_window(sc, window, update)
        return update

    async def _call_model(self, run_id: str, window: ContextWindow, events: list[ContextEvent]) -> Any:
        events += self.policy_for(run_id).before_call(window)
        messages = window.to_messages("openai")
        self.prompt_sizes.append(window.usage().tokens)
        try:
            return await self.model.complete(messages, json_mode=True)
        except Exception as exc:
            if is_prompt_too_long(exc):  # call_with_recovery fits the window and calls again
                reason = f"the provider refused the prompt as too long: {str(exc)[:160]}"
                events.append(
                    ContextEvent(kind="context_overflow", before_tokens=window.usage().tokens, reason=reason)
                )
            raise

    def policy_for(self, run_id: str) -> ContextPolicy:
        """The run's compression policy (the monitor keeps which thresholds are armed)."""
        policy = self._policies.get(run_id)
        if policy is None:
            policy = ContextPolicy(thresholds=self.config.thresholds, archive=self.artifacts_for(run_id))
            self._policies[run_id] = policy
        return policy

    def artifacts_for(self, run_id: str) -> ArtifactStore:
        """Where the run's trimmed outputs and archives go; durable unless nothing says where."""
        if self._artifacts is not None:
            return self._artifacts
        store = self._run_artifacts.get(run_id)
        if store is None:
            base = self.config.artifacts_dir
            path = getattr(self.store, "path", None)
            if base is None and isinstance(path, str) and path != ":memory:":
                base = f"{path}.artifacts"
            if base is None:
                logger.warning("no artifacts_dir and no store file: trimmed outputs are kept in memory only")
                store = InMemoryArtifactStore()
            else:
                store = FileArtifactStore(Path(base) / _safe(run_id))
            self._run_artifacts[run_id] = store
        return store

    @property
    def artifacts(self) -> ArtifactStore | None:
        """The artefact store given at construction (None: one per run, see artifacts_for)."""
        return self._artifacts

    def _context_events(self, sc: StepContext, events: list[ContextEvent], update: dict[str, Any]) -> None:
        for event in events:
            self._emit(event.kind, sc, **event.detail())
        if events:
            logged = [
                {"kind": e.kind, "step": sc.step.id, "detail": e.detail(), "ts": _iso_now()} for e in events
            ]
            sc.state.merge(runtime_update(event_log=logged))

    def _save_window(self, sc: StepContext, window: ContextWindow, update: dict[str, Any]) -> None:
        update["context_meta"] = window.meta_state()
        update["context_log"] = window.take_journal()
        self._windows[sc.run_id] = (sc.state.version + 1, window)

    async def _act(
        self, sc: StepContext, window: ContextWindow, n: int, action: AgentAction, update: dict[str, Any]
    ) -> None:
        call_id = f"it{n}"
        shown = self.redact(json.dumps(action.to_dict(), ensure_ascii=False))
        window.add(new_item("tool_call", shown, id=f"call-{n}", tool_call_id=call_id))
        if action.action_type == "execute":
            await self._execute(sc, window, n, action, update, call_id)
        elif action.action_type == "ask_user":
            await self._ask(sc, window, n, action, update)
        elif action.action_type == "read_artifact":
            self._read_artifact(sc, window, n, action, call_id)
        elif action.action_type in ("done", "step_done"):
            window.add(new_item("decision", f"done: {action.message}", id=f"done-{n}"))
            update["final_output"] = action.message
            if action.outputs is not None:
                update["step_outputs"] = action.outputs
            update["actions"] = [self._logged(n, action)]
            sc.finish("COMPLETED", action.message or "")
        else:
            window.add(new_item("decision", f"failed: {action.message}", id=f"failed-{n}"))
            update["actions"] = [self._logged(n, action)]
            sc.finish("FAILED", action.message or "")

    async def _execute(
        self,
        sc: StepContext,
        window: ContextWindow,
        n: int,
        action: AgentAction,
        update: dict[str, Any],
        call_id: str,
    ) -> None:
        command = action.command or ""
        provenance = _provenance(command, window)
        self._emit(
            "command", sc, command=self.redact(command), reasoning=action.reasoning, provenance=provenance
        )
        guarded = isinstance(self.session, GuardedSession)
        if guarded:  # approvals live in the run's state, so a resumed run does not ask twice
            self.session.approvals = set(sc.get("approvals") or ())
        try:
            extra = {"provenance": provenance} if guarded else {}
            result = await self.session.run(
                command, timeout=self.config.command_timeout, env=dict(self._secret_env) or None, **extra
            )
        except ToolError as exc:  # CommandRefused included: the model reads why and adapts
            text = self.redact(f"{type(exc).__name__}: {exc}")
            if isinstance(exc, ApprovalRequired):  # unattended: a human decides, then resume
                sc.pause(self.redact(f"approval needed: {exc.reason}"))
                update["pending_approval"] = {"key": exc.key, "command": self.redact(command), "reason": text}
            window.add(new_item("tool_result", text, id=f"result-{n}", tool_call_id=call_id))
            update["command_history"] = [
                {
                    "iteration": n,
                    "command": self.redact(command),
                    "success": False,
                    "exit_code": None,
                    "stdout": "",
                    "stderr": text,
                    "reasoning": action.reasoning,
                    "provenance": provenance,
                }
            ]
            update["last_error"] = text
            return
        if guarded and self.session.approvals != set(sc.get("approvals") or ()):
            update["approvals"] = sorted(self.session.approvals)
        stdout, stderr = self.redact(result.stdout or ""), self.redact(result.stderr or "")
        tail = (stdout.strip() or stderr.strip()).splitlines()[-1:] or [""]
        self._emit("command_result", sc, exit_code=result.exit_code, tail=tail[0][:160])
        body = f"exit code {result.exit_code}\n{stdout}" + (f"\n[stderr]\n{stderr}" if stderr.strip() else "")
        trimmed = trim_output(
            body,
            max_tokens=self.config.output_tokens,
            tokenizer=window.tokenizer,
            store=self.artifacts_for(sc.run_id),
        )
        window.add(new_item("tool_result", trimmed.text, id=f"result-{n}", tool_call_id=call_id))
        update["command_history"] = [
            {
                "iteration": n,
                "timestamp": dt.datetime.now(dt.UTC).isoformat(),
                "command": self.redact(command),
                "reasoning": action.reasoning,
                "success": bool(result.success),
                "exit_code": result.exit_code,
                "stdout": stdout[-4000:],
                "stderr": stderr[-4000:],
                "artifact_id": trimmed.artifact_id,
                "provenance": provenance,
            }
        ]
        failed = f"`{command}` exited {result.exit_code}"
        update["last_error"] = None if result.success else self.redact(failed)

    def _read_artifact(
        self, sc: StepContext, window: ContextWindow, n: int, action: AgentAction, call_id: str
    ) -> None:
        """A slice of a stored output, by lines or bytes, trimmed like any output."""
        aid = action.artifact_id or ""
        try:
            text = self.artifacts_for(sc.run_id).get(aid)
        except ArtifactNotFound:
            body = f"no artifact {aid!r} for this run"
        else:
            start, end = (action.start or 1) - 1, action.end
            if action.unit == "bytes":
                data = text.encode()
                part = data[start : end or len(data)].decode(errors="replace")
                where = f"bytes {start + 1}-{min(end or len(data), len(data))} of {len(data)}"
            else:
                lines = text.splitlines()
                part = "\n".join(lines[start : end or len(lines)])
                where = f"lines {start + 1}-{min(end or len(lines), len(lines))} of {len(lines)}"
            preview = trim_output(
                part, max_tokens=self.config.output_tokens, tokenizer=window.tokenizer,
                store=InMemoryArtifactStore(),
            ).text  # fmt: skip
            body = f"artifact {aid}, {where}:\n{preview}"
        window.add(new_item("tool_result", body, id=f"result-{n}", tool_call_id=call_id))

    async def _confirm(self, command: str, reason: str) -> bool | None:
        """GuardedSession's confirmation of a risky command, asked through the handler;
        ``None`` without one: the command raises ApprovalRequired and the run pauses."""
        if self.interaction is None:
            return None
        from tether.agent.interaction import InteractionRequest

        response = await self.interaction.ask(
            InteractionRequest(
                question=f"Allow this command? {self.redact(command)}\n({reason})",
                options=["yes", "no"],
                input_type="confirm",
                category="confirmation",
                default_option="no",
            )
        )
        return not response.cancelled and str(response.value).lower() in {"yes", "y", "true"}

    async def _ask(
        self, sc: StepContext, window: ContextWindow, n: int, action: AgentAction, update: dict[str, Any]
    ) -> None:
        question = {
            "question": action.question,
            "options": action.options,
            "input_type": action.input_type,
            "category": action.category,
            "context": action.context,
            "default_option": action.default_option,
            "iteration": n,
        }
        update["actions"] = [self._logged(n, action)]
        if self.interaction is None:
            update["pending_question"] = question
            sc.pause(f"waiting for an answer: {action.question}")
            return
        from tether.agent.interaction import InteractionRequest

        response = await self.interaction.ask(
            InteractionRequest(
                question=action.question or "",
                options=action.options or (),
                input_type=action.input_type,
                category=action.category,
                context=action.context,
                default_option=action.default_option,
            )
        )
        if response.cancelled:
            window.add(new_item("tool_result", "the user cancelled", id=f"result-{n}", tool_call_id=f"it{n}"))
            sc.finish("FAILED", "cancelled by the user")
            return
        value = response.reveal() if action.input_type == "secret" else str(response.value)
        self._record_answer(window, n, question, value, update)

    def _take_answer(self, sc: StepContext, window: ContextWindow, update: dict[str, Any]) -> None:
        question = dict(sc.get("pending_question"))
        value = sc.get("answer")
        if value is None:
            sc.pause("still waiting for an answer")
            return
        update["pending_question"] = None
        update["answer"] = None
        self._record_answer(window, int(question.get("iteration", 0)), question, str(value), update)

    def _record_answer(
        self, window: ContextWindow, n: int, question: dict[str, Any], value: str, update: dict[str, Any]
    ) -> None:
        if question.get("input_type") == "secret":
            name = f"TETHER_SECRET_{len(self._secret_env) + 1}"
            self._secret_env[name] = value
            if hasattr(self.redact, "add"):
                self.redact.add(value)
            shown = f'(secret stored in ${name}; use "${name}" in commands, never ask for the value)'
        else:
            shown = value
        window.add(new_item("decision", f"Q: {question.get('question')}\nA: {shown}", id=f"answer-{n}"))
        window.add(
            new_item("tool_result", f"user answered: {shown}", id=f"result-{n}", tool_call_id=f"it{n}")
        )
        update["user_interactions"] = [
            {"iteration": n, "question": question.get("question"), "answer": shown}
        ]

    def _invalid(
        self, sc: StepContext, window: ContextWindow, n: int, exc: ModelOutputError, update: dict[str, Any]
    ) -> dict[str, Any]:
        count = int(sc.get("invalid_replies") or 0) + 1
        update["invalid_replies"] = count
        update["actions"] = [
            {
                "iteration": n,
                "timestamp": dt.datetime.now(dt.UTC).isoformat(),
                "action": "invalid",
                "error": self.redact(str(exc)),
                "reply": self.redact(str(getattr(exc, "raw", "") or ""))[:2000],
            }
        ]
        shown = self.redact(str(exc))
        update["last_error"] = f"your last reply was invalid: {shown}. Answer with exactly one JSON object."
        if count >= self.config.max_invalid_replies:
            sc.finish("FAILED", f"the model sent {count} invalid replies in a row: {shown}")
        elif n >= self.config.max_iterations:  # the last reply decides: an invalid one is no success
            sc.finish("FAILED", f"the last reply (iteration {n}) was invalid: {exc}")
        self._save_window(sc, window, update)
        return update

    def _logged(self, n: int, action: AgentAction) -> dict[str, Any]:
        """A non-command action as the run log's ``steps`` shows it."""
        entry = {"iteration": n, "timestamp": dt.datetime.now(dt.UTC).isoformat()}
        for key, value in action.to_dict().items():
            if key in ("input_type", "category") and action.action_type != "ask_user":
                continue  # defaults that mean nothing outside a question
            entry[key] = self.redact(value) if isinstance(value, str) else value
        return entry

    def _emit(self, kind: str, sc: StepContext, **detail: Any) -> None:
        if self.on_event is not None:
            self.on_event(Event(kind=kind, run_id=sc.run_id, step=sc.step.id, detail=detail))

    # == the window =================================================================
    def _new_window(self, goal: str) -> ContextWindow:
        cfg = self.config
        window = ContextWindow(cfg.model_name, budget=cfg.budget)
        window.start_journal()
        window.add(new_item("system", cfg.system_prompt, id="system", pinned=True))
        window.add(new_item("goal", goal, id="goal", pinned=True))  # the item labels itself "Goal:"
        for name, text in cfg.blocks.items():
            if text.strip():
                window.add(new_item("state", self.redact(text), id=f"block-{name}", layer=Layer.SESSION))
        return window

    def _window(self, ctx: ExecutionContext) -> ContextWindow:
        # popped, not read: an iteration that fails half-way leaves no half-changed
        # window behind, and its retry rebuilds the window from the restored state
        cached = self._windows.pop(ctx.run_id, None)
        if cached is not None and cached[0] == ctx.version:
            window = cached[1]
        elif ctx.get("context_meta") is not None:
            window = ContextWindow.from_log(ctx.get("context_meta"), ctx.get("context_log") or [])
        else:  # a run started before the window was stored as a log
            window = ContextWindow.from_state(ctx.get("context_window"))
        window.start_journal()
        return window

    def _instant(self, window: ContextWindow, n: int, error: str | None) -> None:
        left = self.config.max_iterations - n
        window.upsert(
            new_item(
                "reminder",
                f"Iteration {n} of {self.config.max_iterations} ({left} left).",
                id="instant-iteration",
            )
        )
        if error:
            window.upsert(new_item("error", f"Last error: {error}", id="instant-error"))
        elif window.get("instant-error") is not None:
            window.remove("instant-error")

    # == the run log ==============================================
    async def run_log(self, run_id: str, **header: Any) -> dict[str, Any]:
        cp = await self.store.load(run_id)
        if cp is None:
            return {}
        info = await self.store.get_run(run_id)
        status = {RunStatus.COMPLETED: "success", RunStatus.FAILED: "failed"}.get(
            info.status if info else cp.status, str(info.status if info else cp.status).lower()
        )
        steps: list[dict[str, Any]] = [
            {
                "iteration": h["iteration"],
                "timestamp": h.get("timestamp"),
                "action": "execute",
                "command": h["command"],
                "reasoning": h.get("reasoning"),
                "result": {k: h.get(k) for k in ("success", "exit_code", "stdout", "stderr")},
            }
            for h in cp.state.get("command_history", [])
        ]
        answers = {a.get("iteration"): a.get("answer") for a in cp.state.get("user_interactions", [])}
        for entry in cp.state.get("actions", []):
            entry = dict(entry)
            if entry.get("action") == "ask_user" and entry["iteration"] in answers:
                entry["answer"] = answers[entry["iteration"]]
            steps.append(entry)
        steps.sort(key=lambda e: int(e.get("iteration") or 0))  # stable: a command before its failure
        return {
            **header,
            "run_id": run_id,
            "end_time": cp.timestamp.isoformat(),
            "status": status,
            "final_output": cp.state.get("final_output"),
            "steps": steps,
            "user_interactions": cp.state.get("user_interactions", []),
        }


def _safe(run_id: str) -> str:
    """A run id as one directory name."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id) or "run"


def _iso_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def _shell_quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


def _now() -> float:
    return time.time()


def _provenance(command: str, window: ContextWindow) -> str:
    """``tool_output`` when the command appears in what commands printed (or files showed):
    the model copied it, perhaps from an injected instruction; else the model's own ``model``."""
    needle = " ".join(command.split())
    if len(needle) < 8:
        return "model"
    for item in window:
        refusal = item.content.startswith(("CommandRefused", "ApprovalRequired"))  # quotes the command itself
        if item.kind == "tool_result" and not refusal and needle in " ".join(item.content.split()):
            return "tool_output"
    return "model"
