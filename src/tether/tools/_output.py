"""Byte-capped output capture and the shell wrapping shared by the local and SSH sessions."""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Callable, Mapping

from tether.errors import ConfigError

__all__ = [
    "OutputBuffer",
    "ShellOptions",
    "check_env_name",
    "exit_code_of",
    "new_marker",
    "preview",
    "wrap_script",
    "env_exports",
    "add_note",
    "timeout_note",
]

_MIN_LIMIT = 1024
SENTINEL_RESERVE = 8192
"""Bytes kept beyond the cap for the cwd sentinel line printed at the end of stdout."""


def new_marker(kind: str) -> bytes:
    """A random token that command output cannot contain by accident."""
    return f"__tether_{kind}_{secrets.token_hex(8)}__".encode()


def exit_code_of(returncode: int) -> int:
    """Shell convention: a death by signal N is ``128 + N`` (asyncio reports ``-N``)."""
    return 128 - returncode if returncode < 0 else returncode


class OutputBuffer:
    """Keeps the first and the last bytes of a stream, at most ``limit`` of them in all.

    Memory stays bounded whatever the command prints: the head is kept as it arrives, the
    tail is a rolling window trimmed in amortised O(1), and the rest is only counted.
    ``reserve`` extra tail bytes are kept so that a sentinel line at the very end can be
    removed without counting against the caller's cap.
    """

    __slots__ = ("_dropped", "_head", "_head_limit", "_reserve", "_tail", "_tail_limit", "_total")

    def __init__(self, limit: int, *, reserve: int = 0) -> None:
        limit = max(limit, _MIN_LIMIT)
        self._head_limit = limit // 2
        self._tail_limit = limit - self._head_limit
        self._reserve = reserve
        self._head = bytearray()
        self._tail = bytearray()
        self._dropped = 0
        self._total = 0

    @property
    def limit(self) -> int:
        return self._head_limit + self._tail_limit

    @property
    def total(self) -> int:
        """Bytes received so far."""
        return self._total

    def feed(self, data: bytes) -> None:
        self._total += len(data)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        self._tail += data
        keep = self._tail_limit + self._reserve
        if len(self._tail) > 2 * keep:
            cut = len(self._tail) - keep
            del self._tail[:cut]
            self._dropped += cut

    def finish(self, sentinel: bytes | None = None) -> tuple[str, bool, bytes | None]:
        """Decode the kept bytes: ``(text, truncated, sentinel_value)``.

        With ``sentinel``, the last line ``"\\n" + sentinel + value`` is removed from the
        output and ``value`` returned (``None`` if the line never came).
        """
        value: bytes | None = None
        if self._dropped == 0:
            data = bytes(self._head + self._tail)
            if sentinel is not None:
                data, value = _cut_sentinel(data, sentinel)
            if len(data) <= self.limit:
                return data.decode("utf-8", "replace"), False, value
            head = data[: self._head_limit]
            tail = data[len(data) - self._tail_limit :]
            cut = len(data) - len(head) - len(tail)
        else:
            tail = bytes(self._tail)
            removed = 0
            if sentinel is not None:
                kept, value = _cut_sentinel(tail, sentinel)
                removed = len(tail) - len(kept)
                tail = kept
            head = bytes(self._head)
            tail = tail[-self._tail_limit :]
            cut = self._total - removed - len(head) - len(tail)
        marker = f"\n[... {cut} bytes of output cut here ...]\n".encode()
        return (head + marker + tail).decode("utf-8", "replace"), True, value


def _cut_sentinel(data: bytes, sentinel: bytes) -> tuple[bytes, bytes | None]:
    start = data.rfind(b"\n" + sentinel)
    if start < 0:
        return data, None
    value_start = start + 1 + len(sentinel)
    end = data.find(b"\n", value_start)
    if end < 0:
        return data[:start], data[value_start:]
    return data[:start] + data[end + 1 :], data[value_start:end]


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env_name(name: str) -> None:
    """Refuse names a shell could not ``export`` (and that could smuggle in code)."""
    if not _ENV_NAME.fullmatch(name):
        raise ConfigError(f"invalid environment variable name {name!r}: use letters, digits and _")


