"""LocalSession runs real commands in tmp_path."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from tether.errors import CommandTimeout, ConfigError, SessionError
from tether.tools import CommandResult, LocalSession, Session


def alive(pid: int) -> bool:
    """Running and not a zombie (a dead orphan may wait for its reaper)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in (b"Z", b"X")


async def wait_dead(pid: int, within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def test_echo_returns_stdout_and_success(tmp_path: Path) -> None:
    """A plain command succeeds with its output."""
    async with LocalSession(tmp_path) as s:
        result = await s.run("echo hello")
    assert result == CommandResult(
        command="echo hello",
        success=True,
        stdout="hello\n",
        stderr="",
        exit_code=0,
        duration=result.duration,
    )
    assert 0 <= result.duration < 5
    assert isinstance(s, Session)


async def test_exit_code_and_stderr_are_reported(tmp_path: Path) -> None:
    """A failing command is a result, not an exception."""
    async with LocalSession(tmp_path) as s:
        result = await s.run("echo oops >&2; sh -c 'exit 3'")
    assert (result.success, result.exit_code, result.stderr) == (False, 3, "oops\n")


async def test_death_by_signal_is_128_plus_signal(tmp_path: Path) -> None:
    """A command that kills itself reports 128 + N, as shells do."""
    async with LocalSession(tmp_path) as s:
        result = await s.run("kill -9 $$")
    assert result.exit_code == 137


async def test_to_dict_has_every_field(tmp_path: Path) -> None:
    """to_dict is the run log's result entry."""
    async with LocalSession(tmp_path) as s:
        data = (await s.run("echo x")).to_dict()
    assert data["stdout"] == "x\n" and data["exit_code"] == 0 and data["success"] is True
    assert {"duration", "stdout_truncated", "stderr_truncated", "timed_out", "command"} <= set(data)


def test_success_must_match_exit_code() -> None:
    """success is exit_code == 0, never something else."""
    with pytest.raises(ValueError):
        CommandResult(command="x", success=True, stdout="", stderr="", exit_code=1)


async def test_env_is_merged_and_cwd_is_explicit(tmp_path: Path) -> None:
    """Session env, per-call env and the inherited environment all reach the command."""
    (tmp_path / "sub").mkdir()
    async with LocalSession(tmp_path, env={"A": "from session", "B": "x"}) as s:
        result = await s.run('echo "$A|$B|${PATH:+path}"; pwd', env={"B": "from call"})
        other = await s.run("pwd", cwd="sub")
        after = await s.run("pwd")
    assert result.stdout == f"from session|from call|path\n{tmp_path}\n"
    assert other.stdout == f"{tmp_path / 'sub'}\n"
    assert after.stdout == f"{tmp_path}\n", "a per-call cwd does not move the session"


async def test_invalid_env_name_is_refused(tmp_path: Path) -> None:
    """Names a shell cannot export are a configuration error."""
    with pytest.raises(ConfigError):
        LocalSession(tmp_path, env={"BAD NAME": "x"})


async def test_cd_carries_over_between_commands(tmp_path: Path) -> None:
    """`cd app` then `pwd` runs in app, as an agent at a terminal expects."""
    async with LocalSession(tmp_path) as s:
        first = await s.run("mkdir -p app/src && cd app")
        assert first.stdout == "" and first.success
        assert s.cwd == str(tmp_path / "app")
        assert (await s.run("pwd")).stdout == f"{tmp_path / 'app'}\n"
        failed = await s.run("cd src && exit 4")
        assert failed.exit_code == 4 and s.cwd == str(tmp_path / "app" / "src")
        await s.run("cd /nonexistent-dir")
        assert s.cwd == str(tmp_path / "app" / "src")


async def test_output_without_trailing_newline_is_exact(tmp_path: Path) -> None:
    """The cwd sentinel never shows up in, or changes, the output."""
    async with LocalSession(tmp_path) as s:
        assert (await s.run("printf abc")).stdout == "abc"
        assert (await s.run("printf 'abc\\n\\n'")).stdout == "abc\n\n"
        assert (await s.run("true")).stdout == ""


async def test_cd_does_not_carry_over_when_disabled(tmp_path: Path) -> None:
    """persist_cwd=False: every command starts in the session's cwd."""
    (tmp_path / "app").mkdir()
    async with LocalSession(tmp_path, persist_cwd=False) as s:
        await s.run("cd app")
        assert (await s.run("pwd")).stdout == f"{tmp_path}\n"


async def test_vanished_cwd_falls_back_to_the_start_directory(tmp_path: Path) -> None:
    """If the directory the agent cd'd into is deleted, the next command says so and runs."""
    async with LocalSession(tmp_path) as s:
        await s.run("mkdir gone && cd gone")
        (tmp_path / "gone").rmdir()
        result = await s.run("pwd")
    assert result.stdout == f"{tmp_path}\n"
    assert "no longer exists" in result.stderr


async def test_timeout_kills_the_command(tmp_path: Path) -> None:
    """`sleep 5` under a 0.2 s timeout comes back quickly with exit code 124."""
    async with LocalSession(tmp_path) as s:
        started = time.monotonic()
        result = await s.run("echo started; sleep 5", timeout=0.2)
    assert time.monotonic() - started < 2
    assert result.timed_out and result.exit_code == 124 and not result.success
    assert result.stdout == "started\n", "output before the timeout is kept"
    assert "timed out after 0.2s" in result.stderr


async def test_timeout_kills_grandchildren(tmp_path: Path) -> None:
    """The whole process group dies, including a background grandchild."""
    async with LocalSession(tmp_path) as s:
        result = await s.run("sh -c 'sleep 30 & echo $!; sleep 30'", timeout=0.3)
    grandchild = int(result.stdout.split()[0])
    assert result.timed_out
    assert await wait_dead(grandchild)


async def test_term_ignoring_process_is_killed_after_grace(tmp_path: Path) -> None:
    """SIGTERM ignored: SIGKILL follows after kill_grace."""
    async with LocalSession(tmp_path, kill_grace=0.3) as s:
        started = time.monotonic()
        result = await s.run("trap '' TERM; echo $$; sleep 30 & wait", timeout=0.2)
    assert result.timed_out
    assert await wait_dead(int(result.stdout.split()[0]))
    assert time.monotonic() - started < 3


async def test_raise_on_timeout(tmp_path: Path) -> None:
    """raise_on_timeout=True raises CommandTimeout (a TimeoutError: transient)."""
    async with LocalSession(tmp_path, raise_on_timeout=True) as s:
        with pytest.raises(CommandTimeout) as info:
            await s.run("sleep 5", timeout=0.2)
    assert isinstance(info.value, TimeoutError) and info.value.timeout == 0.2


async def test_cancelling_run_kills_the_group(tmp_path: Path) -> None:
    """A cancelled run leaves nothing running."""
    pidfile = tmp_path / "pid"
    async with LocalSession(tmp_path) as s:
        task = asyncio.create_task(s.run(f"echo $$ > {pidfile}; sleep 30"))
        while not pidfile.exists() or not pidfile.read_text().strip():
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert await wait_dead(int(pidfile.read_text()))


async def test_background_process_does_not_hang_the_command(tmp_path: Path) -> None:
    """`server &` that keeps the pipes returns promptly, with advice to redirect."""
    async with LocalSession(tmp_path) as s:
        started = time.monotonic()
        result = await s.run("sleep 30 & echo $!")
        elapsed = time.monotonic() - started
        redirected = await s.run("sleep 30 > /dev/null 2>&1 & echo $!")
    pids = [int(result.stdout.split()[0]), int(redirected.stdout.split()[0])]
    try:
        assert elapsed < 3 and result.success
        assert "redirect its output" in result.stderr
        assert redirected.stderr == ""
        assert alive(pids[1]), "a background process survives the command"
    finally:
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


async def test_output_cap_keeps_head_and_tail(tmp_path: Path) -> None:
    """5 MB of output is cut to the cap, keeping both ends, and says how much went."""
    async with LocalSession(tmp_path, max_output_bytes=100_000) as s:
        cmd = "printf START; head -c 5000000 /dev/zero | tr '\\0' a; printf END; mkdir d; cd d"
        result = await s.run(cmd)
        assert s.cwd == str(tmp_path / "d"), "the cwd survives a truncated stdout"
    assert result.stdout_truncated and not result.stderr_truncated
    assert result.stdout.startswith("STARTaaa") and result.stdout.endswith("aaaEND")
    assert "[... 4900008 bytes of output cut here ...]" in result.stdout
    assert len(result.stdout) < 100_100


async def test_stderr_is_capped_separately(tmp_path: Path) -> None:
    """Both streams are read concurrently and capped on their own."""
    async with LocalSession(tmp_path, max_output_bytes=10_000) as s:
        result = await s.run("head -c 300000 /dev/zero >&2; echo fine")
    assert result.stderr_truncated and not result.stdout_truncated
    assert result.stdout == "fine\n"


async def test_exactly_at_the_cap_is_not_truncated(tmp_path: Path) -> None:
    """The cap is exact: N bytes fit, N+1 do not."""
    async with LocalSession(tmp_path, max_output_bytes=4096) as s:
        fits = await s.run("head -c 4096 /dev/zero | tr '\\0' x")
        over = await s.run("head -c 4097 /dev/zero | tr '\\0' x")
    assert not fits.stdout_truncated and fits.stdout == "x" * 4096
    assert over.stdout_truncated and "1 bytes of output cut" in over.stdout


async def test_non_utf8_output_is_replaced(tmp_path: Path) -> None:
    """Invalid UTF-8 bytes become U+FFFD instead of failing."""
    async with LocalSession(tmp_path) as s:
        result = await s.run("printf 'a\\377b\\n'")
    assert result.stdout == "a\ufffdb\n"


async def test_commands_run_concurrently(tmp_path: Path) -> None:
    """Two sleeps of 0.5 s overlap."""
    async with LocalSession(tmp_path) as s:
        started = time.monotonic()
        results = await asyncio.gather(s.run("sleep 0.5; echo a"), s.run("sleep 0.5; echo b"))
    assert [r.stdout for r in results] == ["a\n", "b\n"]
    assert time.monotonic() - started < 1.5


async def test_closed_session_refuses(tmp_path: Path) -> None:
    """run after close is a SessionError."""
    s = LocalSession(tmp_path)
    await s.close()
    with pytest.raises(SessionError):
        await s.run("true")


def test_missing_cwd_is_a_config_error(tmp_path: Path) -> None:
    """A session cannot start in a directory that does not exist."""
    with pytest.raises(ConfigError):
        LocalSession(tmp_path / "missing")


async def test_commands_get_a_scrubbed_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Secrets of the agent's environment stay out; the allow-list and explicit env= go in."""
    monkeypatch.setenv("OPENAI_API_KEY", "PLANTED-KEY-1")
    monkeypatch.setenv("DEPLOY_TOKEN", "PLANTED-TOKEN-2")
    monkeypatch.setenv("LC_TETHER_TEST", "kept")
    session = LocalSession(tmp_path, env={"APP_PORT": "8080"})
    out = (await session.run("env", env={"GIVEN_SECRET": "passed-on-purpose"})).stdout
    assert "PLANTED" not in out
    assert "LC_TETHER_TEST=kept" in out and "APP_PORT=8080" in out and "GIVEN_SECRET=passed-on-purpose" in out
    assert "PATH=" in out and "HOME=" in out
    everything = LocalSession(tmp_path, inherit_env=None)
    assert "PLANTED-KEY-1" in (await everything.run("env")).stdout  # the control: it was there to leak
