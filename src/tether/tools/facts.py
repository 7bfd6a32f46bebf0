"""``HostFacts``: what the agent needs to know about the machine it deploys to.

Gathered with one shell script through any ``Session``, so the same code serves the
local machine and a host over SSH. Every probe tolerates a missing tool or file.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tether.errors import SessionError

if TYPE_CHECKING:
    from tether.tools.base import Session

__all__ = ["TOOL_PROBES", "HostFacts", "gather_host_facts", "parse_host_facts"]

logger = logging.getLogger(__name__)

TOOL_PROBES: Mapping[str, str] = MappingProxyType(
    {
        "docker": "docker --version",
        "docker compose": "docker compose version",
        "docker-compose": "docker-compose --version",
        "git": "git --version",
        "python3": "python3 --version",
        "pip3": "pip3 --version",
        "node": "node --version",
        "npm": "npm --version",
        "yarn": "yarn --version",
        "pnpm": "pnpm --version",
        "pm2": "pm2 --version",
        "java": "java -version",
        "go": "go version",
        "nginx": "nginx -v",
        "apache2": "apache2 -v",
        "systemctl": "systemctl --version",
        "curl": "curl --version",
        "wget": "wget --version",
        "make": "make --version",
        "gcc": "gcc --version",
    }
)
"""Tool name -> version command; the tool counts as installed when that command succeeds."""

_SECTION = "@@tether:"
_VERSION = re.compile(r"\d+(?:\.\d+)+(?:[-+~][0-9A-Za-z.]+)?|\d+")


def _script(tools: Mapping[str, str]) -> str:
    lines = [
        f"echo '{_SECTION}os'; cat /etc/os-release 2>/dev/null",
        f"echo '{_SECTION}uname'; uname -s 2>/dev/null; uname -r 2>/dev/null; uname -m 2>/dev/null",
        f"echo '{_SECTION}cpus'; getconf _NPROCESSORS_ONLN 2>/dev/null || nproc 2>/dev/null"
        " || sysctl -n hw.ncpu 2>/dev/null",
        f"echo '{_SECTION}mem'; grep -E '^(MemTotal|MemAvailable):' /proc/meminfo 2>/dev/null"
        " || sysctl -n hw.memsize 2>/dev/null",
        f"echo '{_SECTION}disk'; pwd; df -Pk . 2>/dev/null | tail -n 1",
        f"echo '{_SECTION}user'; id -un 2>/dev/null || whoami; id -u 2>/dev/null",
        f"echo '{_SECTION}sudo'; if [ \"$(id -u)\" = 0 ]; then echo root;"
        " elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then echo yes;"
        " else echo no; fi",
    ]
    for name, probe in tools.items():
        exe = probe.split()[0]
        lines.append(
            f"echo '{_SECTION}tool {name}'; command -v {exe} >/dev/null 2>&1 &&"
            f" out=$({probe} 2>&1 </dev/null) && {{ printf '%s\\n' \"$out\" | head -n 3;"
            f" echo '{_SECTION}found'; }}"
        )
    return "\n".join(lines) + "\ntrue\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class HostFacts:
    """A snapshot of a host: OS, resources, user rights and installed tools."""

    os_name: str = "unknown"
    """Human name, e.g. ``Ubuntu 22.04.4 LTS`` (``/etc/os-release`` PRETTY_NAME, else ``uname -s``)."""
    os_id: str = ""
    """``ID`` from os-release (``ubuntu``, ``debian``, ``alpine``...), or the lower-cased kernel name."""
    os_version: str = ""
    """``VERSION_ID`` from os-release."""
    kernel: str = ""
    """Kernel name and release, e.g. ``Linux 6.1.0``."""
    architecture: str = ""
    """``uname -m``: ``x86_64``, ``aarch64``..."""
    cpu_count: int | None = None
    """Online CPUs."""
    memory_total: int | None = None
    """Bytes of RAM."""
    memory_available: int | None = None
    """Bytes of RAM available without swapping (Linux only)."""
    disk_free: int | None = None
    """Bytes free on the filesystem of ``disk_path``."""
    disk_path: str = ""
    """The working directory the facts were gathered in."""
    user: str = ""
    """The login user."""
    is_root: bool = False
    """Running as uid 0."""
    passwordless_sudo: bool = False
    """``sudo -n true`` succeeds (always true for root)."""
    tools: Mapping[str, str] = field(default_factory=dict)
    """Installed tools -> version (``""`` when the version could not be read)."""
    missing_tools: tuple[str, ...] = ()
    """Probed tools that are not installed."""

    def has(self, tool: str) -> bool:
        return tool in self.tools

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for run logs and checkpoints."""
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["tools"] = dict(self.tools)
        data["missing_tools"] = list(self.missing_tools)
        return data

    def to_prompt(self) -> str:
        """A short block for the agent's prompt."""
        lines = [f"OS: {self.os_name} ({self.kernel or '?'}, {self.architecture or '?'})"]
        res = [f"{self.cpu_count or '?'} CPUs"]
        if self.memory_total:
            mem = f"{_gib(self.memory_total)} RAM"
            if self.memory_available:
                mem += f" ({_gib(self.memory_available)} available)"
            res.append(mem)
        if self.disk_free is not None:
            res.append(f"{_gib(self.disk_free)} disk free at {self.disk_path or '.'}")
        lines.append("Resources: " + ", ".join(res))
        sudo = "root" if self.is_root else ("passwordless sudo" if self.passwordless_sudo else "no sudo")
        lines.append(f"User: {self.user or '?'} ({sudo})")
        tools = ", ".join(f"{n} {v}".strip() for n, v in self.tools.items())
        lines.append(f"Installed: {tools or 'none of the probed tools'}")
        if self.missing_tools:
            lines.append("Not installed: " + ", ".join(self.missing_tools))
        return "\n".join(lines)


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


