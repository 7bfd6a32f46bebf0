"""``Sandbox``: run each command in an OS sandbox (bubblewrap) with resource limits.

Inside, the file system is the host's, read-only, except the working directory and a
private ``/tmp`` kept for the session; secret paths (``~/.ssh``, ``~/.aws``, cloud and
registry credentials, ``/etc/shadow``, ``.env`` files above the working directory) are
hidden; there is no network unless the command is allowed it; daemons' sockets under
``/run`` are out of reach when offline. Each command gets its own PID namespace, so
nothing it starts outlives it, and limits on processes (a pids cgroup per session when one
is writable, else ``RLIMIT_NPROC`` for a non-root user; root ignores that one), address
space and file size (``prlimit`` from util-linux).

``Sandbox.detect()`` finds a working ``bwrap`` (Debian/Ubuntu package ``bubblewrap``) and
returns ``None`` when there is none or it cannot create namespaces here; callers then say
so and fall back to the ``ask`` mode.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = ["SECRET_PATHS", "Limits", "Sandbox"]

logger = logging.getLogger(__name__)

SECRET_PATHS = (
    "~/.ssh", "~/.aws", "~/.config/gcloud", "~/.azure", "~/.kube", "~/.docker", "~/.gnupg", "~/.netrc",
    "~/.git-credentials", "~/.npmrc", "~/.pypirc", "~/.password-store", "~/.vault-token", "~/.config/gh",
    "~/.pgpass", "~/.my.cnf", "~/.env", "/root/.ssh", "/etc/shadow", "/etc/gshadow", "/run/secrets",
    "/var/run/secrets", "/var/run/docker.sock", "/run/docker.sock", "/run/containerd", "/run/podman",
)  # fmt: skip
"""Hidden inside the sandbox (an empty directory or an empty file in their place)."""

_COUNTER = itertools.count()


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits of every sandboxed command (``None``: no limit)."""

    processes: int | None = 256
    """Processes and threads at once (a pids cgroup, or RLIMIT_NPROC for a non-root user)."""
    memory_bytes: int | None = 4 * 1024**3
    """Address space of each process (RLIMIT_AS)."""
    file_bytes: int | None = 2 * 1024**3
    """Largest file a command may write (RLIMIT_FSIZE)."""


_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(slots=True)
class _Launch:
    """One prepared command: the argv to exec, what runs in the child before exec, cleanup.

    ``warm``: ``argv`` is meant for a launcher (:meth:`Sandbox.launcher`) that already
    joined the session's cgroup: :meth:`script` is what it reads on stdin.
    """

    argv: list[str]
    cgroup: str | None = None
    cleanup: list[Callable[[], None]] = field(default_factory=list)
    warm: bool = False
    keep_group: int | None = None
    """A process group the cleanup spares (the next command's launcher, already waiting)."""

    limits: list[str] = field(default_factory=list)
    """``ulimit`` commands the launcher runs before exec (no ``prlimit`` process)."""

    def script(self, env: dict[str, str]) -> bytes:
        """The launcher's stdin: the environment, the limits, then exec ``argv`` (stdin /dev/null)."""
        lines = [f"export {k}={shlex.quote(v)}\n" for k, v in env.items() if _SHELL_NAME.fullmatch(k)]
        lines += [f"{limit} || exit 125\n" for limit in self.limits]
        lines.append(f"exec {shlex.join(self.argv)} < /dev/null\n")
        return "".join(lines).encode()

    def close(self) -> bool:
        """Kill whatever is left in the command's cgroup; True if something was.

        bubblewrap reports the command's exit before its PID namespace is torn down, so
        processes the command left behind may still be alive (or being killed) here. A
        caller that promises "nothing outlives the command" waits on :meth:`lingering`.
        """
        left = False
        if self.cgroup is not None:
            left = _kill_cgroup(self.cgroup, remove=False, keep_group=self.keep_group) > 0
        for fn in self.cleanup:
            with contextlib.suppress(OSError):
                fn()
        return left

    def lingering(self) -> bool:
        """Whether processes of the command are still in its cgroup (each is sent SIGKILL again)."""
        if self.cgroup is None:
            return False
        return _kill_cgroup(self.cgroup, remove=False, keep_group=self.keep_group) > 0


