"""``LocalSession``: shell commands on this machine, each in its own process group."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import functools
import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Self

from tether.errors import CommandTimeout, ConfigError, SessionError
from tether.tools._lifeline import FENCED, GATED, SELF_REGISTER, lifeline
from tether.tools._output import (
    SENTINEL_RESERVE,
    OutputBuffer,
    ShellOptions,
    add_note,
    check_env_name,
    exit_code_of,
    preview,
    timeout_note,
    wrap_script,
)
from tether.tools.result import TIMEOUT_EXIT_CODE, CommandResult

if TYPE_CHECKING:
    from tether.tools.facts import HostFacts
    from tether.tools.sandbox import Sandbox

__all__ = ["ENV_ALLOW_LIST", "LocalSession"]

ENV_ALLOW_LIST = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TERM", "TZ", "TMPDIR",
    "HOSTNAME", "VIRTUAL_ENV", "CONDA_PREFIX", "NODE_ENV", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
    "CI", "DEBIAN_FRONTEND", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME",
)  # fmt: skip
"""Variables of this process that commands inherit (``fnmatch`` patterns). Everything else,
``*_KEY``, ``*_TOKEN``, ``*_PASSWORD``, cloud credentials, proxies with passwords in them,
stays out unless passed with ``env=``."""

logger = logging.getLogger(__name__)

PIPE_DRAIN_SECONDS = 0.5
"""After the shell exits, how long to wait for background processes to release its pipes."""

PIPES_HELD_NOTE = (
    "[tether: the command exited but a background process still holds its output pipes; "
    "they were closed, so that process may die on its next write: redirect its output, "
    "e.g. nohup CMD > app.log 2>&1 &]"
)


class _Capture(asyncio.SubprocessProtocol):
    """Reads stdout and stderr as they arrive, into capped buffers; notes exit and EOF."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self.stdout = OutputBuffer(limit, reserve=SENTINEL_RESERVE)
        self.stderr = OutputBuffer(limit)
        self.exited: asyncio.Future[None] = loop.create_future()
        self.finished: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        chunk = data.encode() if isinstance(data, str) else data
        (self.stdout if fd == 1 else self.stderr).feed(chunk)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:  # exited and every pipe at EOF
        if not self.finished.done():
            self.finished.set_result(None)