async def gather_host_facts(
    session: Session,
    *,
    tools: Mapping[str, str] = TOOL_PROBES,
    timeout: float = 60.0,  # noqa: ASYNC109 - passed on to Session.run
) -> HostFacts:
    """Probe the host behind ``session`` with one script; missing tools are simply absent."""
    result = await session.run(_script(tools), timeout=timeout)
    if result.timed_out:
        raise SessionError(f"gathering host facts timed out after {timeout:g}s")
    facts = parse_host_facts(result.stdout, tools=tools)
    logger.info("host facts: %s %s, %d tools", facts.os_name, facts.architecture, len(facts.tools))
    return facts


def parse_host_facts(output: str, *, tools: Mapping[str, str] = TOOL_PROBES) -> HostFacts:
    """Build ``HostFacts`` from the probe script's output (pure; tested on samples)."""
    sections = _sections(output)
    osr = _os_release(sections.get("os", []))
    uname = sections.get("uname", []) + ["", "", ""]
    mem = _meminfo(sections.get("mem", []))
    disk_lines = sections.get("disk", [])
    user_lines = sections.get("user", []) + ["", ""]
    sudo = (sections.get("sudo") or ["no"])[0].strip()
    found: dict[str, str] = {}
    missing: list[str] = []
    for name in tools:
        body = sections.get(f"tool {name}", [])
        if body and body[-1] == f"{_SECTION}found":
            found[name] = _version(body[:-1])
        else:
            missing.append(name)
    return HostFacts(
        os_name=osr.get("PRETTY_NAME") or osr.get("NAME") or uname[0] or "unknown",
        os_id=osr.get("ID", uname[0].lower()),
        os_version=osr.get("VERSION_ID", ""),
        kernel=f"{uname[0]} {uname[1]}".strip(),
        architecture=uname[2],
        cpu_count=_int((sections.get("cpus") or [""])[0]),
        memory_total=mem[0],
        memory_available=mem[1],
        disk_free=_disk_free(disk_lines),
        disk_path=disk_lines[0] if disk_lines else "",
        user=user_lines[0],
        is_root=user_lines[1] == "0",
        passwordless_sudo=sudo in ("yes", "root"),
        tools=found,
        missing_tools=tuple(missing),
    )


def _sections(output: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in output.splitlines():
        line = raw.strip()
        if line.startswith(_SECTION) and line != f"{_SECTION}found":
            current = sections.setdefault(line[len(_SECTION) :], [])
        elif current is not None and line:
            current.append(line)
    return sections


def _os_release(lines: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip("\"'")
    return out


def _meminfo(lines: list[str]) -> tuple[int | None, int | None]:
    total = avail = None
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "MemTotal:":
            total = _int(parts[1], 1024)
        elif len(parts) >= 2 and parts[0] == "MemAvailable:":
            avail = _int(parts[1], 1024)
        elif len(parts) == 1:  # sysctl hw.memsize: bytes
            total = _int(parts[0])
    return total, avail


def _disk_free(lines: list[str]) -> int | None:
    if len(lines) < 2:
        return None
    parts = lines[-1].split()
    return _int(parts[3], 1024) if len(parts) >= 4 else None


def _version(lines: list[str]) -> str:
    for line in lines:
        match = _VERSION.search(line)
        if match:
            return match.group(0)
    return ""


def _int(text: str, scale: int = 1) -> int | None:
    text = text.strip()
    return int(text) * scale if text.isdigit() else None
