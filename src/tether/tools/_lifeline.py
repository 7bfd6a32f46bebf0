"""Commands die with the process that started them, even under ``kill -9``.

A ``LocalSession`` command runs in a process group of its own (``start_new_session``), so
no signal meant for this process reaches it, and a ``kill -9`` of this process used to
leave it running (reparented to init): a Celery worker killed mid-command left the command
to finish, and write its effect, after another worker had resumed the run and run it again.

One watcher per process fixes that: a ``/bin/sh`` loop, started on first use in a session
of its own, that reads a pipe whose only writer is this process. Each running command's
process group is registered on the pipe (``+PGID``) and unregistered when the command ends
(``-PGID``). When this process dies, however it dies, the kernel closes the pipe: the
watcher reads EOF, sends SIGKILL to every group still registered (the command and whatever
it started in its group), and exits. A command's start gains a builtin ``echo`` and this
process one pipe write at each end of it: tens of microseconds, lost in the noise of
``benchmarks/bench_sandbox.py``.

* No gap at the start: a plain command registers itself from its first line, through the
  pipe it gets as its standard input (:data:`SELF_REGISTER`), before it replaces that by
  ``/dev/null``; while it holds the pipe the watcher cannot see EOF, so a death of this
  process between the fork and that line still kills it.
* A sandboxed command is registered by this process before its launcher gets its script
  (until then the launcher runs nothing); ``bwrap --die-with-parent`` and its PID
  namespace end it too, but only while the thread that started it lives.
* Background processes of a command that has ended (``nohup server &``) are not killed:
  their group was unregistered when the command ended.
* A process that leaves its group (``setsid``, a daemon's double fork) escapes, as it
  escapes a timeout. A ``fork()`` without exec (multiprocessing's ``fork``, Celery's
  prefork pool) gives the child a watcher of its own when it starts a command.
* A process that does not die but stalls (SIGSTOP, a long pause, cut off from its store)
  past its lease keeps its pipe open, while another runner takes the run over and runs
  the step again. It cannot act while stopped, so its heartbeat sidecar
  (``runtime/_heartbeat_sidecar.py``), which sees its leases lapse, fences it: SIGUSR1 to
  this watcher kills every registered group and each registered after, until no lease
  is lapsed (SIGUSR2). A file (:attr:`Lifeline.fence_file`) names the leases lapsed or
  taken over: ``LocalSession`` and ``SSHSession`` refuse the new commands of those runs
  (:data:`LEASE`), until the lease is renewed or dropped. A command that registers
  while fenced may run its first statements before its kill lands; the file check before
  the start keeps that to commands already starting when the fence came.
* ``prctl(PR_SET_PDEATHSIG)`` was not used: it signals one process (not its group), fires
  when the forking *thread* ends, and needs a ``preexec_fn`` (a slower fork) or one more
  exec per command; and it is Linux-only, where this needs only POSIX pipes, ``sh`` and
  ``kill`` (so it should hold on macOS too; tested on Linux).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import subprocess
import tempfile
import threading
from collections import Counter
from contextvars import ContextVar

__all__ = [
    "FENCE",
    "FENCED",
    "GATED",
    "LEASE",
    "LEASE_TTL",
    "SELF_REGISTER",
    "UNFENCE",
    "WATCHER_NAME",
    "Lifeline",
    "lifeline",
]

logger = logging.getLogger(__name__)

WATCHER = r"""live=' ' fenced=
trap 'sig=1 fenced=1; for id in $live; do kill -s KILL -- "-$id" 2>/dev/null; done; live=" "' USR1
trap 'sig=1 fenced=' USR2
while :; do
  sig=
  if ! read -r id; then
    [ -n "$sig" ] || break
    continue
  fi
  case $id in
    +*) if [ -n "$fenced" ]; then kill -s KILL -- "-${id#+}" 2>/dev/null; else live="$live${id#+} "; fi ;;
    -*) id=${id#-}; case $live in *" $id "*) live="${live%% $id *} ${live#* $id }" ;; esac ;;
  esac
done
for id in $live; do kill -s KILL -- "-$id" 2>/dev/null; done
"""
"""The watcher: keeps the registered groups in a string; at EOF kills those left. SIGUSR1
(:data:`FENCE`) kills them at once and every group registered after it, until SIGUSR2
(:data:`UNFENCE`). A trapped signal makes ``read`` fail without EOF (``sig`` tells the two
apart); whole lines are written at once, so it interrupts no line."""

WATCHER_NAME = "tether-lifeline"
"""The watcher's ``$0``: how the heartbeat sidecar finds its parent's watchers in ``/proc``."""

FENCE, UNFENCE = signal.SIGUSR1, signal.SIGUSR2
"""What the heartbeat sidecar sends the watcher when its parent's lease ran out unrenewed
(kill every command, and each one started after), and when the lease is renewed again or
released."""

FENCED = (
    "this process's lease on its run ran out unrenewed (the process was stopped, or cut off from "
    "the store, for longer than the lease), so another runner may be running this step now: "
    "{what} until the lease is renewed; the runner stops at its next write if the run was taken over"
)
"""Why a command was refused or killed while fenced (``{what}``: which)."""

LEASE: ContextVar[str | None] = ContextVar("tether_lease", default=None)
"""The lease the running code's run holds (``TOKEN:RUN_ID``), set by the heartbeat when a
runner takes it: the fence file names the leases it is up for."""

LEASE_TTL: ContextVar[float | None] = ContextVar("tether_lease_ttl", default=None)
"""That lease's length in seconds: how long a remote command may go without hearing from
this process before its host kills it (``SSHSession``'s ``keepalive``)."""

SELF_REGISTER = "trap '' PIPE; echo \"+$$\" >&0 2>/dev/null; trap - PIPE; exec </dev/null; "
"""A plain command's first words: register its group (``$$``, its own: a new session) on
the pipe it has as stdin, then give it up for ``/dev/null``. A dead watcher costs nothing
but the registration (``EPIPE`` ignored). On the first line, so shells' error messages
keep their line numbers."""


FENCE_PREFIX = "tether-fenced-"
"""Fence files are named ``tether-fenced-PID-RANDOM`` (``PID``: the process they fence)."""


def sweep_fence_files(where: str) -> int:
    """Remove the fence files of processes that are gone; returns how many. A sidecar
    removes its parent's file when the fence lifts, but one killed together with its
    parent while fenced leaves it behind; each new process that may be fenced sweeps."""
    removed = 0
    try:
        names = [n for n in os.listdir(where) if n.startswith(FENCE_PREFIX)]
    except OSError:
        return 0
    for name in names:
        pid = name[len(FENCE_PREFIX) :].partition("-")[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(where, name))
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


GATED = "read -r _t_go || exit 137; unset _t_go; exec </dev/null; "
"""A plain command's first words where it cannot register itself (under uvloop, see
``LocalSession``): wait on standard input until this process has registered it, then give
that up for ``/dev/null``. End of file instead means this process died first: run nothing."""


class Lifeline:
    """This process's watcher: see the module docstring. Thread-safe; one per process."""

    def __init__(self, shell: str = "/bin/sh") -> None:
        self.shell = shell
        self._lock = threading.Lock()
        self._fd: int | None = None
        """The pipe's write end (non-inheritable: only a command's stdin gets it)."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._live: Counter[int] = Counter()
        """The groups registered, re-sent to a new watcher if the last one died."""
        self._broken = False
        """The watcher could not be started: do not try again for every command."""
        self._generation = 0
        """Counts the watchers started (a command registered on a dead one is sent again)."""
        self._fence_file: str | None = None

    def stdin(self) -> tuple[int, int] | None:
        """The pipe for a plain command's stdin (its script starts with :data:`SELF_REGISTER`)
        and the watcher's number, for :meth:`started`; None without a watcher (then the
        command is not protected)."""
        with self._lock:
            fd = self._ensure()
            return None if fd is None else (fd, self._generation)

    def started(self, pgid: int, *, registered: int | None = None) -> None:
        """Track a command's group. ``registered``: the watcher's number from :meth:`stdin`
        when the command registered itself (sent again if that watcher has been replaced)."""
        with self._lock:
            fd = self._ensure()  # before counting it: a new watcher gets the groups counted
            self._live[pgid] += 1
            if fd is not None and registered != self._generation:
                self._send(f"+{pgid}\n")

    def ended(self, pgid: int) -> None:
        """The command has exited: what is left in its group may outlive this process."""
        with self._lock:
            if self._live[pgid] <= 1:
                self._live.pop(pgid, None)
            else:
                self._live[pgid] -= 1
            if self._fd is not None:
                self._send(f"-{pgid}\n")

    @property
    def fence_file(self) -> str:
        """A path of this process's own: the heartbeat sidecar creates it while this
        process's commands are fenced (a lease ran out unrenewed), so that new ones are
        refused before they start, and removes it when the fence is lifted."""
        if self._fence_file is None:
            where = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
            sweep_fence_files(where)
            self._fence_file = os.path.join(where, f"{FENCE_PREFIX}{os.getpid()}-{secrets.token_hex(6)}")
        return self._fence_file

    def fenced(self) -> bool:
        """Whether a fence is up in this process now (see :attr:`fence_file`)."""
        return self._fence_file is not None and os.path.exists(self._fence_file)

    def refuses(self) -> bool:
        """Whether a new command must be refused: a fence is up for the lease this code runs
        under (:data:`LEASE`; any fence when it runs under none). Another run of the process
        (a pool of runs) whose lease holds keeps starting commands."""
        if self._fence_file is None:
            return False
        try:
            with open(self._fence_file) as f:
                keys = f.read().splitlines()
        except OSError:  # no fence (the common case: one failed open)
            return False
        key = LEASE.get()
        return key is None or key in keys

    @property
    def pid(self) -> int | None:
        """The watcher's pid, if one runs."""
        return self._proc.pid if self._proc is not None else None

    def _ensure(self) -> int | None:
        if self._fd is not None and self._proc is not None and self._proc.poll() is None:
            return self._fd
        self._close()
        if self._broken:
            return None
        read, write = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [self.shell, "-c", WATCHER, WATCHER_NAME],
                stdin=read,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd="/",
                env={},
                start_new_session=True,  # out of reach of the terminal's and the worker's group signals
            )
        except (OSError, subprocess.SubprocessError) as exc:
            os.close(write)
            self._broken = True
            logger.warning("cannot start the command watcher (%s): commands may outlive this process", exc)
            return None
        finally:
            os.close(read)
        self._fd = write
        self._generation += 1
        if self._live:
            with contextlib.suppress(OSError):  # dead at once: the next command tries again
                os.write(write, "".join(f"+{pgid}\n" for pgid in self._live.elements()).encode())
        return self._fd

    def _send(self, line: str) -> None:
        assert self._fd is not None
        try:
            os.write(self._fd, line.encode())
        except OSError as exc:  # the watcher died (EPIPE): a new one gets every live group
            logger.warning("the command watcher is gone (%s); starting another", exc)
            self._close()
            self._ensure()

    def _close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if self._proc is not None:
            with contextlib.suppress(OSError):
                self._proc.poll()  # reap it if it ended
            self._proc = None

    def _forked(self) -> None:
        """In a forked child: the parent's pipe and watcher are not this process's."""
        self._lock = threading.Lock()  # another thread may have held it at the fork
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        if self._proc is not None:
            _not_ours.append(self._proc)  # dropped, its Popen would warn that it still runs
        self._fd, self._proc, self._live, self._broken = None, None, Counter(), False
        self._fence_file = None


_not_ours: list[subprocess.Popen[bytes]] = []
"""Watchers of the parent process, in a forked child."""


lifeline = Lifeline()
"""The process's watcher, started by the first command that needs it."""

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lifeline._forked)
