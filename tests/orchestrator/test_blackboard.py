"""The blackboard: paths confined to the working directory, atomic writes, serialised writers."""

from __future__ import annotations

import threading

import pytest

from tether.errors import BlackboardPathError, ConfigError
from tether.orchestrator import Blackboard


@pytest.mark.parametrize("bad", ["../x.md", "reports/../../x.md", "/etc/passwd", ""])
def test_paths_leaving_the_workdir_are_refused(tmp_path, bad):
    board = Blackboard(tmp_path)
    with pytest.raises(BlackboardPathError) as info:
        board.write(bad, "x")
    assert info.value.path == bad
    assert isinstance(info.value, PermissionError)  # a PERMISSION failure for the runner


def test_symlinks_out_of_the_workdir_are_refused_and_inside_ones_allowed(tmp_path):
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    board = Blackboard(work)
    (work / "escape").symlink_to(outside)
    with pytest.raises(BlackboardPathError, match="outside"):
        board.write("escape/report_test.md", "x")
    (work / "reports" / "report_test.md").symlink_to(outside / "stolen.md")
    with pytest.raises(BlackboardPathError):
        board.report_path("TEST")
    assert not (outside / "stolen.md").exists()
    (work / "docs").mkdir()
    (work / "alias").symlink_to(work / "docs")
    board.write("alias/notes.md", "inside")
    assert (work / "docs" / "notes.md").read_text() == "inside"
    with pytest.raises(ConfigError, match="does not exist"):
        Blackboard(tmp_path / "missing")


def test_concurrent_writers_lose_nothing_and_leave_no_temp_files(tmp_path):
    boards = [Blackboard(tmp_path), Blackboard(tmp_path)]  # two handles, as two processes would have

    def writer(board: Blackboard, name: str) -> None:
        for i in range(40):
            board.append("project_history.md", f"{name}-{i}\n")

    threads = [threading.Thread(target=writer, args=(b, f"w{k}")) for k, b in enumerate(boards)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = (tmp_path / "project_history.md").read_text().split()
    assert sorted(lines) == sorted(f"w{k}-{i}" for k in range(2) for i in range(40))
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