def wrap_script(
    command: str,
    *,
    cwd_sentinel: bytes | None,
    cwd: str | None = None,
    fallback_cwd: str | None = None,
    pid_marker: bytes | None = None,
) -> str:
    """The ``sh -c`` script that runs ``command`` and reports where it ended.

    An EXIT trap prints ``"\\n" + sentinel + $PWD`` as the last line of stdout, so a ``cd``
    in one command can carry over to the next (the trap keeps the exit status). ``cwd`` is
    set inside the script (used over SSH); ``pid_marker`` makes the shell print its pid to
    stderr first, so a timeout can kill its process group from another channel. An SSH
    command's environment arrives on its stdin instead (:func:`env_exports`), so that its
    values appear in no process list and no log of the command line.
    """
    lines: list[str] = []
    if pid_marker is not None:
        lines.append(f"printf '%s%s\\n' {pid_marker.decode()} \"$$\" >&2")
    if cwd is not None:
        go = f"cd -- {shlex.quote(cwd)}"
        if fallback_cwd is not None and fallback_cwd != cwd:
            back = "cd" if fallback_cwd == "~" else f"cd -- {shlex.quote(fallback_cwd)}"
            note = shlex.quote(f"[tether: {cwd} no longer exists; running in {fallback_cwd}]")
            lines.append(f"{go} 2>/dev/null || {{ printf '%s\\n' {note} >&2; {back} || exit 1; }}")
        else:
            lines.append(f"{go} || exit 1")
    if cwd_sentinel is not None:
        lines.append(f'trap \'printf "\\n%s%s\\n" {cwd_sentinel.decode()} "$PWD"\' EXIT')
    lines.append(command)
    return "\n".join(lines) + "\n"


def env_exports(env: Mapping[str, str]) -> bytes:
    """The ``export`` lines an SSH command's script reads on its standard input (the names
    checked: a bad one is a ConfigError before anything runs)."""
    lines = []
    for name, value in env.items():
        check_env_name(name)
        lines.append(f"export {name}={shlex.quote(value)}\n")
    return "".join(lines).encode()


def preview(text: str, redact: Callable[[str], str] | None, limit: int = 400) -> str:
    """A short, redacted view of command text or output for DEBUG logs."""
    if len(text) > limit:
        text = f"{text[: limit // 2]} ... {text[-limit // 2 :]}"
    return redact(text) if redact is not None else text


def add_note(stderr: str, note: str) -> str:
    """Append a ``[tether: ...]`` note on its own line, so the agent sees what happened."""
    sep = "\n" if stderr and not stderr.endswith("\n") else ""
    return f"{stderr}{sep}{note}\n"


def timeout_note(timeout: float) -> str:
    return f"[tether: timed out after {timeout:g}s; the command's process group was killed]"


class ShellOptions:
    """The options, checks and state every shell session starts with (local and SSH)."""

    def __init__(
        self,
        *,
        cwd: str | None,
        env: Mapping[str, str] | None,
        default_timeout: float,
        max_output_bytes: int,
        persist_cwd: bool,
        kill_grace: float,
        raise_on_timeout: bool,
        redact: Callable[[str], str] | None,
    ) -> None:
        if default_timeout <= 0:
            raise ConfigError("default_timeout must be positive")
        for name in env or {}:
            check_env_name(name)
        self._base_cwd = cwd
        self._cwd = cwd
        self._env = dict(env or {})
        self.default_timeout = default_timeout
        self.max_output_bytes = max_output_bytes
        self.persist_cwd = persist_cwd
        self.kill_grace = kill_grace
        self.raise_on_timeout = raise_on_timeout
        self._redact = redact
        self._sentinel = new_marker("cwd")
        self._closed = False