class LocalSession(ShellOptions):
    """Runs shell lines on this machine through ``/bin/sh -c``.

    Each command gets its own process group (``start_new_session``), its stdin is
    ``/dev/null``, and stdout/stderr are read concurrently into buffers capped at
    ``max_output_bytes`` each (head and tail kept). On timeout the whole group gets
    SIGTERM, then SIGKILL after ``kill_grace`` seconds.

    With ``persist_cwd`` (the default) a ``cd`` carries over: ``run("cd app")`` then
    ``run("npm install")`` installs in ``app``, as an agent typing into a terminal
    expects. Only the directory carries over; ``export`` and ``source`` do not (pass
    ``env=``). Background processes (``nohup server &``) survive the command and the
    session; their output should go to a file. A command still running when this process
    dies (``kill -9`` included) is killed with its process group (``tools/_lifeline.py``).

    Args:
        cwd: where commands start (default: the current directory, resolved now).
        env: variables passed to every command (on top of the inherited ones).
        inherit_env: names (``fnmatch`` patterns) of this process's variables that commands
            inherit; ``None`` passes the whole environment (secrets included: avoid).
        default_timeout: seconds before a command is killed, unless ``run`` says otherwise.
        max_output_bytes: cap per stream; past it the middle of the output is cut.
        shell: the POSIX shell that runs each line.
        persist_cwd: let ``cd`` carry over between commands.
        kill_grace: seconds between SIGTERM and SIGKILL on timeout.
        raise_on_timeout: raise ``CommandTimeout`` instead of returning exit code 124.
        redact: applied to commands and output before they reach DEBUG logs.
        sandbox: run every command in this ``Sandbox`` (``cwd`` is the writable working
            directory); ``run(..., sandboxed=False)`` runs one outside, ``network=True``
            keeps the network for one. In the sandbox nothing a command starts outlives it.
    """

    def __init__(
        self,
        cwd: str | os.PathLike[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        default_timeout: float = 600.0,
        max_output_bytes: int = 1_000_000,
        shell: str = "/bin/sh",
        persist_cwd: bool = True,
        kill_grace: float = 2.0,
        raise_on_timeout: bool = False,
        redact: Callable[[str], str] | None = None,
        sandbox: Sandbox | None = None,
        inherit_env: Iterable[str] | None = ENV_ALLOW_LIST,
    ) -> None:
        base = os.path.abspath(os.fspath(cwd)) if cwd is not None else os.getcwd()
        if not os.path.isdir(base):
            raise ConfigError(f"LocalSession cwd {base!r} is not a directory")
        super().__init__(
            cwd=base,
            env=env,
            default_timeout=default_timeout,
            max_output_bytes=max_output_bytes,
            persist_cwd=persist_cwd,
            kill_grace=kill_grace,
            raise_on_timeout=raise_on_timeout,
            redact=redact,
        )
        self._base_cwd: str = base
        self._cwd: str = base
        self.shell = shell
        self.sandbox = sandbox
        self.inherit_env = None if inherit_env is None else tuple(inherit_env)
        self._next: asyncio.Task[_Spawned | None] | None = None
        """The sandbox launcher for the next command, started while this one runs."""
        self._idle: _Spawned | None = None
        """That launcher once started, until a command takes it."""
        self._guard: AsyncGenerator[None, None] | None = None
        """Kills an idle launcher when its event loop shuts down (``asyncio.run`` ends)."""

    def __repr__(self) -> str:
        return f"LocalSession(cwd={self._cwd!r})"

    @property
    def cwd(self) -> str:
        """Where the next command starts."""
        return self._cwd

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        await self._drop_launcher()
        if self.sandbox is not None:
            self.sandbox.close()

    async def host_facts(self) -> HostFacts:
        from tether.tools.facts import gather_host_facts

        return await gather_host_facts(self)

    async def run(
        self,
        command: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a per-command limit, part of the Session API
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        sandboxed: bool = True,
        network: bool = False,
    ) -> CommandResult:
        """Run one shell line and return its result (see the class docstring).

        ``sandboxed`` and ``network`` apply only when the session has a sandbox.
        """
        if self._closed:
            raise SessionError("LocalSession is closed")
        if lifeline.refuses():
            raise SessionError(FENCED.format(what="commands are refused"))
        limit = self.default_timeout if timeout is None else timeout
        start_dir, note = self._start_dir(cwd)
        merged = self._merged_env(env)
        script = wrap_script(command, cwd_sentinel=self._sentinel if self.persist_cwd else None)
        logger.debug("run %s (cwd=%s)", preview(command, self._redact), start_dir)
        loop = asyncio.get_running_loop()
        argv = [self.shell, "-c", script]
        launch = None
        if self.sandbox is not None and sandboxed:
            launch = self.sandbox.prepare(
                argv, workdir=self._base_cwd, cwd=start_dir, network=network, warm=True
            )
            argv = launch.argv
        started = time.monotonic()
        try:
            spawned = await self._launcher(loop) if launch is not None and launch.warm else None
            if spawned is not None and launch is not None:
                transport, proto = spawned
                lifeline.started(transport.get_pid())  # before its script: it runs nothing until then
                env = dict(os.environ) if merged is None else merged
                stdin = transport.get_pipe_transport(0)
                assert isinstance(stdin, asyncio.WriteTransport)  # spawned with stdin=PIPE
                stdin.write(launch.script(env))
                stdin.close()
                self._next = loop.create_task(self._spawn_launcher(loop))  # while this one runs
            else:
                if launch is not None and launch.warm:  # no launcher could start: join on the way
                    launch = self.sandbox.prepare(  # type: ignore[union-attr]
                        [self.shell, "-c", script], workdir=self._base_cwd, cwd=start_dir, network=network
                    )
                    argv = launch.argv
                watch = lifeline.stdin() if launch is None else None
                gate: tuple[int, int] | None = None
                given: int = asyncio.subprocess.DEVNULL
                if watch is not None and isinstance(loop, asyncio.BaseEventLoop):
                    # the command registers itself: see tools/_lifeline.py
                    argv, given = [self.shell, "-c", SELF_REGISTER + script], watch[0]
                elif watch is not None:
                    # uvloop's spawn leaves copies of the child's standard streams open in
                    # the child: one of the watcher's pipe would keep it from ever seeing
                    # this process die. So this process registers the command, which waits
                    # for that on a pipe of its own (and exits if this process died first).
                    gate = os.pipe()
                    argv, given, watch = [self.shell, "-c", GATED + script], gate[0], None
                try:
                    transport, proto = await loop.subprocess_exec(
                        lambda: _Capture(loop, self.max_output_bytes),
                        *argv,
                        stdin=given,
                        stdout=asyncio.subprocess.PIPE,
                        stderr=asyncio.subprocess.PIPE,
                        cwd=start_dir,
                        env=merged,
                        start_new_session=True,
                    )
                    lifeline.started(transport.get_pid(), registered=None if watch is None else watch[1])
                    if gate is not None:
                        os.write(gate[1], b"\n")
                finally:
                    if gate is not None:
                        os.close(gate[0])
                        os.close(gate[1])
        except (OSError, subprocess.SubprocessError) as exc:
            if launch is not None:
                launch.close()
            raise SessionError(f"cannot start {argv[0]}: {exc}") from exc
        timed_out = False
        pipes_held = False
        pid = transport.get_pid()
        try:
            try:
                await asyncio.wait_for(asyncio.shield(proto.exited), limit)
            except TimeoutError:
                timed_out = True
                await _terminate_group(pid, proto.exited, self.kill_grace)
            try:
                await asyncio.wait_for(asyncio.shield(proto.finished), PIPE_DRAIN_SECONDS)
            except TimeoutError:
                pipes_held = not timed_out
        finally:
            if not proto.exited.done():  # cancelled: leave nothing running
                _killpg(pid, signal.SIGKILL)
                try:
                    await asyncio.wait_for(asyncio.shield(proto.exited), 2.0)
                except (TimeoutError, asyncio.CancelledError):
                    pass
            lifeline.ended(pid)
            transport.close()
            if launch is not None:
                if launch.warm and self._next is not None:  # spare the next command's launcher
                    launch.keep_group = await _pid_of(self._next)
                if launch.close():
                    await _until_gone(launch.lingering)
                elif launch.cgroup is None:  # no cgroup: what it left is in its process group
                    await _until_gone(functools.partial(_group_lingers, pid))
        duration = time.monotonic() - started
        returncode = transport.get_returncode()
        stdout, out_cut, where = proto.stdout.finish(self._sentinel if self.persist_cwd else None)
        stderr, err_cut, _ = proto.stderr.finish()
        stderr = note + stderr
        if pipes_held:
            stderr = add_note(stderr, PIPES_HELD_NOTE)
        if returncode == -signal.SIGKILL and not timed_out and lifeline.fenced():
            stderr = add_note(stderr, f"[tether: killed: {FENCED.format(what='commands are killed')}]")
        if where is not None and not timed_out:
            self._follow_cd(start_dir, os.fsdecode(where))
        exit_code = TIMEOUT_EXIT_CODE if timed_out else exit_code_of(returncode or 0)
        if timed_out:
            stderr = add_note(stderr, timeout_note(limit))
        result = CommandResult(
            command=command,
            success=exit_code == 0,
            stdout=stdout,
            stderr=stderr,
            exit_code=exit_code,
            duration=duration,
            stdout_truncated=out_cut,
            stderr_truncated=err_cut,
            timed_out=timed_out,
        )
        _log_result(result, self._redact)
        if timed_out and self.raise_on_timeout:
            raise CommandTimeout(command, limit)
        return result

    async def _launcher(self, loop: asyncio.AbstractEventLoop) -> _Spawned | None:
        """The launcher started for this command (or one started now); None without a cgroup."""
        task, self._next = self._next, None
        if task is not None and task.get_loop() is loop:
            with contextlib.suppress(Exception):
                ready = await task
                self._idle = None
                if ready is not None and ready[0].get_returncode() is None:
                    return ready
        elif task is not None:  # started under another event loop (a new asyncio.run)
            _discard(task)
        return await self._spawn_launcher(loop)

    async def _spawn_launcher(self, loop: asyncio.AbstractEventLoop) -> _Spawned | None:
        argv = self.sandbox.launcher() if self.sandbox is not None else None
        if argv is None or self._closed:
            return None
        try:
            spawned = await loop.subprocess_exec(
                lambda: _Capture(loop, self.max_output_bytes),
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self._base_cwd,
                env={},  # the command's environment arrives with its script
                start_new_session=True,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            logger.debug("cannot start a sandbox launcher: %s", exc)
            return None
        self._idle = spawned
        self._guard = self._until_loop_ends(spawned)
        await self._guard.__anext__()  # registered with the loop: closed by shutdown_asyncgens
        return spawned

    async def _until_loop_ends(self, spawned: _Spawned) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            if self._idle is spawned:
                self._idle = None
                await _reap(spawned)

    async def _drop_launcher(self) -> None:
        task, self._next = self._next, None
        if task is None:
            return
        if task.get_loop() is not asyncio.get_running_loop():
            _discard(task)
            return
        with contextlib.suppress(Exception):
            spawned = await task
            self._idle = None
            if spawned is not None:
                await _reap(spawned)

    def _start_dir(self, cwd: str | None) -> tuple[str, str]:
        if cwd is not None:
            path = os.path.join(self._cwd, os.path.expanduser(cwd))
            if not os.path.isdir(path):
                raise SessionError(f"cwd {path!r} is not a directory")
            return os.path.normpath(path), ""
        if os.path.isdir(self._cwd):
            return self._cwd, ""
        gone, self._cwd = self._cwd, self._base_cwd
        logger.warning("working directory %s no longer exists; back to %s", gone, self._base_cwd)
        return self._cwd, f"[tether: {gone} no longer exists; running in {self._base_cwd}]\n"

    def _follow_cd(self, start_dir: str, where: str) -> None:
        if where != start_dir and os.path.isdir(where):
            self._cwd = where

    def _merged_env(self, env: Mapping[str, str] | None) -> dict[str, str] | None:
        for name in env or {}:
            check_env_name(name)
        if self.inherit_env is None:
            if not self._env and not env:
                return None  # inherit this process's environment unchanged
            return {**os.environ, **self._env, **(env or {})}
        inherited = _env_matcher(self.inherit_env)
        kept = {k: v for k, v in os.environ.items() if inherited(k)}
        return {**kept, **self._env, **(env or {})}


@functools.lru_cache(maxsize=32)
def _env_matcher(patterns: tuple[str, ...]) -> Callable[[str], object]:
    """``fnmatch.fnmatchcase`` against any of ``patterns``, as one compiled pattern: trying
    each pattern on each of the process's variables was most of a command's start-up."""
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns) or "(?!)").match


