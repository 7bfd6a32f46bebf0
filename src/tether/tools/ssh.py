"""``SSHSession``: the same ``run`` as ``LocalSession``, on a remote host, over asyncssh.

asyncssh is an optional dependency (``pip install 'tether[ssh]'``), imported on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import posixpath
import shlex
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from tether.errors import CommandTimeout, ConfigError, SessionError
from tether.tools._lifeline import FENCED, LEASE_TTL, lifeline
from tether.tools._output import (
    SENTINEL_RESERVE,
    OutputBuffer,
    ShellOptions,
    add_note,
    check_env_name,
    env_exports,
    new_marker,
    preview,
    timeout_note,
    wrap_script,
)
from tether.tools._relay import Relay
from tether.tools.result import TIMEOUT_EXIT_CODE, CommandResult

if TYPE_CHECKING:
    import asyncssh

    from tether.tools.facts import HostFacts

__all__ = ["SSHCredentials", "SSHSession"]

logger = logging.getLogger(__name__)

PIPE_DRAIN_SECONDS = 0.5
"""After the remote shell exits, how long to wait for its output channel to close."""

_PRELUDE_LIMIT = 4096


def _import_asyncssh() -> ModuleType:
    try:
        import asyncssh
    except ImportError as exc:
        raise ConfigError("SSHSession needs asyncssh: pip install 'tether[ssh]'") from exc
    return asyncssh


@dataclass(frozen=True, slots=True, kw_only=True)
class SSHCredentials:
    """How to reach and log in to a host. ``repr`` never shows the password or passphrase."""

    host: str
    """Host name or address."""
    username: str
    """Remote user."""
    port: int = 22
    """SSH port."""
    password: str | None = None
    """Password authentication (used only when given)."""
    key_path: str | os.PathLike[str] | None = None
    """Private key file for public-key authentication."""
    key_passphrase: str | None = None
    """Passphrase of an encrypted ``key_path``."""
    known_hosts: str | os.PathLike[str] | Literal["ignore"] | None = None
    """Host key check: ``None`` uses ``~/.ssh/known_hosts``, a path uses that file,
    ``"ignore"`` accepts any host key (only for throwaway hosts: it allows a man in the middle)."""
    connect_timeout: float = 15.0
    """Seconds to establish the connection and log in."""

    @classmethod
    def from_target(cls, target: str, **kwargs: Any) -> SSHCredentials:
        """Parse ``user@host[:port]`` (as the CLI's ``--host`` takes it)."""
        user, sep, rest = target.rpartition("@")
        if not sep or not user or not rest:
            raise ConfigError(f"SSH target {target!r} must look like user@host[:port]")
        host, port = rest, 22
        if rest.startswith("["):  # [::1]:2222
            host, _, tail = rest[1:].partition("]")
            if tail.startswith(":"):
                port = _port(tail[1:], target)
        elif rest.count(":") == 1:
            host, raw = rest.split(":")
            port = _port(raw, target)
        return cls(host=host, username=user, port=port, **kwargs)

    @property
    def target(self) -> str:
        return f"{self.username}@{self.host}:{self.port}"

    def __repr__(self) -> str:
        return (
            f"SSHCredentials(host={self.host!r}, port={self.port}, username={self.username!r}, "
            f"password={'***' if self.password else None}, key_path={self.key_path!r}, "
            f"key_passphrase={'***' if self.key_passphrase else None}, "
            f"known_hosts={self.known_hosts!r}, connect_timeout={self.connect_timeout})"
        )

    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments for ``asyncssh.connect``."""
        options: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "username": self.username,
            "connect_timeout": self.connect_timeout,
            "login_timeout": self.connect_timeout,
        }
        if self.known_hosts == "ignore":
            options["known_hosts"] = None
        elif self.known_hosts is not None:
            options["known_hosts"] = os.path.expanduser(os.fspath(self.known_hosts))
        if self.key_path is not None:
            options["client_keys"] = [os.path.expanduser(os.fspath(self.key_path))]
            options["passphrase"] = self.key_passphrase
            options["agent_path"] = None
        if self.password is not None:
            options["password"] = self.password
            if self.key_path is None:  # only the password: no agent or default keys
                options["client_keys"] = None
                options["agent_path"] = None
        return options


def _port(raw: str, target: str) -> int:
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ConfigError(f"SSH target {target!r} has an invalid port {raw!r}")
    return int(raw)


class _Capture:
    """asyncssh session handler: capped stdout/stderr, the remote pid, exit and close."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int, pid_marker: bytes) -> None:
        self.stdout = OutputBuffer(limit, reserve=SENTINEL_RESERVE)
        self.stderr = OutputBuffer(limit)
        self.pid: int | None = None
        self.exit_status: int | None = None
        self.exit_signal: str | None = None
        self.lost: Exception | None = None
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self._marker = pid_marker
        self._prelude: bytearray | None = bytearray()

    # asyncssh.SSHClientSession callbacks (duck-typed: asyncssh is imported lazily)
    def connection_made(self, chan: object) -> None:
        pass

    def session_started(self) -> None:
        pass

    def data_received(self, data: bytes, datatype: int | None) -> None:
        if datatype is None:
            self.stdout.feed(data)
        else:
            self._stderr(data)

    def eof_received(self) -> bool:
        # True: our side of the channel stays open. Returning False makes asyncssh answer the
        # end of the command's output with an EOF of its own, which ends the command's stdin:
        # the remote watcher (see _watched) would then take the command for one whose
        # connection dropped and kill it, though it only sent its output elsewhere, or had
        # just exited and sshd not yet reaped it (its background jobs went with it).
        return True

    def pause_writing(self) -> None:
        pass

    def resume_writing(self) -> None:
        pass

    def xon_xoff_requested(self, client_can_do: bool) -> None:
        pass

    def exit_status_received(self, status: int) -> None:
        self.exit_status = status
        _settle(self.exited)

    def exit_signal_received(self, signal: str, core_dumped: bool, msg: str, lang: str) -> None:
        self.exit_signal = signal
        _settle(self.exited)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc
        self.flush_prelude()
        _settle(self.exited)
        _settle(self.closed)

    def _stderr(self, data: bytes) -> None:
        if self._prelude is None:
            self.stderr.feed(data)
            return
        self._prelude += data
        start = self._prelude.find(self._marker)
        if start >= 0:
            end = self._prelude.find(b"\n", start)
            if end < 0:
                return
            raw = bytes(self._prelude[start + len(self._marker) : end])
            self.pid = int(raw) if raw.isdigit() else None
            rest = self._prelude[:start] + self._prelude[end + 1 :]
            self._prelude = None
            self.stderr.feed(bytes(rest))
        elif len(self._prelude) > _PRELUDE_LIMIT:
            self.flush_prelude()

    def flush_prelude(self) -> None:
        if self._prelude is not None:
            self.stderr.feed(bytes(self._prelude))
            self._prelude = None


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class SSHSession(ShellOptions):
    """Runs shell lines on a remote host through ``/bin/sh -c``, like ``LocalSession``.

    The connection opens on ``connect()``, ``async with`` or the first ``run`` and is
    reopened if it drops between commands. Each command gets its own channel. The remote
    shell prints its pid first (stripped from stderr), so a timeout can kill its whole
    process group from a second channel (``kill -TERM -PID``, then ``-KILL``), which works
    even where the server ignores SSH signal requests; the channel is then closed.
    Environment variables reach the remote shell on the channel's standard input, which
    the script reads first (servers usually refuse SSH env requests, and a value on the
    command line would show in the remote process list and in asyncssh's log). ``cd``
    carries over between commands as in ``LocalSession``.

    Args:
        credentials: host, user and how to authenticate.
        cwd: where commands start (default: the login directory).
        env, default_timeout, max_output_bytes, persist_cwd, kill_grace,
        raise_on_timeout, redact: as for ``LocalSession``.
        relay: hold the connection in a relay process (see below).
        keepalive: seconds after which the host kills a running command it has not heard
            from this process (this machine lost or cut off from the network, or this
            process stopped or frozen), so that the command does not run on beside the
            runner that takes its run over. While a command runs, this side sends a line on
            its standard input every third of that. ``"lease"`` (the default): two thirds
            of the lease of the run the command runs under, and never for a command outside
            a leased run (nobody else can run its step then). ``None``: never; the command
            then runs on until the host's sshd drops the connection. The lines come from
            this process's event loop: a step that blocks the loop or holds the GIL that
            long while its command runs has the command killed.
    """

    def __init__(
        self,
        credentials: SSHCredentials,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        default_timeout: float = 600.0,
        max_output_bytes: int = 1_000_000,
        persist_cwd: bool = True,
        kill_grace: float = 2.0,
        raise_on_timeout: bool = False,
        redact: Callable[[str], str] | None = None,
        relay: bool = True,
        keepalive: float | Literal["lease"] | None = "lease",
    ) -> None:
        if (
            keepalive is not None
            and keepalive != "lease"
            and not (type(keepalive) in (int, float) and keepalive > 0)
        ):
            raise ConfigError(f'keepalive: seconds (> 0), "lease" or None, not {keepalive!r}')
        super().__init__(
            cwd=cwd,
            env=env,
            default_timeout=default_timeout,
            max_output_bytes=max_output_bytes,
            persist_cwd=persist_cwd,
            kill_grace=kill_grace,
            raise_on_timeout=raise_on_timeout,
            redact=redact,
        )
        self.credentials = credentials
        self._pid_marker = new_marker("pid")
        self._env_end = new_marker("env")
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()
        self.relay = relay
        """Whether the connection is held by a relay process (``tools/_relay.py``) that the
        command watcher kills when this process's lease runs out unrenewed, so that a
        stopped process's remote command ends before another runner runs the step again.
        ``False`` connects directly (one process and one copy of each byte less): the
        remote command of a stopped process then runs on."""
        self._relay: Relay | None = None
        self.keepalive = keepalive

    def _keepalive(self) -> float | None:
        """The keepalive of a command starting now (see the class's ``keepalive``). Under a
        lease, two thirds of it: the host may have last heard from this process up to a
        third of a lease before it was cut off, and the heartbeat sidecar may have last
        renewed the lease up to a third of one before; the command then ends before the
        lease can run out and another runner take the run over."""
        if self.keepalive == "lease":
            ttl = LEASE_TTL.get()
            return None if ttl is None else ttl * 2 / 3
        return self.keepalive

    def __repr__(self) -> str:
        return f"SSHSession({self.credentials.target}, cwd={self._cwd!r})"

    @property
    def cwd(self) -> str | None:
        """Where the next command starts; ``None`` (the login directory) until a command reports it."""
        return self._cwd

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def connect(self) -> None:
        """Open the connection (a no-op while it is open); ``SessionError`` if that fails."""
        await self._connection()

    async def close(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            await conn.wait_closed()
        await self._drop_relay()

    async def _drop_relay(self) -> None:
        relay, self._relay = self._relay, None
        if relay is not None:
            await relay.close()

    async def host_facts(self) -> HostFacts:
        from tether.tools.facts import gather_host_facts

        return await gather_host_facts(self)

    async def _connection(self) -> asyncssh.SSHClientConnection:
        if self._closed:
            raise SessionError(f"SSHSession to {self.credentials.target} is closed")
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            lib = _import_asyncssh()
            creds = self.credentials
            await self._drop_relay()  # the last connection's, if it was lost
            try:
                options = creds.connect_options()
                if self.relay:
                    self._relay = await Relay.open(creds.host, creds.port, creds.connect_timeout)
                    options["sock"] = self._relay.sock
                try:
                    conn: asyncssh.SSHClientConnection = await asyncio.wait_for(
                        lib.connect(**options), creds.connect_timeout + 5
                    )
                except BaseException:
                    await self._drop_relay()
                    raise
            except lib.PermissionDenied as exc:
                raise SessionError(
                    f"SSH authentication failed for {creds.target}: check the username, password or key"
                ) from exc
            except lib.HostKeyNotVerifiable as exc:
                raise SessionError(await _untrusted_host_key(lib, creds)) from exc
            except (lib.KeyImportError, lib.KeyEncryptionError) as exc:
                raise SessionError(
                    f"cannot load SSH key {creds.key_path}: wrong passphrase or not a private key"
                ) from exc
            except TimeoutError as exc:
                raise SessionError(
                    f"SSH connection to {creds.target} timed out after {creds.connect_timeout:g}s"
                ) from exc
            except (OSError, lib.Error) as exc:
                reason = _scrub(str(exc) or type(exc).__name__, creds)
                raise SessionError(f"cannot connect to {creds.target}: {reason}") from exc
            logger.info("connected to %s", creds.target)
            self._conn = conn
            return conn

    async def run(
        self,
        command: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a per-command limit, part of the Session API
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run one shell line on the host and return its result."""
        if lifeline.refuses():  # as LocalSession: no new command once another runner may run the step
            raise SessionError(FENCED.format(what="commands are refused"))
        conn = await self._connection()
        limit = self.default_timeout if timeout is None else timeout
        start_dir = self._start_dir(cwd)
        for name in env or {}:
            check_env_name(name)
        merged = {**self._env, **(env or {})}
        script = wrap_script(
            command,
            cwd_sentinel=self._sentinel if self.persist_cwd else None,
            cwd=start_dir,
            fallback_cwd=(self._base_cwd or "~") if cwd is None else None,
            pid_marker=self._pid_marker,
        )
        exports = env_exports(merged) if merged else b""  # names checked before anything runs
        keepalive = self._keepalive()
        script = _watched(script, self._env_end if exports else None, keepalive)
        logger.debug("run on %s: %s", self.credentials.target, preview(command, self._redact))
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        capture = _Capture(loop, self.max_output_bytes, self._pid_marker)
        try:
            chan, _ = await conn.create_session(
                lambda: capture,  # type: ignore[arg-type,return-value]  # duck-typed SSHClientSession
                f"exec /bin/sh -c {shlex.quote(script)}",
                encoding=None,
            )
            if exports:  # values (secrets) never in the remote argv or asyncssh's log
                chan.write(exports + self._env_end + b"\n")
            # no EOF: the channel's stdin stays open while the command runs (see _watched)
        except Exception as exc:  # channel refused, connection dropped
            raise SessionError(f"cannot run a command on {self.credentials.target}: {exc}") from exc
        beat = None if keepalive is None else asyncio.create_task(_keep_alive(chan, keepalive / 3))
        timed_out = pipes_held = False
        try:
            try:
                await asyncio.wait_for(asyncio.shield(capture.exited), limit)
            except TimeoutError:
                timed_out = True
                await self._kill(conn, chan, capture)
            try:
                await asyncio.wait_for(asyncio.shield(capture.closed), PIPE_DRAIN_SECONDS)
            except TimeoutError:
                pipes_held = not timed_out
        finally:
            if beat is not None:
                beat.cancel()
            if not capture.exited.done():  # cancelled: best effort, do not wait long
                await _quietly(self._signal_group(conn, capture.pid, "KILL"), 2.0)
            chan.close()
            await _quietly(chan.wait_closed(), 2.0)
        return self._result(command, capture, started, limit, timed_out, pipes_held, start_dir)

    def _result(
        self,
        command: str,
        capture: _Capture,
        started: float,
        limit: float,
        timed_out: bool,
        pipes_held: bool,
        start_dir: str | None,
    ) -> CommandResult:
        capture.flush_prelude()
        if not timed_out and capture.exit_status is None and capture.exit_signal is None:
            reason = _scrub(str(capture.lost or "no exit status"), self.credentials)
            raise SessionError(f"connection to {self.credentials.target} lost during a command: {reason}")
        stdout, out_cut, where = capture.stdout.finish(self._sentinel if self.persist_cwd else None)
        stderr, err_cut, _ = capture.stderr.finish()
        if timed_out:
            exit_code = TIMEOUT_EXIT_CODE
            stderr = add_note(stderr, timeout_note(limit))
        elif capture.exit_status is not None:
            exit_code = capture.exit_status
        else:
            exit_code = 128 + _signal_number(capture.exit_signal or "")
        if pipes_held:
            stderr = add_note(stderr, "[tether: a background process still holds the command's output]")
        if where is not None and not timed_out:
            path = where.decode("utf-8", "replace")
            if path != start_dir:
                self._cwd = path
        result = CommandResult(
            command=command,
            success=exit_code == 0,
            stdout=stdout,
            stderr=stderr,
            exit_code=exit_code,
            duration=time.monotonic() - started,
            stdout_truncated=out_cut,
            stderr_truncated=err_cut,
            timed_out=timed_out,
        )
        logger.info(
            "command on %s exit=%d %.2fs%s",
            self.credentials.target,
            exit_code,
            result.duration,
            " timed out" if timed_out else "",
        )
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("stdout: %s", preview(stdout, self._redact))
            logger.debug("stderr: %s", preview(stderr, self._redact))
        if timed_out and self.raise_on_timeout:
            raise CommandTimeout(command, limit)
        return result

    def _start_dir(self, cwd: str | None) -> str | None:
        if cwd is None:
            return self._cwd
        if self._cwd is None or posixpath.isabs(cwd) or cwd.startswith("~"):
            return cwd
        return posixpath.normpath(posixpath.join(self._cwd, cwd))

    async def _kill(self, conn: asyncssh.SSHClientConnection, chan: Any, capture: _Capture) -> None:
        """TERM the remote process group, wait ``kill_grace``, then KILL it and close."""
        for sig in ("TERM", "KILL"):
            try:
                chan.send_signal(sig)
            except Exception:  # channel already closed, or the server refuses signals
                pass
            await self._signal_group(conn, capture.pid, sig)
            if sig == "TERM":
                await _quietly(asyncio.shield(capture.exited), self.kill_grace)

    async def _signal_group(self, conn: asyncssh.SSHClientConnection, pid: int | None, sig: str) -> None:
        if pid is None:
            return
        cmd = f"kill -{sig} -{pid} 2>/dev/null || kill -{sig} {pid} 2>/dev/null; true"
        try:
            await asyncio.wait_for(conn.run(cmd, check=False), 10.0)
        except Exception as exc:  # connection gone: the server will reap the channel
            logger.debug("could not signal remote process group %d: %s", pid, exc)


def _watched(script: str, env_end: bytes | None, keepalive: float | None = None) -> str:
    """The remote script, after a prelude that ties the command to the channel.

    A command must not outlive the process that started it: killed, it can no longer see
    the command's outcome, and another worker that resumes its run runs the command again.
    Without a terminal the remote command gets no SIGHUP when the connection drops, so the
    prelude forks a watcher (a shell loop, no exec) that reads the channel's stdin, which
    this side never closes while the command runs: when the connection drops (this process
    died, ``kill -9`` included), sshd closes it, and the watcher kills the command's
    process group, if its shell still runs (a command that ended left its background
    processes, as ``LocalSession`` does). The command itself gets ``/dev/null`` as stdin.

    A connection that does not drop but goes silent (this machine lost or cut off, this
    process stopped) ends nothing, until TCP gives up, hours later. With ``keepalive`` the
    watcher also keeps a timer (a subshell sleeping that many seconds, then killing the
    group) and starts it again at each line this side sends (every third of it): a host
    that stops hearing from this process kills the command when the timer runs out.
    POSIX ``sh`` has no ``read -t``, hence the timer. Its ``sleep`` gets a fraction of a
    second where it has one (POSIX asks only for whole seconds: a ``sleep`` that refuses it
    fails at once, and a timer whose ``sleep`` failed kills nothing).

    With ``env_end`` the ``export`` lines (:func:`env_exports`) arrive first on stdin,
    read up to a line ``env_end`` (not up to EOF, which no longer comes).
    """
    lines = []
    if env_end is not None:
        lines.append(
            f'_t_e=; while IFS= read -r _t_l && [ "$_t_l" != {env_end.decode()} ]; do _t_e="$_t_e$_t_l\n"; '
            'done; eval "$_t_e"; unset _t_e _t_l'
        )
    kill = "kill -0 $$ && kill -s KILL -- -$$"
    if keepalive is None:
        watcher = f"while read -r _t_l; do :; done; {kill}"
        lines.append(f"exec 3<&0 </dev/null; {{ {watcher}; }} <&3 >/dev/null 2>&1 & exec 3<&-")
    else:
        timer = (
            f"_t_t() {{ {{ trap 'kill $_t_s 2>/dev/null; exit' TERM; sleep {keepalive:.3f} & _t_s=$!; "
            f"wait $_t_s && {kill}; }} </dev/null & _t_k=$!; }}"
        )
        lines.append(
            f"exec 3<&0 </dev/null; {{ {timer}; _t_t; while read -r _t_l; do kill $_t_k; _t_t; done; "
            f"kill $_t_k; {kill}; }} <&3 >/dev/null 2>&1 & exec 3<&-"
        )
    return "\n".join(lines) + "\n" + script


async def _keep_alive(chan: Any, interval: float) -> None:
    """A line on a running command's stdin every ``interval`` seconds (see :func:`_watched`)."""
    with contextlib.suppress(Exception):  # the channel closed: nothing more to keep alive
        while True:
            await asyncio.sleep(interval)
            chan.write(b"\n")


async def _quietly(awaitable: Any, limit: float) -> None:
    try:
        await asyncio.wait_for(awaitable, limit)
    except Exception:  # includes TimeoutError; cancellation still propagates
        pass


def _signal_number(name: str) -> int:
    try:
        return int(signal.Signals[f"SIG{name}"])
    except KeyError:
        return 0


def _scrub(text: str, creds: SSHCredentials) -> str:
    for secret in (creds.password, creds.key_passphrase):
        if secret:
            text = text.replace(secret, "***")
    return text


async def _untrusted_host_key(lib: Any, creds: SSHCredentials) -> str:
    """The refusal, with the key's fingerprint to verify and the command that trusts it."""
    target = creds.host if creds.port == 22 else f"[{creds.host}]:{creds.port}"
    where = (
        os.fspath(creds.known_hosts) if creds.known_hosts not in (None, "ignore") else "~/.ssh/known_hosts"
    )
    try:
        key = await asyncio.wait_for(lib.get_server_host_key(creds.host, creds.port), creds.connect_timeout)
    except (OSError, lib.Error, TimeoutError):
        key = None
    port = "" if creds.port == 22 else f"-p {creds.port} "
    trust = f"ssh-keyscan {port}{creds.host} >> {where}"
    if key is None:
        return (
            f"SSH host key of {target} is not trusted and could not be read again: check it with the "
            f"host's administrator, then run: {trust}"
        )
    return (
        f"SSH host key of {target} is not trusted: {key.get_algorithm()} {key.get_fingerprint()}. "
        f"Compare it with the host's own (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub on the host); "
        f"if it matches, trust it with: {trust}"
    )
