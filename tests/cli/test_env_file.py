"""Settings come from the environment and an explicit --env-file, never from ./.env on their own."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tether.cli.app import app

runner = CliRunner()


def test_a_dotenv_in_the_current_directory_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cloned repository's .env cannot choose the store; --env-file can, when named."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TETHER_STORE_URL", raising=False)
    planted = tmp_path / "planted.db"
    (tmp_path / ".env").write_text(f"TETHER_STORE_URL=sqlite:///{planted}\n")
    fresh = runner.invoke(app, ["runs"])  # the default store, which nothing created here yet
    assert fresh.exit_code == 1 and "no store at .tether/tether.db" in fresh.output, fresh.output
    assert not planted.exists(), "the implicit .env was read"
    assert not (tmp_path / ".tether").exists(), "a read created the store's folder"
    chosen = tmp_path / "chosen.db"
    settings = tmp_path / "tether.env"
    settings.write_text(f"TETHER_STORE_URL=sqlite:///{chosen}\n")
    assert runner.invoke(app, ["--env-file", str(settings), "runs"]).exit_code == 0
    assert chosen.exists()
    missing = runner.invoke(app, ["--env-file", str(tmp_path / "nope.env"), "runs"])
    assert missing.exit_code != 0 and "is not a" in " ".join(missing.output.split()).replace("│ ", "")
