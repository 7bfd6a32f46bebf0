"""The blackboard: the files the roles and MAIN share, in the working directory.

Layout (all relative to the working directory)::

    reports/report_{agent}.md               latest report of each role (TEST, DEV, ...)
    reports/report_{agent}_{N}.md           the report of iteration N (kept)
    reports/report_{agent}_subloop_{k}.md   sub-loop round k (removed when the sub-loop ends)
    dev_plan.md                             the plan, rendered from the run's state
    project_history.md                      "## Iteration N: ..." entries, [MILESTONE] marks
    .tether/                                cache, sub-loop state and lock files

Every write is atomic (a temporary file in the same directory, then ``os.replace``), so a
crash never leaves half a report. Files are not fsynced: the run's checkpoint is the
source of truth and the history and plan files are rendered again from it on the next
stage (fsync cost more than the rest of a stage: see benchmarks/README.md). Writers are
serialised by a lock file (``fcntl``) and a thread lock. Every path is checked to stay
inside the working directory: ``..``, absolute paths and symlinks that lead outside are refused with
:class:`~tether.errors.BlackboardPathError`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from tether.errors import BlackboardPathError, ConfigError

__all__ = ["ROLES", "Blackboard"]

ROLES = ("TEST", "DEV", "REVIEW", "FINISH_REVIEW")
"""The roles that write reports; MAIN decides and writes the history."""


class Blackboard:
    """Reads and writes the shared files of one working directory (see the module docstring)."""

    def __init__(self, workdir: str | os.PathLike[str]) -> None:
        root = Path(workdir)
        if not root.is_dir():
            raise ConfigError(f"working directory {os.fspath(workdir)!r} does not exist: create it first")
        self.root = root.resolve()
        self._thread_lock = threading.RLock()
        self._written: dict[str, str] = {}
        self.state_dir.mkdir(exist_ok=True)
        (self.root / "reports").mkdir(exist_ok=True)

    # == paths ======================================================================
    @property
    def state_dir(self) -> Path:
        return self.root / ".tether"

    def path(self, relative: str | os.PathLike[str]) -> Path:
        """``relative`` resolved inside the working directory, or BlackboardPathError."""
        rel = os.fspath(relative)
        parts = Path(rel).parts
        if not rel or Path(rel).is_absolute() or ".." in parts:
            raise BlackboardPathError(
                f"blackboard path {rel!r} must be relative to the working directory, without '..'",
                path=rel,
            )
        # Without '..', only a symlink can lead out: lstat each existing component below the
        # root (2 calls for reports/x.md) and resolve the whole path only if one is a link.
        current = self.root
        for part in parts:
            current = current / part
            try:
                mode = os.lstat(current).st_mode
            except FileNotFoundError:
                return self.root / rel  # the rest does not exist yet: nothing to follow
            if stat.S_ISLNK(mode):
                break
        else:
            return self.root / rel
        target = (self.root / rel).resolve()
        if target != self.root and self.root not in target.parents:
            raise BlackboardPathError(
                f"blackboard path {rel!r} leads to {target}, outside {self.root} (a symlink?)", path=rel
            )
        return target

    def report_path(self, agent: str, iteration: int | None = None, *, subloop: int = 0) -> Path:
        name = agent.lower()
        if subloop:
            return self.path(f"reports/report_{name}_subloop_{subloop}.md")
        if iteration is None:
            return self.path(f"reports/report_{name}.md")
        return self.path(f"reports/report_{name}_{iteration}.md")

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    # == reading ====================================================================
    def read(self, relative: str | os.PathLike[str], default: str = "") -> str:
        try:
            return self.path(relative).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return default

    def exists(self, relative: str | os.PathLike[str]) -> bool:
        return self.path(relative).is_file()

    # == writing ====================================================================
    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Serialise writers: threads of this process and other processes on this directory."""
        with self._thread_lock, open(self.state_dir / "blackboard.lock", "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def write(self, relative: str | os.PathLike[str], text: str) -> Path:
        """Atomically replace a file's content (creating its directory)."""
        target = self.path(relative)
        with self.locked():
            _atomic_write(target, text)
        return target

    def write_if_changed(self, relative: str, text: str) -> bool:
        """``write`` unless this object last wrote exactly ``text`` there and the file is
        still there (the history and plan are rendered every stage, mostly unchanged)."""
        if self._written.get(relative) == text and self.path(relative).is_file():
            return False
        self.write(relative, text)
        self._written[relative] = text
        return True

    def append(self, relative: str | os.PathLike[str], text: str) -> Path:
        """Append under the lock, by rewriting atomically (a crash keeps the old or the new file)."""
        target = self.path(relative)
        with self.locked():
            old = target.read_text(encoding="utf-8") if target.exists() else ""
            sep = "" if not old or old.endswith("\n\n") else ("\n" if old.endswith("\n") else "\n\n")
            _atomic_write(target, old + sep + text)
        return target

    def copy(self, source: str | os.PathLike[str], dest: str | os.PathLike[str]) -> Path:
        return self.write(dest, self.read(source))

    def remove(self, relative: str | os.PathLike[str]) -> None:
        with self.locked(), contextlib.suppress(FileNotFoundError):
            self.path(relative).unlink()


def _atomic_write(target: Path, text: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
