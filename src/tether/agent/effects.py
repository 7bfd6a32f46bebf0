"""Commands that change the host: declared, run in a step of their own, never repeated blindly.

The agent loop asks :meth:`SideEffects.changes_host` about every command the model
proposes. A read-only command (``ls``, ``cat``, ``git status``, ``curl`` without a body…)
runs inside the iteration as before. Any other command (an install, a redirect into a
file, ``docker compose up``, ``systemctl start``, a command this table does not know) is
recorded first (the state's ``inflight``, checkpointed with the iteration) and runs in
the loop's ``effect`` step, which the runtime knows is not idempotent: when the process
dies inside it, resuming does not run it again but pauses the run with a report naming
the command.

A **probe** settles such a cut without asking anyone: a shell command that exits 0 when
the effect happened and 1 when it did not (any other result is no proof). The model may
send one with its action (``"probe": "systemctl is-active --quiet nginx"``); else
:func:`default_probe` derives one for common commands (a directory or file created, a
repository cloned, a compose project or a unit started, a package installed). Happened:
the run continues as if the command had just run, with the probe's output as its result;
did not happen: the command runs again.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.agent import decide as pure
from tether.agent.actions import AgentAction
from tether.errors import ToolError
from tether.runtime import RunResult, StepContext
from tether.runtime.control import amend_pending_report
from tether.runtime.report import Decision, FailureReport, Suggestion, takeover_note
from tether.state import RunStatus
from tether.state.reserved import runtime_get
from tether.tools.result import CommandResult

if TYPE_CHECKING:
    from tether.agent.loop import AgentLoop

__all__ = [
    "Inflight",
    "SideEffects",
    "changes_host",
    "cut_report_fields",
    "default_probe",
    "probe_verdict",
    "settle_cut",
]

logger = logging.getLogger(__name__)
Redact = Callable[[str], str]

_READ_ONLY = frozenset(
    [
        "ls",
        "cat",
        "head",
        "tail",
        "grep",
        "egrep",
        "fgrep",
        "rg",
        "find",
        "ps",
        "pwd",
        "whoami",
        "id",
        "uname",
        "hostname",
        "date",
        "env",
        "printenv",
        "which",
        "type",
        "command",
        "echo",
        "printf",
        "test",
        "[",
        "true",
        "false",
        "sleep",
        "wc",
        "stat",
        "file",
        "du",
        "df",
        "free",
        "uptime",
        "nproc",
        "lsof",
        "ss",
        "netstat",
        "ip",
        "ifconfig",
        "ping",
        "dig",
        "nslookup",
        "host",
        "jq",
        "sort",
        "uniq",
        "cut",
        "tr",
        "awk",
        "less",
        "more",
        "diff",
        "cmp",
        "md5sum",
        "sha256sum",
        "cd",
        "export",
        "set",
        "readlink",
        "realpath",
        "basename",
        "dirname",
        "tree",
        "journalctl",
        "dmesg",
        "getent",
        "seq",
        "expr",
        "nl",
        "od",
        "xxd",
        "hexdump",
        "strings",
        "column",
        "paste",
        "comm",
        "fold",
        "rev",
        "tac",
        "base64",
        "who",
        "w",
        "groups",
        "lsblk",
        "history",
        "alias",
        "bc",
        "zcat",
        "lsb_release",
        "arch",
        "locale",
    ]
)
_READ_ONLY_SUB = {
    "git": {
        "status",
        "log",
        "diff",
        "show",
        "rev-parse",
        "remote",
        "branch",
        "ls-files",
        "describe",
        "config",
    },
    "docker": {"ps", "images", "logs", "inspect", "version", "info", "port", "stats", "top"},
    "compose": {"ps", "logs", "config", "ls", "images", "top", "version", "port"},
    "systemctl": {"status", "is-active", "is-enabled", "is-failed", "list-units", "show", "cat"},
    "pip": {"show", "list", "freeze", "--version", "check"},
    "pip3": {"show", "list", "freeze", "--version", "check"},
    "npm": {"ls", "list", "view", "-v", "--version", "config"},
    "node": {"-v", "--version"},
    "python": {"--version", "-V"},
    "python3": {"--version", "-V"},
    "kubectl": {"get", "describe", "logs", "version", "top", "explain"},
    "apt": {"list", "show", "search", "policy"},
    "apt-cache": {"show", "search", "policy", "depends"},
    "service": {"--status-all"},
}
_SEPARATORS = re.compile(r"\|\||&&|;|\||\n")
_REDIRECT = re.compile(r">>?\s*(&\d?|[^\s;&|]+)")
_BACKGROUND = re.compile(r"(?<![&|>])&(?![&>])")
_CURL_WRITES = re.compile(r"\s(-X\s*(POST|PUT|PATCH|DELETE)|-d\b|--data\S*|-F\b|--form|-o\b|-O\b|--output)")


def _words(segment: str) -> list[str]:
    try:
        words = shlex.split(segment, posix=True)
    except ValueError:
        words = segment.split()
    while words and (
        "=" in words[0] and not words[0].startswith("=") or words[0] in ("sudo", "nice", "time")
    ):
        words = words[1:]  # VAR=value prefixes, sudo: the command is what follows
    return words


def _writes_file(text: str) -> bool:
    """A redirection into a file (``> f``, ``>> f``, ``&> f``); not ``2>&1`` nor /dev/null."""
    return any(not t.startswith("&") and t != "/dev/null" for t in _REDIRECT.findall(text))


_GIT_BRANCH_WRITES = {"-d", "-D", "-m", "-M", "-c", "-C", "--delete", "--move", "--copy", "-f", "--force"}


def _git_writes(sub: str, words: list[str]) -> bool:
    """``git branch NAME``, ``git remote add``, ``git config KEY VALUE`` change the repository."""
    rest = words[words.index(sub) + 1 :]
    if sub == "branch":
        return any(not w.startswith("-") or w in _GIT_BRANCH_WRITES for w in rest)
    if sub == "remote":
        return bool(rest) and rest[0] not in ("-v", "--verbose", "show", "get-url")
    if sub == "config":
        return not any(w in ("--get", "--get-all", "--list", "-l", "--get-regexp") for w in rest)
    return False


def changes_host(command: str) -> bool:
    """Whether ``command`` may change the host (conservative: unknown commands do)."""
    text = command.strip()
    if not text:
        return False
    if _writes_file(text) or _BACKGROUND.search(text):
        return True  # writes a file, or starts something in the background
    for segment in _SEPARATORS.split(text):
        words = _words(segment.strip())
        if not words:
            continue
        head = words[0].rsplit("/", 1)[-1]
        if head in ("tee", "nohup"):
            return True
        if head == "curl":
            if _CURL_WRITES.search(" " + segment):
                return True
            continue
        if head == "docker" and len(words) > 1 and words[1] == "compose":
            head, words = "compose", words[1:]
        elif head == "docker-compose":
            head = "compose"
        if head in _READ_ONLY_SUB:
            sub = next((w for w in words[1:] if not w.startswith("-") or w in _READ_ONLY_SUB[head]), "")
            if sub not in _READ_ONLY_SUB[head] or (head == "git" and _git_writes(sub, words)):
                return True
            continue
        if head in _READ_ONLY:
            if head == "find" and any(w in ("-delete", "-exec", "-execdir") for w in words):
                return True
            continue
        return True
    return False


def default_probe(command: str) -> str | None:
    """A probe for a common command (exit 0: the effect is there, 1: it is not), or None."""
    words = _words(command.strip())
    if _BACKGROUND.search(command):
        return None  # a service started in the background: only the model knows how to check it
    if not words or _SEPARATORS.search(command):
        return _redirect_probe(command)
    head, args = words[0].rsplit("/", 1)[-1], [w for w in words[1:] if not w.startswith("-")]
    if head == "mkdir" and args:
        return " && ".join(f"test -d {shlex.quote(a)}" for a in args)
    if head == "touch" and args:
        return " && ".join(f"test -e {shlex.quote(a)}" for a in args)
    if head == "git" and args[:1] == ["clone"] and len(args) >= 2:
        target = args[2] if len(args) >= 3 else args[1].rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
        return f"test -d {shlex.quote(target)}/.git"
    if (head == "docker" and args[:2] == ["compose", "up"]) or (
        head == "docker-compose" and args[:1] == ["up"]
    ):
        ps = "docker compose ps -q" if head == "docker" else "docker-compose ps -q"
        return f'test -n "$({ps} 2>/dev/null)"'
    if head == "systemctl" and args[:1] and args[0] in ("start", "restart", "enable") and len(args) >= 2:
        return f"systemctl is-active --quiet {shlex.quote(args[-1])} || exit 1"
    if head in ("pip", "pip3") and args[:1] == ["install"] and len(args) == 2:
        name = re.split(r"[<>=\[!~]", args[1])[0]
        return f"{head} show {shlex.quote(name)} >/dev/null 2>&1 || exit 1"
    return _redirect_probe(command)


def _redirect_probe(command: str) -> str | None:
    """``… > FILE`` (not an append): the file exists and is not empty."""
    found = re.findall(r"(?<![0-9&>])>\s*([^\s;&|>]+)", command)
    targets = [t for t in found if t != "/dev/null"]
    if len(targets) == 1 and ">>" not in command:
        return f"test -s {shlex.quote(targets[0])}"
    return None


def probe_verdict(exit_code: int | None) -> bool | None:
    """True: the effect happened (exit 0); False: it did not (exit 1); None: no proof."""
    return {0: True, 1: False}.get(exit_code) if exit_code is not None else None


@dataclass(slots=True, kw_only=True)
class SideEffects:
    """What a bundled agent declares about its commands: which change the host, and how
    to probe one whose run a crash cut. Pass ``enabled=False`` to run every command inside
    the iteration (no crash protection, one checkpoint fewer per command)."""

    enabled: bool = True
    classify: Callable[[str], bool] = changes_host
    probe: Callable[[str], str | None] = default_probe
    probe_timeout: float = 30.0
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form notes a bundled agent adds to the cut report (shown as causes)."""

    def declares(self, command: str) -> bool:
        return self.enabled and bool(command.strip()) and self.classify(command)

    def probe_for(self, inflight: dict[str, Any]) -> str | None:
        given = str(inflight.get("probe") or "").strip()
        return given or self.probe(str(inflight.get("command") or ""))


