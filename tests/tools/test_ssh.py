"""SSHSession against an asyncssh server started on loopback by the test."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

asyncssh = pytest.importorskip("asyncssh")

from tests.tools.sshserver import COMMANDS, PASSWORD, USERNAME, LoopbackSSH, loopback_ssh  # noqa: E402
from tests.tools.test_local import wait_dead  # noqa: E402
from tether.errors import CommandTimeout, ConfigError, SessionError  # noqa: E402
from tether.tools import LocalSession, SSHCredentials, SSHSession  # noqa: E402


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LoopbackSSH]:
    async with loopback_ssh(tmp_path) as srv:
        yield srv


def creds(server: LoopbackSSH, **kw: object) -> SSHCredentials:
    base: dict[str, object] = {
        "host": "127.0.0.1",
        "port": server.port,
        "username": USERNAME,
        "password": PASSWORD,
        "known_hosts": server.known_hosts_path,
        "connect_timeout": 5.0,
    }
    base.update(kw)
    return SSHCredentials(**base)  # type: ignore[arg-type]


async def test_run_returns_output_and_exit_code(server: LoopbackSSH, tmp_path: Path) -> None:
    """stdout, stderr and the exit code come back from the remote command."""
    async with SSHSession(creds(server), cwd=str(tmp_path)) as s:
        ok = await s.run("echo hello; pwd")
        bad = await s.run("echo oops >&2; exit 3")
    assert (ok.success, ok.stdout) == (True, f"hello\n{tmp_path}\n")
    assert (bad.success, bad.exit_code, bad.stderr, bad.stdout) == (False, 3, "oops\n", "")


async def test_key_authentication(server: LoopbackSSH) -> None:
    """A private key file logs in without a password."""
    async with SSHSession(creds(server, password=None, key_path=server.client_key_path)) as s:
        assert (await s.run("echo key")).stdout == "key\n"


async def test_encrypted_key_and_wrong_passphrase(server: LoopbackSSH, tmp_path: Path) -> None:
    """A passphrase unlocks the key; a wrong one is a SessionError naming the key, not the phrase."""
    key = asyncssh.read_private_key(server.client_key_path)
    locked = tmp_path / "id_locked"
    key.write_private_key(locked, "pkcs8-pem", passphrase="open sesame")  # bcrypt-free format
    async with SSHSession(creds(server, password=None, key_path=locked, key_passphrase="open sesame")) as s:
        assert (await s.run("echo unlocked")).stdout == "unlocked\n"
    with pytest.raises(SessionError) as info:
        await SSHSession(creds(server, password=None, key_path=locked, key_passphrase="wrong!")).connect()
    assert "id_locked" in str(info.value) and "wrong!" not in str(info.value)


async def test_wrong_password_is_a_session_error_without_the_password(server: LoopbackSSH) -> None:
    """Authentication failure says what to check and never shows the password."""
    secret = "hunter2-wrong-password"
    session = SSHSession(creds(server, password=secret))
    with pytest.raises(SessionError) as info:
        await session.connect()
    text = f"{info.value} {info.value!r} {info.value.__cause__!r} {session!r} {session.credentials!r}"
    assert "authentication failed" in str(info.value)
    assert secret not in text


async def test_untrusted_host_key_is_refused(server: LoopbackSSH, tmp_path: Path) -> None:
    """A host key missing from known_hosts is refused; "ignore" accepts it."""
    other = tmp_path / "other_known_hosts"
    stranger = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    other.write_text(f"[127.0.0.1]:{server.port} {stranger}")
    with pytest.raises(SessionError, match="known_hosts") as refused:
        await SSHSession(creds(server, known_hosts=other)).connect()
    message = str(refused.value)
    assert server.host_key.get_fingerprint() in message, "the fingerprint to verify is shown"
    assert f"ssh-keyscan -p {server.port} 127.0.0.1 >> {other}" in message, "and the command that trusts it"
    async with SSHSession(creds(server, known_hosts="ignore")) as s:
        assert (await s.run("echo trusted")).stdout == "trusted\n"


async def test_connection_refused_is_a_session_error() -> None:
    """Nothing listening: SessionError naming the target."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    credentials = SSHCredentials(host="127.0.0.1", port=port, username="u", password="p", connect_timeout=2)
    with pytest.raises(SessionError, match=f"u@127.0.0.1:{port}"):
        await SSHSession(credentials).connect()


async def test_timeout_kills_the_remote_process_group(server: LoopbackSSH) -> None:
    """A remote command past its timeout is killed with its grandchildren; exit code 124."""
    async with SSHSession(creds(server)) as s:
        started = time.monotonic()
        result = await s.run("sh -c 'sleep 30 & echo $!; sleep 30'", timeout=0.5)
        assert time.monotonic() - started < 4
        assert (await s.run("echo still usable")).stdout == "still usable\n"
    assert result.timed_out and result.exit_code == 124
    assert await wait_dead(int(result.stdout.split()[0]))


async def test_raise_on_timeout_over_ssh(server: LoopbackSSH) -> None:
    """raise_on_timeout=True raises CommandTimeout over SSH too."""
    async with SSHSession(creds(server), raise_on_timeout=True) as s:
        with pytest.raises(CommandTimeout):
            await s.run("sleep 5", timeout=0.3)


