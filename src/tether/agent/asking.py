"""The agent loop's side of talking to a human: questions and command confirmations go
through the interaction handler, and secret answers stay in this process."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tether.agent import decide as pure
from tether.agent.actions import AgentAction
from tether.agent.interaction import UserInteractionHandler

__all__ = ["Asker"]


class Asker:
    """Asks ``handler`` (None: nobody can answer now, so the run pauses instead).

    A secret answer is kept in :attr:`secret_env` (commands get it as an environment
    variable), taught to ``redact`` when it can learn (a ``Redactor``), and never stored
    or shown to the model.
    """

    def __init__(self, handler: UserInteractionHandler | None, redact: Callable[[str], str]) -> None:
        self.handler = handler
        self.redact = redact
        self.secret_env: dict[str, str] = {}

    async def confirm(self, command: str, reason: str) -> bool | None:
        """A ``GuardedSession`` confirmation; None without a handler (the command then
        raises ApprovalRequired and the run pauses for ``approve``)."""
        if self.handler is None:
            return None
        response = await self.handler.ask(pure.confirmation(self.redact(command), reason))
        return not response.cancelled and str(response.value).lower() in {"yes", "y", "true"}

    async def ask(self, n: int, action: AgentAction) -> pure.Turn:
        """Ask an ``ask_user`` action's question now (``decide`` pauses when no one can)."""
        assert self.handler is not None
        response = await self.handler.ask(pure.request_for(action))
        if response.cancelled:
            return pure.cancelled_turn(n)
        value = (response.reveal() or "") if action.input_type == "secret" else str(response.value)
        return self.answer(n, {"question": action.question, "input_type": action.input_type}, value)

    def answer(self, n: int, question: Mapping[str, object], value: str) -> pure.Turn:
        """The turn an answer to question ``n`` makes (now, or later through ``answer``)."""
        if question.get("input_type") != "secret":
            return pure.answer_turn(n, question, value)
        name = f"TETHER_SECRET_{len(self.secret_env) + 1}"
        self.secret_env[name] = value
        learn = getattr(self.redact, "add", None)
        if callable(learn):
            learn(value)
        return pure.answer_turn(n, question, value, secret=name)
