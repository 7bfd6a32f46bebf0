"""The outcome of one shell command."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["TIMEOUT_EXIT_CODE", "CommandResult"]

TIMEOUT_EXIT_CODE = 124
"""Exit code of a command killed at its timeout (as coreutils ``timeout`` reports it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandResult:
    """What a command printed and how it ended.

    ``success`` is always ``exit_code == 0``.
    A command killed by a signal reports ``128 + signal``, as shells do; one killed at
    its timeout reports ``124`` with ``timed_out`` set.
    """

    command: str
    """The command as the caller gave it (without the session's wrapping)."""
    success: bool
    """``exit_code == 0``."""
    stdout: str
    """Standard output, decoded as UTF-8 with replacement; head and tail kept past the cap."""
    stderr: str
    """Standard error, decoded and capped like ``stdout``."""
    exit_code: int
    """The exit status: 0 is success, 124 a timeout, 128+N death by signal N."""
    duration: float = 0.0
    """Wall-clock seconds from start to exit (or to the kill)."""
    stdout_truncated: bool = False
    """``stdout`` was longer than the session's cap; its middle was cut (a marker says how much)."""
    stderr_truncated: bool = False
    """``stderr`` was longer than the session's cap; its middle was cut."""
    timed_out: bool = False
    """The command ran past its timeout and its whole process group was killed."""

    def __post_init__(self) -> None:
        if self.success != (self.exit_code == 0):
            raise ValueError(f"success={self.success} contradicts exit_code={self.exit_code}")

    @property
    def truncated(self) -> bool:
        """Either stream was cut by the output cap."""
        return self.stdout_truncated or self.stderr_truncated

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with every field (the run log's ``result`` entry)."""
        return {
            "command": self.command,
            "success": self.success,
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "duration": round(self.duration, 3),
            "stdout_truncated": self.stdout_truncated,
            "stderr_truncated": self.stderr_truncated,
            "timed_out": self.timed_out,
        }
