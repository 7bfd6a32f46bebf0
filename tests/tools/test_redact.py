"""Redactor: patterns, declared secrets, nested data and speed."""

from __future__ import annotations

import base64
import time

import pytest

from tether.tools import REDACTED, Redactor
from tether.tools.redact import default_redactor

ANTHROPIC = "sk-ant-api03-" + "A1b2C3d4E5" * 6
OPENAI = "sk-proj-" + "Zz9Yy8Xx7W" * 5
PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    ("text", "secret", "kind"),
    [
        (f"key={ANTHROPIC} ok", ANTHROPIC, "anthropic_key"),
        (f"OPENAI_API_KEY is {OPENAI}", OPENAI, "openai_key"),
        ("id AKIAIOSFODNN7EXAMPLE in use", "AKIAIOSFODNN7EXAMPLE", "aws_access_key"),
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "aws_secret_key",
        ),
        ("token ghp_" + "a1B2c3D4e5" * 4, "ghp_" + "a1B2c3D4e5" * 4, "github_token"),
        (
            "github_pat_11ABCDEFG0123456789_abcdefghijkl",
            "github_pat_11ABCDEFG0123456789_abcdefghijkl",
            "github_token",
        ),
        ("SLACK xoxb-123456789012-abcdefghijKL", "xoxb-123456789012-abcdefghijKL", "slack_token"),
        (
            "maps AIzaSyA1234567890abcdefghijklmnopqrstuv",
            "AIzaSyA1234567890abcdefghijklmnopqrstuv",
            "google_api_key",
        ),
        ("password=hunter22 next", "hunter22", "assignment"),
        ('DB_PASSWORD: "two words"', "two words", "assignment"),
        ('{"api_key": "abcd1234"}', "abcd1234", "assignment"),
        ("export GITHUB_TOKEN=tok_value_1", "tok_value_1", "assignment"),
        ("Authorization: Bearer abc.def.ghi123", "abc.def.ghi123", "authorization"),
        ("postgres://app:pw-in-url@db:5432/app", "pw-in-url", "url_password"),
        ("mysql --password s3cr3tpw -u root", "s3cr3tpw", "flag"),
        (f"{PRIVATE_KEY}\nafter", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUA", "private_key"),
    ],
)
def test_each_pattern(text: str, secret: str, kind: str) -> None:
    """Each known credential shape is replaced by [REDACTED:kind]."""
    out = Redactor().redact(text)
    assert secret not in out
    assert f"[REDACTED:{kind}]" in out


def test_surrounding_text_is_kept() -> None:
    """Only the secret goes; quotes, keys and the rest stay."""
    r = Redactor()
    assert r.redact('DB_PASSWORD: "x y"') == 'DB_PASSWORD: "[REDACTED:assignment]"'
    assert r.redact("postgres://u:p4ss@h/db") == "postgres://u:[REDACTED:url_password]@h/db"
    assert r.redact(f"{PRIVATE_KEY}\nafter") == "[REDACTED:private_key]\nafter"


def test_declared_secrets_exact_urlencoded_and_base64() -> None:
    """A declared value is removed wherever it appears, also encoded."""
    secret = "p@ss word/42"
    r = Redactor([secret])
    b64 = base64.b64encode(secret.encode()).decode()
    text = f"a {secret} b p%40ss%20word%2F42 c {b64} d"
    out = r.redact(text)
    assert secret not in out and "p%40ss%20word%2F42" not in out and b64 not in out
    assert out.count(REDACTED) == 3


def test_secrets_can_be_added_later() -> None:
    """add() declares a value learned mid-run (a secret answer)."""
    r = Redactor()
    assert r.redact("the answer is swordfish") == "the answer is swordfish"
    r.add("swordfish")
    assert r.redact("the answer is swordfish") == f"the answer is {REDACTED}"


def test_short_declared_values_are_ignored() -> None:
    """Values under min_length would match everywhere: they are skipped."""
    assert Redactor(["ab"]).redact("abc cab") == "abc cab"


def test_text_without_secrets_is_unchanged() -> None:
    """Ordinary output, including words near the patterns, is left alone."""
    text = (
        "npm WARN deprecated; max_tokens: 1000; token_count=5; tokenizer: gpt2\n"
        "PWD=/home/app\nkeyboard monkey passage\nhttps://example.com/path\n"
        "task-sk-is-not-a-key\nBearer of news\n"
    )
    r = Redactor(["unrelated-secret"])
    assert r.redact(text) is text


