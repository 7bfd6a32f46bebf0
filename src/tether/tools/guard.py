"""``GuardedSession``: a ``Session`` that asks the ``CommandPolicy`` before every command.

``decide(verdict, mode)`` turns the policy's verdict into what happens in a safety mode:

=================  ==============  ===========================  =====================
verdict            ``sandboxed``   ``ask``                      ``trusted``
=================  ==============  ===========================  =====================
deny               refuse          refuse                       refuse
confirm            ask             ask                          ask
needs the host     ask (escalate)  ask                          run
sandbox (dynamic)  run sandboxed   ask                          run
allow              run sandboxed   run                          run
=================  ==============  ===========================  =====================

An approved command runs outside the sandbox when it needs the host; a sandboxed command
keeps the network only when it needs it and every host it names is allowed, and never when
part of it is computed at run time.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Literal, Self

from tether.errors import CommandRefused
from tether.tools.policy import CommandPolicy, PolicyVerdict
from tether.tools.result import CommandResult

if TYPE_CHECKING:
    from tether.tools.base import Session
    from tether.tools.facts import HostFacts

__all__ = ["ConfirmCallback", "Decision", "GuardedSession", "Mode", "decide", "guarded"]

logger = logging.getLogger(__name__)

Mode = Literal["sandboxed", "ask", "trusted"]
"""``sandboxed`` (the default): commands run in the OS sandbox, escalations ask;
``ask``: no sandbox, anything the policy cannot clear asks; ``trusted``: no sandbox, only
risky commands ask (dangerous: a prompt injection runs with your rights)."""
MODES: tuple[Mode, ...] = ("sandboxed", "ask", "trusted")


@dataclass(frozen=True, slots=True)
class Decision:
    """What happens to one command in one mode."""

    outcome: Literal["run", "ask", "refuse"]
    sandboxed: bool
    """Run inside the sandbox (after approval too, unless the command needs the host)."""
    network: bool
    """The sandbox keeps the network for this command."""
    escalation: bool = False
    """Asking because the command needs the host, not because it is risky."""


def decide(verdict: PolicyVerdict, mode: Mode) -> Decision:
    """The outcome of ``verdict`` in ``mode`` (see the module docstring's table)."""
    host = "host" in verdict.needs
    network = "network" in verdict.needs and verdict.action in ("allow", "confirm")
    if verdict.action == "deny":
        return Decision("refuse", False, False)
    if mode == "sandboxed":
        if verdict.action == "confirm":
            return Decision("ask", not host, network)
        if host:
            return Decision("ask", False, True, escalation=True)
        return Decision("run", True, network)
    if mode == "ask":
        if verdict.action == "allow" and not host:
            return Decision("run", False, True)
        return Decision("ask", False, True, escalation=host and verdict.action != "confirm")
    return Decision("ask" if verdict.action == "confirm" else "run", False, True)


ConfirmCallback = Callable[[str, str], Awaitable[bool]]
"""``await confirm(command, reason)``: True to run a risky command, False to refuse it."""


class GuardedSession:
    """Wraps a session: denied commands and unconfirmed risky ones raise ``CommandRefused``.

    A refused command never reaches the inner session. Without ``confirm`` every
    ``confirm`` verdict is refused, the safe default for unattended runs. ``workdir``
    (default: the inner session's directory when wrapped) is where deleting needs no
    confirmation; relative paths are resolved against the inner session's current ``cwd``.
    ``host_facts`` runs tether's own probe script and is not checked.
    """

    def __init__(
        self,
        session: Session,
        policy: CommandPolicy | None = None,
        *,
        confirm: ConfirmCallback | None = None,
        workdir: str | None = None,
    ) -> None:
        self.session = session
        self.policy = policy or CommandPolicy()
        self.confirm = confirm
        self.workdir = workdir or self.policy.workdir or session.cwd
        self.last_verdict: PolicyVerdict | None = None

    def __repr__(self) -> str:
        return f"GuardedSession({self.session!r})"

    @property
    def cwd(self) -> str | None:
        return self.session.cwd

    def check(self, command: str) -> PolicyVerdict:
        """The policy's verdict on ``command`` where the session stands now."""
        return self.policy.check(command, cwd=self.session.cwd, workdir=self.workdir)

    async def run(
        self,
        command: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a per-command limit, part of the Session API
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Check ``command``, ask if it is risky, and run it only if allowed."""
        verdict = self.policy.check(command, cwd=cwd or self.session.cwd, workdir=self.workdir)
        self.last_verdict = verdict
        if verdict.action == "deny":
            logger.warning("command denied by rule %s: %s", verdict.rule, verdict.reason)
            raise CommandRefused(command, f"{verdict.rule}: {verdict.reason}")
        if verdict.action == "confirm":
            approved = self.confirm is not None and await self.confirm(command, verdict.reason)
            if not approved:
                logger.warning("command not confirmed (rule %s): %s", verdict.rule, verdict.reason)
                why = "no one to confirm it" if self.confirm is None else "not confirmed"
                raise CommandRefused(command, f"{verdict.rule}: {verdict.reason}; {why}")
            logger.info("risky command confirmed (rule %s)", verdict.rule)
        return await self.session.run(command, timeout=timeout, cwd=cwd, env=env)

    async def host_facts(self) -> HostFacts:
        return await self.session.host_facts()

    async def close(self) -> None:
        await self.session.close()

    async def __aenter__(self) -> Self:
        await self.session.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.session.__aexit__(exc_type, exc, tb)


def guarded(
    session: Session,
    policy: CommandPolicy | None = None,
    confirm: ConfirmCallback | None = None,
    *,
    workdir: str | None = None,
) -> GuardedSession:
    """``GuardedSession(session, policy, confirm=confirm)``."""
    return GuardedSession(session, policy, confirm=confirm, workdir=workdir)