def cut_report_fields(inflight: dict[str, Any], probe: str | None, seen: str | None) -> dict[str, Any]:
    """The report of a run paused because its process stopped while ``inflight`` ran."""
    command = str(inflight.get("command") or "")
    why = f"the command `{command}` (iteration {inflight.get('iteration')}) may have run: "
    why += "the process stopped while it was running, and it changes the host"
    if probe:
        why += f"; the probe `{probe}` proved nothing ({seen})"
    return {
        "error_type": "SideEffectCut",
        "error": why,
        "item_name": f"run `{command[:80]}`",
        "options": [str(Decision.RETRY), str(Decision.TAKEOVER), str(Decision.ABORT)],
        "possible_causes": [
            "the process was killed, crashed or lost its machine while the command ran",
            "check on the host whether the command's effect is there before deciding",
        ],
        "suggestions": [
            Suggestion(
                label="it did not run (or is safe to run again): run it again",
                decision=Decision.RETRY,
                detail=command,
            ).to_dict(),
            Suggestion(
                label="it ran, or you ran it by hand: continue from there",
                decision=Decision.TAKEOVER,
                detail="say in the note what you checked or did; the agent reads it as the command's result",
            ).to_dict(),
            Suggestion(label="stop the run", decision=Decision.ABORT).to_dict(),
        ],
    }


