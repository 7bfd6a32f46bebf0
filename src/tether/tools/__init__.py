"""Running commands for agents: local and SSH sessions, host facts, safety and redaction.

``LocalSession`` and ``SSHSession`` run shell lines with a timeout that kills the whole
process group, byte-capped output and a working directory that follows ``cd``.
``HostFacts`` describes the machine through any session. ``CommandPolicy`` and
``GuardedSession`` refuse destructive commands and ask before risky ones. ``Redactor``
removes secrets from anything headed for logs, prompts or stores.
"""

from __future__ import annotations

from tether.tools.base import Session
from tether.tools.facts import HostFacts, gather_host_facts
from tether.tools.guard import ConfirmCallback, GuardedSession, guarded
from tether.tools.local import LocalSession
from tether.tools.policy import CommandPolicy, PolicyVerdict, Rule
from tether.tools.redact import REDACTED, Redactor
from tether.tools.result import TIMEOUT_EXIT_CODE, CommandResult
from tether.tools.ssh import SSHCredentials, SSHSession

__all__ = [
    "REDACTED",
    "TIMEOUT_EXIT_CODE",
    "CommandPolicy",
    "CommandResult",
    "ConfirmCallback",
    "GuardedSession",
    "HostFacts",
    "LocalSession",
    "PolicyVerdict",
    "Redactor",
    "Rule",
    "SSHCredentials",
    "SSHSession",
    "Session",
    "gather_host_facts",
    "guarded",
]
