"""Artefacts of runs the store no longer holds are swept; those of stored runs, and of
directories written to recently, stay."""

from __future__ import annotations

import os
import time

from typer.testing import CliRunner

from tether.agent.config import artifact_root, sweep_artifacts
from tether.cli.app import app
from tether.state import ExecutionContext
from tether.stores import open_store


def _artefact(root, name: str, *, age: float) -> None:
    d = root / name
    d.mkdir(parents=True)
    f = d / "out-1.txt"
    f.write_text("trimmed output")
    then = time.time() - age
    os.utime(f, (then, then))
    os.utime(d, (then, then))


async def test_sweep_removes_only_idle_directories_of_runs_not_stored(tmp_path):
    url = f"sqlite:///{tmp_path}/agent.db"
    async with open_store(url) as store:
        for run_id in ("kept", "odd/id", "gone"):
            ctx = ExecutionContext(run_id)
            ctx.put("goal", "x")
            await store.commit(ctx)
        assert await store.delete("gone")
        root = artifact_root(store)
        assert root is not None
        _artefact(root, "kept", age=7200)
        _artefact(root, "odd_id", age=7200)  # the directory of run "odd/id"
        _artefact(root, "gone", age=7200)
        _artefact(root, "purged-long-ago", age=7200)
        _artefact(root, "just-started", age=10)  # a run writing its first artefacts

        assert await sweep_artifacts(store) == 2
        assert sorted(p.name for p in root.iterdir()) == ["just-started", "kept", "odd_id"]
        assert (root / "kept" / "out-1.txt").read_text() == "trimmed output"
        assert await sweep_artifacts(store) == 0
        assert await sweep_artifacts(store, idle=0) == 1  # now idle long enough
        assert sorted(p.name for p in root.iterdir()) == ["kept", "odd_id"]


async def test_sweep_with_no_artefact_directory_does_nothing(tmp_path):
    async with open_store(f"sqlite:///{tmp_path}/a.db") as store:
        assert await sweep_artifacts(store) == 0
    async with open_store("memory://") as store:
        assert await sweep_artifacts(store) == 0


def test_cli_purge_reports_runs_and_artefacts(tmp_path):
    db = tmp_path / "agent.db"
    url = f"sqlite:///{db}"
    _artefact(tmp_path / "agent.db.artifacts", "orphan", age=7200)
    out = CliRunner().invoke(app, ["purge", "--store", url])
    assert out.exit_code == 0, out.output
    assert "purged 0 expired runs, removed the artefacts of 1 runs no longer stored" in out.output
    assert not (tmp_path / "agent.db.artifacts" / "orphan").exists()
