"""HostFacts gathered locally, and parsed from sample outputs."""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path

from tether.tools import HostFacts, LocalSession
from tether.tools.facts import parse_host_facts


async def test_local_host_facts_are_sane(tmp_path: Path) -> None:
    """Architecture, CPUs, memory, disk and tools match what Python sees."""
    async with LocalSession(tmp_path) as s:
        facts = await s.host_facts()
    assert facts.architecture == platform.machine()
    assert facts.cpu_count == os.cpu_count()
    assert facts.kernel.startswith(platform.system())
    assert facts.memory_total and facts.memory_total > 64 * 2**20
    assert facts.disk_free and facts.disk_free <= shutil.disk_usage(tmp_path).total
    assert facts.disk_path == str(tmp_path)
    assert facts.os_name != "unknown" and facts.user
    assert ("python3" in facts.tools) == (shutil.which("python3") is not None)
    assert ("git" in facts.tools) == (shutil.which("git") is not None)
    if "python3" in facts.tools:
        assert facts.tools["python3"][0].isdigit()
    assert set(facts.tools).isdisjoint(facts.missing_tools)
    prompt = facts.to_prompt()
    assert facts.architecture in prompt and f"{facts.cpu_count} CPUs" in prompt
    assert facts.to_dict()["cpu_count"] == facts.cpu_count


async def test_facts_do_not_move_the_session(tmp_path: Path) -> None:
    """Gathering facts leaves the session's cwd where it was."""
    async with LocalSession(tmp_path) as s:
        await s.host_facts()
        assert s.cwd == str(tmp_path)


ALPINE = """\
@@tether:os
NAME="Alpine Linux"
ID=alpine
VERSION_ID=3.19.1
PRETTY_NAME="Alpine Linux v3.19"
@@tether:uname
Linux
6.6.0
aarch64
@@tether:cpus
4
@@tether:mem
MemTotal:        2048000 kB
MemAvailable:    1024000 kB
@@tether:disk
/home/app
/dev/vda1  10000000  5000000  4000000  56% /
@@tether:user
app
1000
@@tether:sudo
no
@@tether:tool docker
Docker version 24.0.7, build afdd53b
@@tether:found
@@tether:tool docker compose
@@tether:tool git
git version 2.43.0
@@tether:found
@@tether:tool nginx
nginx version: nginx/1.24.0
@@tether:found
"""


def test_parse_sample_output() -> None:
    """A minimal host with a few tools parses into the right facts."""
    tools = {"docker": "docker --version", "docker compose": "docker compose version", "git": "", "nginx": ""}
    facts = parse_host_facts(ALPINE, tools=tools)
    assert facts == HostFacts(
        os_name="Alpine Linux v3.19",
        os_id="alpine",
        os_version="3.19.1",
        kernel="Linux 6.6.0",
        architecture="aarch64",
        cpu_count=4,
        memory_total=2048000 * 1024,
        memory_available=1024000 * 1024,
        disk_free=4000000 * 1024,
        disk_path="/home/app",
        user="app",
        is_root=False,
        passwordless_sudo=False,
        tools={"docker": "24.0.7", "git": "2.43.0", "nginx": "1.24.0"},
        missing_tools=("docker compose",),
    )
    assert "Not installed: docker compose" in facts.to_prompt()
    assert "no sudo" in facts.to_prompt()


def test_parse_empty_output_is_unknown_not_an_error() -> None:
    """A host where every probe failed still yields facts."""
    facts = parse_host_facts("")
    assert facts.os_name == "unknown" and facts.cpu_count is None and facts.tools == {}
    assert "?" in facts.to_prompt()