class Inflight:
    """The loop's side: record a command before its ``effect`` step, and what that step runs.

    The command as the model sent it stays in this process (``_raw``); the state keeps it
    redacted. After a crash only the stored one is left: when redaction changed it (it held
    a secret) it is not run from the state, and the model is asked to send it again.
    """

    def __init__(self, effects: SideEffects) -> None:
        self.effects = effects
        self._raw: dict[tuple[str, int], AgentAction] = {}

    def declares(self, command: str) -> bool:
        return self.effects.declares(command)

    def record(self, run_id: str, n: int, action: AgentAction, redact: Redact) -> dict[str, Any]:
        """The state's ``inflight`` for iteration ``n``'s command."""
        self._raw[(run_id, n)] = action
        command = redact(action.command or "")
        probe = redact(action.probe) if action.probe else None
        return {
            "iteration": n,
            "command": command,
            "reasoning": action.reasoning,
            "probe": probe,
            "redacted": command != (action.command or ""),
        }

    def turn(
        self, sc: StepContext, n: int, inflight: dict[str, Any], redact: Redact
    ) -> tuple[AgentAction, pure.Turn | None]:
        """The action the ``effect`` step runs, and the turn that replaces running it (a
        person or a probe settled it after a crash; or its secret is lost), else None."""
        raw = self._raw.pop((sc.run_id, n), None)
        action = raw or AgentAction(
            action="execute", command=str(inflight.get("command") or ""), reasoning=inflight.get("reasoning")
        )
        note = takeover_note(sc.state, sc.step.id)
        if note is not None:
            text = f"(not run again after a crash) {note}"
            return action, _turn(n, action, 0, text, redact)
        if raw is None and inflight.get("redacted"):
            text = "this command was cut by a crash and held a secret that is not stored: send it again"
            return action, _turn(n, action, 1, text, redact)
        return action, None