def test_redact_obj_nested() -> None:
    """Dicts and lists are walked; values under secret-named keys are hidden."""
    data = {
        "password": "plain",
        "db": {"url": "postgres://u:pw123@h/db", "port": 5432},
        "steps": [{"stdout": f"key {OPENAI}", "apiKey": 12345}, ("tuple", "declared-value")],
        "max_tokens": 100,
    }
    out = Redactor(["declared-value"]).redact_obj(data)
    assert out == {
        "password": REDACTED,
        "db": {"url": "postgres://u:[REDACTED:url_password]@h/db", "port": 5432},
        "steps": [{"stdout": "key [REDACTED:openai_key]", "apiKey": REDACTED}, ("tuple", REDACTED)],
        "max_tokens": 100,
    }
    assert data["password"] == "plain", "the input is not modified"


def test_ten_megabytes_in_linear_time() -> None:
    """A 10 MB log with a few secrets is redacted in one pass (a quadratic scan would take
    minutes; the bound is loose because the machine is shared; speed is benchmarked elsewhere)."""
    line = "2024-05-01 12:00:00 INFO GET /api/items 200 12ms user=42 path=/srv/app/index.js\n"
    body = line * (10_000_000 // len(line))
    text = body[:5_000_000] + f"token={OPENAI}\n" + body[5_000_000:] + "password=last\n"
    r = Redactor(["declared-secret"])
    started = time.perf_counter()
    out = r.redact(text)
    elapsed = time.perf_counter() - started
    assert OPENAI not in out and "password=[REDACTED:assignment]" in out
    assert elapsed < 5.0, elapsed


def test_log_redaction_cleans_every_level_args_and_exception_text_for_any_handler():
    import io
    import logging

    from tether.tools.redact import install_log_redaction

    token = "tok_" + "k7Q2m9ZxW4" * 2
    redactor = Redactor([token])
    install_log_redaction(redactor)
    try:
        log = logging.getLogger("tether.tests.redact_sink")
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)  # added after the install, on a child logger
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.DEBUG)
        log.propagate = False
        log.debug("token %s and %r", token, {"url": "postgresql://u:DbPw8812@h/db"})
        log.info("password=%s", "Hunter2Hunter2")  # the secret spans the template and the argument
        try:
            raise RuntimeError(f"refused with {token}")
        except RuntimeError:
            log.exception("failed")
        log.warning("count %d of %s", 3, "items")  # clean records keep their arguments
        text = stream.getvalue()
        for leaked in (token, "DbPw8812", "Hunter2Hunter2"):
            assert leaked not in text
        assert "Traceback" in text and "RuntimeError: refused with [REDACTED]" in text
        assert "count 3 of items" in text
        assert install_log_redaction() is redactor  # a second call keeps the installed one
    finally:
        install_log_redaction(default_redactor())


def test_from_environ_declares_secret_named_values_and_url_passwords():
    env = {
        "GITLAB_DEPLOY_TOKEN": "plain-looking-value-1",
        "DATABASE_URL": "postgresql://app:UrlPw55x@db/app",
        "TETHER_ENCRYPTION_KEY": "newkeyAAAA,oldkeyBBBB",
        "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
        "PWD": "/home/user",
        "DEBUG_TOKEN": "1",
    }
    r = Redactor.from_environ(env)
    assert r.redact("x plain-looking-value-1 UrlPw55x oldkeyBBBB y") == "x [REDACTED] [REDACTED] [REDACTED] y"
    assert r.redact("/tmp/ssh-agent.sock /home/user 1") == "/tmp/ssh-agent.sock /home/user 1"


@pytest.mark.parametrize(
    "entry",
    [
        "from tether.server.app import create_app; create_app()",
        "from tether.agent.deploy import AsyncDeploymentAgent; from tether.models import ScriptedModel;"
        " from tether.stores.memory import InMemoryStore; AsyncDeploymentAgent(ScriptedModel([]), InMemoryStore())",
    ],
    ids=["server", "agent"],
)
def test_the_server_and_agent_entry_points_install_log_redaction(entry: str) -> None:
    """A fresh process: building the entry point is enough for every logger to be clean."""
    import subprocess
    import sys

    code = (
        "import logging\n"
        "logging.basicConfig(level=logging.DEBUG)\n"
        f"{entry}\n"
        "log = logging.getLogger('uvicorn.error')\n"
        "log.debug('db at %s', 'postgresql://u:PwEntry123456@h/db')\n"
        "try:\n"
        "    raise RuntimeError('token PLANTED-entry-token-42')\n"
        "except RuntimeError:\n"
        "    log.exception('failed')\n"
    )
    env = {"PATH": "/usr/bin:/bin", "APP_API_TOKEN": "PLANTED-entry-token-42"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert "db at postgresql://u:[REDACTED" in done.stderr and "RuntimeError: token [REDACTED]" in done.stderr
    assert "PwEntry123456" not in done.stderr and "PLANTED-entry-token-42" not in done.stderr
