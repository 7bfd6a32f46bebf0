#!/usr/bin/env python
"""What a remote command costs through ``SSHSession``: relayed (the default), direct, and
asyncssh's own ``run`` on the same OpenSSH server (the floor).

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_ssh.py            # 3 runs of 30 commands each
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/bench_ssh.py --quick    # 1 run of 5

The script starts a private ``sshd`` on loopback (Debian's openssh-server, as
``scripts/services`` installs it) with its own host and client keys. Each line opens its
connection once, then runs ``echo hi`` over it, one command at a time; the lines take
turns command by command, so the host's noise lands on each alike.

- ``SSHSession``, relayed: the default. The connection is held by a small relay process,
  so that the command watcher can cut it while this process is stopped.
- ``SSHSession(relay=False)``: the connection held by this process (the baseline).
- ``asyncssh conn.run``: what one command costs on this server with nothing of tether's
  (no watcher, no exit-code and working-directory reporting): the floor.

Target: a relayed command at most 1.1x a direct one. The relay copies each byte once more
between two local sockets, a few microseconds a command; a relay whose connection to the
host waits for delayed acknowledgements (Nagle's algorithm left on) reads well above it
(figures in ``benchmarks/README.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import Report, ainterleave, median

SSHD = Path("/usr/sbin/sshd")
COMMAND = "echo hi"


def keygen(path: Path) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, capture_output=True
    )
    return path.with_suffix(".pub").read_text().strip()


def start_sshd(home: Path, log_level: str = "ERROR") -> tuple[subprocess.Popen[bytes], int]:
    """A private sshd on a free loopback port and its port, its keys (``host_key``,
    ``client_key``), ``known_hosts``, configuration and log (``sshd.log``) in ``home``;
    SystemExit saying why when it does not start. (The SSH tests start theirs with it too.)"""
    host_pub, client_pub = keygen(home / "host_key"), keygen(home / "client_key")
    (home / "authorized_keys").write_text(client_pub + "\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    (home / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub}\n")
    (home / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {home / 'host_key'}\n"
        f"AuthorizedKeysFile {home / 'authorized_keys'}\nPidFile {home / 'sshd.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        f"PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nLogLevel {log_level}\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # its privilege-separation directory
    proc = subprocess.Popen([str(SSHD), "-D", "-f", str(home / "sshd_config"), "-E", str(home / "sshd.log")])
    deadline = time.monotonic() + 15
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, port
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise SystemExit(f"sshd did not start: {(home / 'sshd.log').read_text()[-2000:]}") from None
            time.sleep(0.05)


async def measure(report: Report, home: Path, port: int, commands: int) -> None:
    import asyncssh

    from tether.tools import SSHCredentials, SSHSession

    creds = SSHCredentials(
        host="127.0.0.1",
        port=port,
        username=getpass.getuser(),
        key_path=home / "client_key",
        known_hosts=home / "known_hosts",
        connect_timeout=10.0,
    )
    relayed, direct = SSHSession(creds, cwd=str(home)), SSHSession(creds, cwd=str(home), relay=False)
    raw: Any = await asyncssh.connect(
        "127.0.0.1",
        port=port,
        username=getpass.getuser(),
        client_keys=[str(home / "client_key")],
        known_hosts=str(home / "known_hosts"),
    )
    try:
        async with relayed, direct:

            async def session_run(s: SSHSession) -> None:
                result = await s.run(COMMAND)
                if result.stdout != "hi\n":
                    raise SystemExit(f"{s!r}: {result}")

            async def raw_run() -> None:
                result = await raw.run(COMMAND)
                if result.stdout != "hi\n":
                    raise SystemExit(f"asyncssh: {result}")

            times = await ainterleave(
                {
                    "SSHSession, relayed (the default)": lambda: session_run(relayed),
                    "SSHSession(relay=False)": lambda: session_run(direct),
                    "asyncssh conn.run (floor)": raw_run,
                },
                rounds=commands,
                warmup=2,
                rotate=True,
            )
    finally:
        raw.close()
        await raw.wait_closed()
    med = {name: median(ts) * 1e3 for name, ts in times.items()}
    for name, ms in med.items():
        report.line(f"{name}: a command", ms, "ms", note=f"median of {commands}")
    relay_ms, direct_ms, floor_ms = med.values()
    report.line("SSHSession(relay=False) / asyncssh's run", direct_ms / floor_ms, "x")
    report.target("relayed command / direct command", relay_ms / direct_ms, goal=1.1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 run of 5 commands per line")
    ap.add_argument("--runs", type=int, default=None, help="runs (3; 1 with --quick)")
    ap.add_argument(
        "--commands", type=int, default=None, help="commands per line and run (30; 5 with --quick)"
    )
    args = ap.parse_args()
    if not SSHD.exists():
        print(f"bench_ssh: {SSHD} is missing: install Debian's openssh-server (scripts/services does)")
        return 1
    runs = args.runs or (1 if args.quick else 3)
    commands = args.commands or (5 if args.quick else 30)
    report = Report(
        "bench_ssh", "a remote command through SSHSession, relayed and direct, against asyncssh's run"
    )
    with tempfile.TemporaryDirectory(prefix="bench-ssh-") as d:
        home = Path(d)
        proc, port = start_sshd(home)
        try:
            for _ in report.runs(runs):
                asyncio.run(measure(report, home, port, commands))
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
