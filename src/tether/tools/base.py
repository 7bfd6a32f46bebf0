"""The ``Session`` protocol that the local and SSH sessions implement."""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Protocol, Self, runtime_checkable

from tether.tools.result import CommandResult

if TYPE_CHECKING:
    from tether.tools.facts import HostFacts

__all__ = ["Session"]


@runtime_checkable
class Session(Protocol):
    """Somewhere to run shell commands: this machine or a host over SSH.

    ``run`` returns a ``CommandResult`` for every command that ran, whatever its exit
    code; a timeout kills the command's whole process group and, by default, returns
    exit code 124 with ``timed_out`` set (``raise_on_timeout=True`` raises
    ``CommandTimeout`` instead). ``SessionError`` means the session itself failed.
    """

    @property
    def cwd(self) -> str | None:
        """Where the next command runs (``None`` over SSH until the first command reports it)."""
        ...

    async def run(
        self,
        command: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a per-command limit, part of the Session API
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run one shell line; ``timeout``/``cwd``/``env`` override the session's defaults."""
        ...

    async def host_facts(self) -> HostFacts:
        """OS, architecture, resources and installed tools, gathered through this session."""
        ...

    async def close(self) -> None:
        """Release the session (idempotent). Background processes it started keep running."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