class Sandbox:
    """Wraps command lines in ``bwrap`` (see the module docstring).

    Args:
        bwrap: path of the ``bwrap`` binary.
        limits: resource limits per command.
        hidden: paths hidden inside the sandbox (``~`` is the user's home).
        writable: more directories that commands may write, besides the working directory.
        cgroups: use a pids cgroup for the process limit when one is writable.
    """

    def __init__(
        self,
        bwrap: str,
        *,
        limits: Limits | None = None,
        hidden: Iterable[str] = SECRET_PATHS,
        writable: Iterable[str] = (),
        cgroups: bool = True,
    ) -> None:
        self.bwrap = bwrap
        self.limits = limits or Limits()
        self.hidden = tuple(hidden)
        self.writable = tuple(os.path.abspath(os.path.expanduser(p)) for p in writable)
        self._pids_root = _pids_cgroup_root() if cgroups and self.limits.processes else None
        self._cgroup: str | None = None
        """The session's pids cgroup, made on first use (one per session: its setup is not cheap)."""
        self._tmp = tempfile.mkdtemp(prefix="tether-sandbox-tmp-")
        self._cat = shutil.which("cat") or "/bin/cat"
        self._file_block: int | None = None
        """Bytes per unit of ``ulimit -f`` in /bin/sh (0: unknown); probed on first use."""
        self._prlimit = shutil.which("prlimit")
        if self._prlimit is None and (self.limits.memory_bytes or self.limits.file_bytes):
            logger.warning("prlimit (util-linux) not found: memory and file-size limits are not enforced")

    def __repr__(self) -> str:
        return f"Sandbox({self.bwrap!r}, limits={self.limits!r})"

    @classmethod
    def detect(cls, *, limits: Limits | None = None, writable: Iterable[str] = ()) -> Sandbox | None:
        """A working sandbox, or ``None`` (no ``bwrap`` on PATH, or namespaces refused here)."""
        path = shutil.which("bwrap")
        if path is None:
            return None
        probe = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--unshare-net", "--unshare-pid", "true"]
        try:
            done = subprocess.run(probe, capture_output=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode != 0:
            logger.warning(
                "bwrap cannot create namespaces here: %s", done.stderr.decode(errors="replace").strip()
            )
            return None
        return cls(path, limits=limits, writable=writable)

    @property
    def process_limit_enforced(self) -> bool:
        """Whether the process limit holds (root ignores RLIMIT_NPROC: it needs a cgroup)."""
        return self.limits.processes is None or self._pids_root is not None or os.geteuid() != 0

    def launcher(self) -> list[str] | None:
        """A process to start ahead of the next command: it joins the session's pids cgroup,
        then waits for its :meth:`_Launch.script` on stdin.

        Moving a process into a cgroup waits for the kernel (an RCU grace period, about
        10 ms): a launcher started while the previous command runs takes that wait off
        the next command's start. ``None`` when there is no cgroup to join.
        """
        if self._pids_root and self._cgroup is None:
            self._cgroup = _new_cgroup(self._pids_root, self.limits.processes)
        if self._cgroup is None:
            return None
        procs = os.path.join(self._cgroup, "cgroup.procs")
        body = f'echo $$ > "$1" || exit 125; eval "$({shlex.quote(self._cat)})"'
        return ["/bin/sh", "-c", body, "tether-sandbox", procs]

    def prepare(
        self, argv: list[str], *, workdir: str, cwd: str, network: bool, warm: bool = False
    ) -> _Launch:
        """The launch of ``argv`` in the sandbox: ``workdir`` writable, ``cwd`` the start directory.

        ``warm``: for a :meth:`launcher` (which joined the cgroup), when there is a cgroup.
        """
        args = [self.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        args += [
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
        ]
        if not network:
            args += ["--unshare-net"]
            if os.path.isdir("/run"):
                args += ["--tmpfs", "/run"]  # daemons' sockets: a socket ignores read-only mounts
        args += ["--bind", self._tmp, "/tmp"]
        home = os.path.expanduser("~")
        for spec in (*self.hidden, *_env_files_above(workdir)):
            path = os.path.abspath(os.path.join(home, spec[2:]) if spec.startswith("~/") else spec)
            if _inside(workdir, path) or not os.path.lexists(path):
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                args += ["--tmpfs", path]
            else:
                args += ["--ro-bind", "/dev/null", path]
        for path in (workdir, *self.writable):
            if os.path.isdir(path):
                args += ["--bind", path, path]
        args += ["--chdir", cwd, "--", *argv]
        if self._pids_root and self._cgroup is None:
            self._cgroup = _new_cgroup(self._pids_root, self.limits.processes)
        if warm and self._cgroup is not None:
            ulimits = self._ulimits()
            if ulimits is not None:
                return _Launch(args, self._cgroup, warm=True, limits=ulimits)
            return _Launch(self._limited(args, join=False), self._cgroup, warm=True)
        return _Launch(self._limited(args), self._cgroup)

    def _ulimits(self) -> list[str] | None:
        """The memory and file-size limits as the launcher shell's ``ulimit`` commands, or
        None if its units could not be confirmed (then ``prlimit`` sets them)."""
        if self._file_block is None:
            self._file_block = _ulimit_file_block()
        if self._file_block == 0:
            return None
        out = []
        if self.limits.memory_bytes is not None:
            out.append(f"ulimit -v {self.limits.memory_bytes // 1024}")
        if self.limits.file_bytes is not None:
            out.append(f"ulimit -f {self.limits.file_bytes // self._file_block}")
        return out

    def _limited(self, args: list[str], *, join: bool = True) -> list[str]:
        """Join the cgroup and set the rlimits in a tiny shell before exec'ing bwrap.

        A Python ``preexec_fn`` would do the same but forces a full fork of this process
        (slower by several ms: see benchmarks/README.md, "bench_sandbox").
        """
        limits = self.limits
        prlimit: list[str] = []
        if self._prlimit is not None:
            if limits.memory_bytes is not None:
                prlimit.append(f"--as={limits.memory_bytes}")
            if limits.file_bytes is not None:
                prlimit.append(f"--fsize={limits.file_bytes}")
            if limits.processes is not None and self._cgroup is None and os.geteuid() != 0:
                prlimit.append(f"--nproc={limits.processes + _count_own_processes()}")
        head = [self._prlimit, *prlimit, "--"] if prlimit and self._prlimit else []
        if self._cgroup is None or not join:
            return [*head, *args]
        procs = os.path.join(self._cgroup, "cgroup.procs")
        enter = 'echo $$ > "$1" && shift && exec "$@"'
        return ["/bin/sh", "-c", enter, "tether-sandbox", procs, *head, *args]

    def close(self) -> None:
        """Remove the session's private ``/tmp`` and its cgroup (killing what is left in it)."""
        shutil.rmtree(self._tmp, ignore_errors=True)
        if self._cgroup is not None:
            _kill_cgroup(self._cgroup, remove=True)
            self._cgroup = None


def _inside(root: str, path: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root + "/")


def _env_files_above(workdir: str) -> list[str]:
    """``.env`` files in the directories above the working directory (a cloned repo's neighbours)."""
    out = []
    parent = os.path.dirname(os.path.abspath(workdir))
    while True:
        candidate = os.path.join(parent, ".env")
        if os.path.lexists(candidate):
            out.append(candidate)
        if parent == os.path.dirname(parent):
            return out
        parent = os.path.dirname(parent)


def _count_own_processes() -> int:
    uid = os.getuid()
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += 1
    return count


def _pids_cgroup_root() -> str | None:
    """A pids cgroup directory this process may create children in, or ``None``."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            base = os.path.join("/sys/fs/cgroup/pids", path.lstrip("/"))
        elif controllers == "" and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            base = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
            with contextlib.suppress(OSError), open(os.path.join(base, "cgroup.controllers")) as f:
                if "pids" not in f.read().split():
                    continue
        else:
            continue
        probe = os.path.join(base, f"tether-probe-{os.getpid()}")
        try:
            os.mkdir(probe)
            os.rmdir(probe)
        except OSError:
            continue
        return base
    return None


def _ulimit_file_block() -> int:
    """Bytes per ``ulimit -f`` unit of /bin/sh (512 in dash and POSIX shells), checked by
    reading the limit back from the kernel; 0 when it cannot be confirmed."""
    probe = "ulimit -v 4096000 && ulimit -f 1000 && cat /proc/self/limits"
    try:
        out = subprocess.run(["/bin/sh", "-c", probe], capture_output=True, timeout=5, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    soft = {line[:26].strip(): line[26:].split()[0] for line in out.decode().splitlines()[1:] if line[26:]}
    if soft.get("Max address space") != str(4096000 * 1024):
        return 0
    for block in (512, 1024):
        if soft.get("Max file size") == str(1000 * block):
            return block
    return 0


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _new_cgroup(root: str, limit: int | None) -> str | None:
    path = os.path.join(root, f"tether-{os.getpid()}-{next(_COUNTER)}")
    try:
        os.mkdir(path)
        with open(os.path.join(path, "pids.max"), "w") as f:
            f.write(str(limit) if limit is not None else "max")
    except OSError as exc:
        logger.warning("cannot create the pids cgroup %s: %s", path, exc)
        with contextlib.suppress(OSError):
            os.rmdir(path)
        return None
    return path


def _kill_cgroup(path: str, *, remove: bool, keep_group: int | None = None) -> int:
    """SIGKILL every process in the cgroup (but ``keep_group``'s); how many were signalled.

    Removing: until it is empty, then remove it (up to ~2 s). Else one pass: the caller
    decides whether to wait for what was signalled.
    """
    for _ in range(200):
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            return 0
        if keep_group is not None:
            pids = [p for p in pids if _group_of(p) != keep_group]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if not remove:
            return len(pids)
        if not pids:
            try:
                os.rmdir(path)
            except OSError:
                pass  # the last ones are still being reaped
            else:
                return 0
        time.sleep(0.01)
    logger.warning("the pids cgroup %s could not be removed", path)
    return 0
