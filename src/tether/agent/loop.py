"""The agent loop as a durable workflow: one runtime step that loops, once per iteration.

An iteration builds the prompt from the run's context window, calls the model, and hands
the reply to :func:`~tether.agent.decide.decide`, whose frozen ``Turn`` says what to do.
This module does the I/O only: the model call, the turn's action through the tools (a
command, an artefact read, a question), and the turn's state update returned to the
:class:`~tether.runtime.Runner`, which merges it through the reducers and checkpoints.
State keys: ``iteration``, ``goal``, ``context_meta`` and ``context_log`` (the window as a
log of changes), ``command_history``, ``user_interactions``, ``actions`` (appended),
``invalid_replies``, ``last_error``, ``pending_question``, ``pending_approval``,
``approvals``, ``final_output``; context events go to the run's event log.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from tether.agent import decide as pure
from tether.agent.actions import AgentAction
from tether.agent.approvals import decide_approval
from tether.agent.asking import Asker
from tether.agent.calls import CallLog
from tether.agent.checkpoints import remind_at_checkpoint
from tether.agent.config import SYSTEM_PROMPT, LoopConfig, loop_reducers
from tether.agent.decide import Turn
from tether.agent.effects import Inflight, SideEffects, settle_cut
from tether.agent.interaction import UserInteractionHandler
from tether.agent.prompt import KeptWindows, new_window
from tether.agent.reads import read_artifact
from tether.agent.resources import RunResources
from tether.agent.runlog import run_log
from tether.agent.stuck import StuckConfig
from tether.agent.watch import Watch, log_context_events, safe_emit
from tether.context import ContextWindow
from tether.context.artifacts import ArtifactStore
from tether.context.policy import ContextEvent, ContextPolicy
from tether.context.recovery import call_with_recovery, is_prompt_too_long
from tether.context.trim import trim_output
from tether.errors import ToolError
from tether.models.base import ChatModel, ModelReply
from tether.runtime import Event, Runner, RunResult, Step, StepContext, Workflow
from tether.runtime.control import amend_pending_report
from tether.stores.base import CheckpointStore
from tether.tools.base import Session
from tether.tools.guard import GuardedSession
from tether.tools.policy import CommandPolicy
from tether.tools.redact import default_redactor

__all__ = ["SYSTEM_PROMPT", "AgentLoop", "LoopConfig"]

logger = logging.getLogger(__name__)

"""The state keys an iteration appends to (a checkpoint stores only what it added)."""


class AgentLoop:
    """Drives agent runs on a store; see the module docstring.

    ``policy`` judges every command (through a :class:`GuardedSession`), ``redact`` hides
    secrets from logs, prompts and state (default: the process's
    :func:`~tether.tools.redact.default_redactor`), ``interaction`` answers questions and confirmations;
    without it a question or a command needing approval pauses the run until
    :meth:`answer` / :meth:`approve`.
    """

    def __init__(
        self,
        model: ChatModel,
        session: Session,
        store: CheckpointStore,
        *,
        config: LoopConfig | None = None,
        policy: CommandPolicy | None = None,
        redact: Callable[[str], str] | None = None,
        interaction: UserInteractionHandler | None = None,
        artifacts: ArtifactStore | None = None,
        on_event: Callable[[Event], None] | None = None,
        stuck: StuckConfig | None = None,
        effects: SideEffects | None = None,
    ) -> None:
        self.model = model
        self.store = store
        self.config = config or LoopConfig()
        self.policy = policy
        self.redact = redact or default_redactor()  # credentials and the environment's secrets
        self.interaction = interaction
        self.asker = Asker(interaction, self.redact)
        self.session: Session | GuardedSession = (
            session if policy is None else GuardedSession(session, policy, confirm=self.asker.confirm)
        )
        self.runs = RunResources(self.config, store, artifacts)  # per run: compression policy, artefacts
        self.on_event = on_event
        self.watch = Watch(stuck or StuckConfig(), self.asker, self._emit)  # stuck detection
        self.effects = Inflight(effects or SideEffects())  # commands that change the host; probes
        self.prompt_sizes: list[int] = []
        """Prompt tokens sent at each iteration of this process (for measurements)."""
        self.calls = CallLog(model, redact=self.redact)  # prompt records, schema, streaming
        self.windows = KeptWindows()  # each run's window as its last step left it

    # == entry points ===============================================================
    def workflow(self) -> Workflow:
        """One step that loops (``goto`` itself) until the agent finishes or the iteration
        limit stops it; the iteration number is the state's ``iteration``."""
        step = Step(id="iteration", name="Iteration", fn=self._iterate, phase="agent")
        effect = Step(id="effect", name="Command", fn=self._effect, phase="agent", idempotent=False)
        # a safety bound: the loop itself stops at max_iterations
        return Workflow([step, effect], name="agent", max_routed=4 * self.config.max_iterations + 10)

    def runner(self) -> Runner:
        return Runner(self.workflow(), self.store, reducers=loop_reducers(), on_event=self.on_event)

    async def start(self, run_id: str, goal: str, *, inputs: Mapping[str, object] | None = None) -> RunResult:
        """Start a run on ``goal``; ``inputs`` adds keys to its initial state."""
        window = new_window(self.config, goal, self.redact)
        state: dict[str, object] = {**(inputs or {}), "goal": goal, "invalid_replies": 0}
        self.windows.keep(run_id, window, state, [])
        return await self.runner().start(run_id, state)

    async def resume(self, run_id: str, *, decision: str | None = None, note: str | None = None) -> RunResult:
        """Continue a run (``note``: a takeover's what-I-did); a command a crash cut is probed or named."""
        if note is not None:
            await amend_pending_report(self.store, run_id, note=note)
        return await settle_cut(self, await self.runner().resume(run_id, decision=decision))

    async def approve(self, run_id: str, approved: bool = True) -> RunResult:
        """Decide the approval a paused run waits on, then resume (refused: the model adapts)."""
        await decide_approval(self.store, run_id, approved)
        return await self.resume(run_id)

    async def answer(self, run_id: str, value: str) -> RunResult:
        """Answer the question a paused run is waiting on, then resume it."""
        await self.store.update_state(run_id, {"answer": value})
        return await self.resume(run_id)

    async def run_log(self, run_id: str, **header: object) -> dict[str, Any]:
        """The run's JSON log (see :func:`tether.agent.runlog.run_log`)."""
        return await run_log(self.store, run_id, **header)

    # == one iteration ==============================================================
    async def _iterate(self, sc: StepContext) -> Mapping[str, Any]:
        n = int(sc.get("iteration", 0)) + 1
        update = await self._iteration(sc, n)
        update["iteration"], update["iteration_at"] = n, time.time()
        if update.get("inflight"):  # a command that changes the host runs in a step of its own
            sc.goto("effect", reason=f"iteration {n}: a command with side effects")
        else:
            self._next(sc, n)
        return update

    def _next(self, sc: StepContext, n: int) -> None:
        if sc.finish_requested is None:
            if n >= self.config.max_iterations and not sc.pause_requested:
                sc.finish("FAILED", f"stopped after {n} iterations without the agent saying done")
            else:  # the next iteration (after a pause: once the answer is in)
                sc.goto("iteration", reason=f"iteration {n + 1}")

    async def _effect(self, sc: StepContext) -> Mapping[str, Any]:
        """Run the command ``inflight`` names; not idempotent: a crash in here is never re-run blindly."""
        n, window = int(sc.get("iteration", 0)), self.windows.load(sc.run_id, sc.state)
        update: dict[str, object] = {"inflight": None}
        if inflight := sc.get("inflight"):
            action, turn = self.effects.turn(sc, n, dict(inflight), self.redact)
            self._apply(sc, window, turn or await self._run(sc, window, n, action), update)
            await self.watch.after(sc, window, n, action, update)
        self.windows.keep(sc.run_id, window, update, sc.get("context_log"))
        self._next(sc, n)
        return update

    async def _iteration(self, sc: StepContext, n: int) -> dict[str, object]:
        window = self.windows.load(sc.run_id, sc.state)
        update = self.watch.before(sc, window)  # a stuck run pauses here, with a report
        if sc.get("pending_question"):
            self._take_answer(sc, window, update)
            if sc.pause_requested:
                return update
        events = remind_at_checkpoint(self.policy_for(sc.run_id), window, n, self.config.max_iterations, sc)
        reply = await call_with_recovery(
            window,
            lambda w: self._call_model(sc.run_id, w, events),
            max_attempts=2,  # one compression, then a DATA failure: a third call is refused as well
            archive=self.artifacts_for(sc.run_id),
        )
        update["prompt_log"] = [self.calls.record(sc.run_id, sc.state, window, reply, iteration=n)]
        log_context_events(sc, events, self._emit)
        if reply.usage is not None and reply.usage.prompt_tokens:
            window.observe_provider_usage(int(reply.usage.prompt_tokens))
        turn = pure.decide(
            reply.text, sc.state, self.config, interactive=self.interaction is not None, redact=self.redact
        )
        self._apply(sc, window, turn, update)
        if turn.action is not None and self.effects.declares(turn.action.command or ""):
            update["inflight"] = self.effects.record(sc.run_id, n, turn.action, self.redact)
        elif turn.action is not None:
            self._apply(sc, window, await self._run(sc, window, turn.iteration, turn.action), update)
            await self.watch.after(sc, window, turn.iteration, turn.action, update)
        self.windows.keep(sc.run_id, window, update, sc.get("context_log"))
        return update

    def _apply(self, sc: StepContext, window: ContextWindow, turn: Turn, update: dict[str, object]) -> None:
        for item in turn.items:
            window.add(item)
        update.update(turn.update)
        if turn.finish is not None:
            sc.finish(turn.finish.status, turn.finish.message)
        if turn.pause is not None:
            sc.pause(turn.pause)

    async def _call_model(self, run_id: str, window: ContextWindow, events: list[ContextEvent]) -> ModelReply:
        events += self.policy_for(run_id).before_call(window)
        self.prompt_sizes.append(window.usage().tokens)
        try:
            options = self.calls.options(run_id, "iteration", self.on_event)
            return await self.model.complete(window.to_messages("openai"), json_mode=True, **options)
        except Exception as exc:
            if is_prompt_too_long(exc):  # call_with_recovery fits the window and calls again
                reason = f"the provider refused the prompt as too long: {str(exc)[:160]}"
                tokens = window.usage().tokens
                events.append(ContextEvent(kind="context_overflow", before_tokens=tokens, reason=reason))
            raise

    def policy_for(self, run_id: str) -> ContextPolicy:
        """The run's compression policy (its monitor keeps which thresholds are armed)."""
        return self.runs.policy(run_id)

    def artifacts_for(self, run_id: str) -> ArtifactStore:
        """Where the run's trimmed outputs and archives go (see ``artifact_store_for``)."""
        return self.runs.artifacts(run_id)

    @property
    def artifacts(self) -> ArtifactStore | None:
        """The artefact store given at construction (None: one per run, see artifacts_for)."""
        return self.runs.shared_artifacts

    # == the tools ==================================================================
    async def _run(self, sc: StepContext, window: ContextWindow, n: int, action: AgentAction) -> Turn:
        if action.action_type == "execute":
            return await self._execute(sc, window, n, action)
        if action.action_type == "ask_user":
            return await self.asker.ask(n, action)
        item = read_artifact(self.artifacts_for(sc.run_id), window, n, action, self.config.output_tokens)
        return Turn(iteration=n, items=(item,))

    async def _execute(self, sc: StepContext, window: ContextWindow, n: int, action: AgentAction) -> Turn:
        command = action.command or ""
        origin = pure.provenance(command, window)
        self._emit("command", sc, command=self.redact(command), reasoning=action.reasoning, provenance=origin)
        guard = self.session if isinstance(self.session, GuardedSession) else None
        approved = set(sc.get("approvals") or ())
        if guard is not None:  # approvals live in the run's state: a resumed run does not ask twice
            guard.approvals = set(approved)
        env = dict(self.asker.secret_env) or None
        timeout = self.config.command_timeout
        try:
            if guard is not None:
                result = await guard.run(command, timeout=timeout, env=env, provenance=origin)
            else:
                result = await self.session.run(command, timeout=timeout, env=env)
        except ToolError as exc:  # CommandRefused included: the model reads why and adapts
            return pure.refused_turn(n, action, exc, origin=origin, redact=self.redact)
        result = pure.redacted(result, self.redact)
        body, last = pure.output_of(result)
        self._emit("command_result", sc, exit_code=result.exit_code, tail=last[:160])
        store = self.artifacts_for(sc.run_id)
        trimmed = trim_output(
            body, max_tokens=self.config.output_tokens, tokenizer=window.tokenizer, store=store
        )
        turn = pure.command_turn(
            n,
            action,
            result,
            trimmed.text,
            artifact_id=trimmed.artifact_id,
            origin=origin,
            redact=self.redact,
        )
        if guard is not None and guard.approvals != approved:
            turn = dataclasses.replace(turn, update={**turn.update, "approvals": sorted(guard.approvals)})
        return turn

    def _take_answer(self, sc: StepContext, window: ContextWindow, update: dict[str, object]) -> None:
        question = dict(sc.get("pending_question"))
        value = sc.get("answer")
        if value is None:
            sc.pause("still waiting for an answer")
            return
        update.update(pending_question=None, answer=None)
        self._apply(
            sc, window, self.asker.answer(int(question.get("iteration", 0)), question, str(value)), update
        )

    def _emit(self, kind: str, sc: StepContext, **detail: object) -> None:
        safe_emit(self.on_event, Event(kind=kind, run_id=sc.run_id, step=sc.step.id, detail=detail))
