"""``GuardedSession``: a ``Session`` that asks the ``CommandPolicy`` before every command.

``decide(verdict, mode)`` turns the policy's verdict into what happens in a safety mode:

=================  ==============  ===========================  =====================
verdict            ``sandboxed``   ``ask``                      ``trusted``
=================  ==============  ===========================  =====================
deny               refuse          refuse                       refuse
confirm            ask             ask                          ask
needs the host     ask (escalate)  ask                          run
sandbox (dynamic)  run sandboxed   ask                          ask (escalate)
allow              run sandboxed   run                          run
=================  ==============  ===========================  =====================

A ``sandbox`` verdict (what the command does is decided at run time) runs only inside a
working sandbox: in every mode without one it asks, so where the sandbox cannot start
(no bubblewrap, no user namespaces) such a command never runs unasked.

An approved command runs outside the sandbox when it needs the host; a sandboxed command
keeps the network only when it needs it and every host it names is allowed, and never when
part of it is computed at run time.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Literal, Self

from tether.errors import ApprovalRequired, CommandRefused, ConfigError
from tether.tools.policy import CommandPolicy, PolicyVerdict
from tether.tools.result import CommandResult

if TYPE_CHECKING:
    from tether.tools.base import Session
    from tether.tools.facts import HostFacts

__all__ = ["ConfirmCallback", "Decision", "GuardedSession", "Mode", "Provenance", "decide", "guarded"]

logger = logging.getLogger(__name__)

Provenance = Literal["model", "tool_output", "user"]
"""Where a command came from: the model's own plan, text it copied from a command's output or
a file, or the user."""
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
    if verdict.action == "sandbox":  # trusted, but no sandbox to contain what cannot be judged
        return Decision("ask", False, True, escalation=True)
    return Decision("ask" if verdict.action == "confirm" else "run", False, True)


ConfirmCallback = Callable[[str, str], Awaitable[bool | None]]
"""``await confirm(command, reason)``: True to run, False to refuse, None when no one can
answer now (the command raises ``ApprovalRequired``, so an unattended run pauses)."""


class GuardedSession:
    """Wraps a session: every command is judged by the policy, then run as the mode decides.

    A refused command never reaches the inner session and raises ``CommandRefused``.
    Without ``confirm`` a command that needs approval raises ``ApprovalRequired`` (the agent
    loop pauses the run for a decision). Approvals are remembered by command and directory
    (``approvals``, which a resumed run restores), so the same command is not asked twice.
    ``mode`` defaults to ``sandboxed`` when the inner session has a sandbox and ``ask``
    otherwise (said once in the log). ``workdir`` (default: the inner session's directory)
    is where deleting needs no confirmation; relative paths resolve against the inner
    session's current ``cwd``. ``host_facts`` runs tether's own probe script unchecked.
    """

    def __init__(
        self,
        session: Session,
        policy: CommandPolicy | None = None,
        *,
        confirm: ConfirmCallback | None = None,
        workdir: str | None = None,
        mode: Mode | None = None,
        approvals: set[str] | None = None,
    ) -> None:
        self.session = session
        self.policy = policy or CommandPolicy()
        self.confirm = confirm
        self.workdir = workdir or self.policy.workdir or session.cwd
        self.last_verdict: PolicyVerdict | None = None
        self.last_decision: Decision | None = None
        self.sandbox = getattr(session, "sandbox", None)
        mode = mode or self.policy.mode
        if mode is not None and mode not in MODES:
            raise ConfigError(f"unknown safety mode {mode!r}; use one of {', '.join(MODES)}")
        if mode == "sandboxed" and self.sandbox is None:
            logger.warning("no sandbox available for %r: falling back to the ask mode", session)
            mode = "ask"
        self.mode: Mode = mode or ("sandboxed" if self.sandbox is not None else "ask")
        self.approvals: set[str] = approvals if approvals is not None else set()
        """Keys of approved commands (``approval_key``): kept in the run's state by the agent loop."""

    def __repr__(self) -> str:
        return f"GuardedSession({self.session!r}, mode={self.mode!r})"

    @property
    def cwd(self) -> str | None:
        return self.session.cwd

    def check(self, command: str) -> PolicyVerdict:
        """The policy's verdict on ``command`` where the session stands now."""
        return self.policy.check(command, cwd=self.session.cwd, workdir=self.workdir)

    def approval_key(self, command: str, cwd: str | None = None) -> str:
        """What an approval covers: this exact command, in this directory, in this mode."""
        where = cwd or self.session.cwd or ""
        digest = hashlib.sha256(f"{self.mode}\0{where}\0{command}".encode()).hexdigest()
        return digest[:32]

    async def run(
        self,
        command: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a per-command limit, part of the Session API
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        provenance: Provenance = "model",
    ) -> CommandResult:
        """Check ``command``, ask if the mode says so, and run it only if allowed.

        ``provenance`` says where the command came from. One copied from a command's output
        or a file (``tool_output``, the prompt-injection route) is asked before it runs
        whenever it reaches beyond the sandbox or cannot be judged.
        """
        verdict = self.policy.check(command, cwd=cwd or self.session.cwd, workdir=self.workdir)
        if (
            provenance == "tool_output"
            and verdict.action in ("allow", "sandbox")
            and (verdict.needs or verdict.action == "sandbox")
        ):
            what = " and ".join(sorted(verdict.needs)) or "code that cannot be judged"
            verdict = replace(
                verdict,
                action="confirm",
                rule="provenance",
                reason=f"copied from a command's output or a file, and it needs {what} ({verdict.reason})",
            )
        decision = decide(verdict, self.mode)
        if verdict.action == "sandbox" and decision.outcome == "run" and self.sandbox is None:
            decision = Decision("ask", False, True, escalation=True)  # nothing would contain it
        self.last_verdict, self.last_decision = verdict, decision
        if decision.outcome == "refuse":
            logger.warning("command denied by rule %s: %s", verdict.rule, verdict.reason)
            raise CommandRefused(command, f"{verdict.rule}: {verdict.reason}")
        if decision.outcome == "ask":
            await self._approve(command, cwd, verdict, decision)
        if self.sandbox is not None:
            run = self.session.run  # LocalSession with a sandbox: say where this one runs
            return await run(  # type: ignore[call-arg]
                command,
                timeout=timeout,
                cwd=cwd,
                env=env,
                sandboxed=decision.sandboxed,
                network=decision.network,
            )
        return await self.session.run(command, timeout=timeout, cwd=cwd, env=env)

    async def _approve(
        self, command: str, cwd: str | None, verdict: PolicyVerdict, decision: Decision
    ) -> None:
        key = self.approval_key(command, cwd)
        rule = verdict.rule or "host-change"
        reason = verdict.reason
        if decision.escalation:
            reason = f"{reason}: it must run outside the sandbox, on the host"
        if key in self.approvals:
            logger.info("command approved earlier (rule %s), running it", rule)
            return
        answer = None if self.confirm is None else await self.confirm(command, reason)
        if answer is None:
            logger.warning("command needs approval (rule %s) and no one can answer: %s", rule, reason)
            pending = ApprovalRequired(command, f"{rule}: {reason}; approval needed")
            pending.key = key
            raise pending
        if not answer:
            logger.warning("command not approved (rule %s): %s", rule, reason)
            raise CommandRefused(command, f"{rule}: {reason}; not confirmed")
        self.approvals.add(key)
        kind = "escalation out of the sandbox" if decision.escalation else "risky command"
        logger.warning("%s approved (rule %s, mode %s): %s", kind, rule, self.mode, reason)

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
    mode: Mode | None = None,
) -> GuardedSession:
    """``GuardedSession(session, policy, confirm=confirm, workdir=workdir, mode=mode)``."""
    return GuardedSession(session, policy, confirm=confirm, workdir=workdir, mode=mode)