_Spawned = tuple[asyncio.SubprocessTransport, "_Capture"]


async def _pid_of(task: asyncio.Task[_Spawned | None]) -> int | None:
    """The launcher's pid (its process group), once it has started."""
    with contextlib.suppress(Exception):
        spawned = await asyncio.shield(task)
        return spawned[0].get_pid() if spawned is not None else None
    return None


def _discard(task: asyncio.Task[_Spawned | None]) -> None:
    """Kill a launcher that belongs to an event loop no longer running."""
    if task.done() and not task.cancelled() and task.exception() is None:
        spawned = task.result()
        if spawned is not None:
            _kill_spawned(spawned)
    else:
        task.cancel()


async def _reap(spawned: _Spawned) -> None:
    """Kill a launcher and wait for its exit while its event loop still runs."""
    _killpg(spawned[0].get_pid(), signal.SIGKILL)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(asyncio.shield(spawned[1].exited), 2.0)
    _kill_spawned(spawned)


async def _until_gone(lingering: Callable[[], bool]) -> None:
    """Wait (up to ~2 s) until the processes a sandboxed command left behind have exited.

    The sandbox reports the command's exit before it has torn down what the command
    started; without this wait, a command's background processes (a fork bomb's, say)
    could still be running when its result is returned.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 2.0
    delay = 0.001
    while lingering():
        if loop.time() >= deadline:
            logger.warning("processes of a sandboxed command were still exiting after 2 s")
            return
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.02)


def _group_lingers(pgid: int) -> bool:
    """Whether a live process is left in a sandboxed command's group (each is sent SIGKILL).

    Signalling the group succeeds while a zombie is left, and the sandbox's own init is
    one until whatever adopted it reaps it; so the group's members are looked up, among
    the processes started after its leader (the sandbox starts them all after it, unless
    pid numbers wrapped around in between: then this wait may end early): far fewer reads
    of ``/proc`` than a walk over every process."""
    return _killpg(pgid, signal.SIGKILL) and _group_alive(pgid, since_pid=pgid)


def _kill_spawned(spawned: _Spawned) -> None:
    _killpg(spawned[0].get_pid(), signal.SIGKILL)
    with contextlib.suppress(Exception):
        spawned[0].close()


def _killpg(pgid: int, sig: int) -> bool:
    """Signal a process group; False if it is already gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed user (setuid); nothing more we can do
        return False
    return True