async def test_cd_and_env_over_ssh(server: LoopbackSSH, tmp_path: Path) -> None:
    """cd carries over; env values with spaces and quotes arrive intact."""
    async with SSHSession(creds(server), cwd=str(tmp_path), env={"GREETING": 'it\'s a "test"'}) as s:
        await s.run("mkdir -p app && cd app")
        assert s.cwd == str(tmp_path / "app")
        result = await s.run('pwd; echo "$GREETING $EXTRA"', env={"EXTRA": "$(touch nope)"})
    assert result.stdout == f'{tmp_path / "app"}\nit\'s a "test" $(touch nope)\n'
    assert not (tmp_path / "app" / "nope").exists()


async def test_env_secrets_travel_on_stdin_not_the_command_line_or_the_log(
    server: LoopbackSSH, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A secret passed with env= reaches the remote shell, but neither the command the
    server was asked to exec (the remote argv) nor asyncssh's INFO/DEBUG log; the
    command's own stdin still ends at once."""
    import logging

    secret = "PLANTED-ssh-env-" + "Zq81xY3" * 3
    caplog.set_level(logging.DEBUG)
    logging.getLogger("asyncssh").setLevel(logging.DEBUG)
    asyncssh.set_debug_level(2)
    start = len(COMMANDS)
    try:
        async with SSHSession(creds(server), env={"BASE_TOKEN": secret + "-base"}) as s:
            result = await s.run(
                'printf "%s|%s|" "$DEPLOY_TOKEN" "$BASE_TOKEN"; cat; echo end', env={"DEPLOY_TOKEN": secret}
            )
            plain = await s.run("echo no-env-here")
    finally:
        asyncssh.set_debug_level(1)
        logging.getLogger("asyncssh").setLevel(logging.NOTSET)
    assert result.stdout == f"{secret}|{secret}-base|end\n"  # cat read nothing: stdin ended
    assert plain.stdout == "no-env-here\n"
    sent = COMMANDS[start:]
    assert len(sent) >= 2 and all(secret not in command for command in sent)
    assert any("DEPLOY_TOKEN" in command or "eval" in command for command in sent)
    assert any(r.name.startswith("asyncssh") and "Command" in r.getMessage() for r in caplog.records)
    ssh_log = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("asyncssh"))
    assert secret not in ssh_log
    assert all(secret not in r.getMessage() for r in caplog.records if "run on" in r.getMessage())


async def test_output_cap_over_ssh(server: LoopbackSSH) -> None:
    """5 MB of remote output is cut to the cap."""
    async with SSHSession(creds(server), max_output_bytes=50_000) as s:
        result = await s.run("head -c 5000000 /dev/zero | tr '\\0' a; echo; echo done")
    assert result.stdout_truncated and result.stdout.endswith("a\ndone\n")
    assert len(result.stdout) < 50_100


async def test_non_utf8_and_pid_line_hidden(server: LoopbackSSH) -> None:
    """Invalid bytes are replaced; tether's pid line never shows in stderr."""
    async with SSHSession(creds(server)) as s:
        result = await s.run("printf 'a\\377b'; printf 'err' >&2")
    assert (result.stdout, result.stderr) == ("a\ufffdb", "err")


async def test_reconnects_after_the_connection_drops(server: LoopbackSSH) -> None:
    """A dropped connection is reopened by the next run."""
    async with SSHSession(creds(server)) as s:
        await s.run("true")
        assert s._conn is not None
        s._conn.close()
        await s._conn.wait_closed()
        assert (await s.run("echo back")).stdout == "back\n"


async def test_host_facts_over_ssh_match_local(server: LoopbackSSH, tmp_path: Path) -> None:
    """Host facts gathered over SSH describe the same machine as the local ones."""
    async with SSHSession(creds(server)) as remote, LocalSession(tmp_path) as local:
        over_ssh = await remote.host_facts()
        here = await local.host_facts()
    assert over_ssh.architecture == here.architecture
    assert over_ssh.cpu_count == here.cpu_count
    assert over_ssh.tools.keys() == here.tools.keys()


def test_credentials_repr_hides_secrets() -> None:
    """Neither the password nor the key passphrase appears in repr."""
    c = SSHCredentials(host="h", username="u", password="pa55", key_path="/k", key_passphrase="phr4se")
    assert "pa55" not in repr(c) and "phr4se" not in repr(c) and "***" in repr(c)


def test_credentials_from_target() -> None:
    """user@host[:port] parses, IPv6 included; a bad target is a ConfigError."""
    assert SSHCredentials.from_target("deploy@example.com").target == "deploy@example.com:22"
    assert SSHCredentials.from_target("root@10.0.0.5:2222", password="x").port == 2222
    assert SSHCredentials.from_target("me@[::1]:2200").host == "::1"
    with pytest.raises(ConfigError):
        SSHCredentials.from_target("no-user-here")


async def test_missing_asyncssh_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without asyncssh installed, connecting says how to install it."""
    monkeypatch.setitem(sys.modules, "asyncssh", None)
    session = SSHSession(SSHCredentials(host="h", username="u"))
    with pytest.raises(ConfigError, match=r"tether\[ssh\]"):
        await session.connect()