def _turn(n: int, action: AgentAction, code: int, text: str, redact: Redact) -> pure.Turn:
    result = CommandResult(
        command=action.command or "", success=code == 0, exit_code=code, stdout=text, stderr=""
    )
    return pure.command_turn(
        n, action, result, f"exit code {code}\n{text}", artifact_id=None, origin="model", redact=redact
    )


async def settle_cut(
    loop: AgentLoop, result: RunResult, *, resume: Callable[..., Awaitable[RunResult]] | None = None
) -> RunResult:
    """After a resume: a run paused because a crash cut its ``effect`` step is probed; a
    probe that proves the effect happened (takeover) or did not (retry) continues it, else
    the report is amended to name the command and what a person can do.

    ``resume(run_id, decision=...)`` continues the run (default: ``loop.resume``); a worker
    passes its own runner's, which holds the run under the worker's lease settings."""
    report = result.report
    if result.status is not RunStatus.PAUSED or report is None:
        return result
    if report.item_id != "effect" or report.error_type != "Interrupted":
        return result
    inflight = dict(result.state.get("inflight") or {})
    probe = loop.effects.effects.probe_for(inflight) if inflight else None
    seen = "no probe for this command"
    if probe:
        try:
            out = await loop.session.run(probe, timeout=loop.effects.effects.probe_timeout)
        except ToolError as exc:
            out, seen = None, f"it could not run: {type(exc).__name__}"
        verdict = probe_verdict(out.exit_code) if out is not None else None
        if out is not None:
            seen = f"exit {out.exit_code}"
        if out is not None and verdict is not None:
            shown = loop.redact((out.stdout or out.stderr).strip()[-300:])
            where = "is in place" if verdict else "is not there"
            note = f"the probe `{probe}` showed the command's effect {where}" + (
                f": {shown}" if shown else ""
            )
            logger.info("run %s: %s", result.run_id, note, extra={"run_id": result.run_id})
            await amend_pending_report(loop.store, result.run_id, note=note)
            decision = Decision.TAKEOVER if verdict else Decision.RETRY
            return await (resume or loop.resume)(result.run_id, decision=str(decision))
    fields = cut_report_fields(inflight, probe, seen)
    if not await amend_pending_report(loop.store, result.run_id, **fields):
        return result
    cp = await loop.store.load(result.run_id)
    data = runtime_get(cp.state, "pending_decision") if cp is not None else None
    amended = FailureReport.from_dict(data) if isinstance(data, dict) else report
    final = cp.state if cp is not None else result.state
    return RunResult(
        run_id=result.run_id,
        status=result.status,
        version=cp.version if cp else result.version,
        state=final,
        report=amended,
    )