def _group_alive(pgid: int, since_pid: int = 0) -> bool:
    """Whether a live (not zombie) process is left in the group; zombies wait on a reaper.
    ``since_pid``: only processes whose pid is at least that are looked at."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return _killpg(pgid, 0)
    for entry in entries:
        if not entry.isdigit() or int(entry) < since_pid:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


async def _terminate_group(pgid: int, exited: asyncio.Future[None], grace: float) -> None:
    """SIGTERM the group, give it ``grace`` seconds, then SIGKILL whatever is left."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    _killpg(pgid, signal.SIGTERM)
    try:
        await asyncio.wait_for(asyncio.shield(exited), grace)
    except TimeoutError:
        pass
    # grandchildren may linger after the leader; poll: no event tells when a group empties
    while loop.time() < deadline and _group_alive(pgid):  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    _killpg(pgid, signal.SIGKILL)
    try:
        await asyncio.wait_for(asyncio.shield(exited), 5.0)
    except TimeoutError:
        logger.warning("process group %d did not exit after SIGKILL", pgid)


def _log_result(result: CommandResult, redact: Callable[[str], str] | None) -> None:
    logger.info(
        "command exit=%d %.2fs stdout=%dB stderr=%dB%s",
        result.exit_code,
        result.duration,
        len(result.stdout),
        len(result.stderr),
        " timed out" if result.timed_out else "",
    )
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("stdout: %s", preview(result.stdout, redact))
        logger.debug("stderr: %s", preview(result.stderr, redact))
