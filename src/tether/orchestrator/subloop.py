"""The TEST→DEV fast-fix sub-loop's data: state, result, blocker classes and its lock.

The sub-loop itself runs as steps of the orchestrator's workflow (``subloop_dev`` and
``subloop_test``), so each round is checkpointed; this module holds what those steps
share: :class:`SubLoopState` (checkpointed, mirrored to ``.tether/subloop_state.json``),
:class:`SubLoopResult`, :func:`classify_blocker` (does a FAIL call for a code fix?) and
:class:`SubLoopLock` (``.tether/subloop.lock``; a dead holder's lock is taken over).
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from tether.errors import SubLoopLocked
from tether.orchestrator.blackboard import Blackboard

__all__ = [
    "SUBLOOP_MAX_ITERATIONS",
    "SUBLOOP_TIMEOUT_SECONDS",
    "BlockerKind",
    "SubLoopLock",
    "SubLoopResult",
    "SubLoopState",
    "classify_blocker",
    "should_enter",
]

SUBLOOP_MAX_ITERATIONS = 3
SUBLOOP_TIMEOUT_SECONDS = 600.0
LOCK_FILE = ".tether/subloop.lock"
STATE_FILE = ".tether/subloop_state.json"

BlockerKind = Literal["code", "missing_test", "environment", "other"]

_MISSING_TEST = re.compile(
    r"(?i)no tests? (?:ran|found|collected)|collected 0 items|missing tests?|tests? (?:is |are )?missing|"
    r"not covered|no coverage|缺少测试|测试缺失|未覆盖|没有测试|需要(?:补充|新增)测试|"
    r"write (?:a |the )?tests?"
)
_ENVIRONMENT = re.compile(
    r"(?i)command not found|no module named|modulenotfounderror|connection refused|permission denied|"
    r"timed? ?out|network|disk full|no space left|环境|依赖缺失|无法连接|超时"
)
_CODE = re.compile(
    r"(?i)assert|error|exception|traceback|FAILED\s|fails?\b|wrong|incorrect|expected|bug|crash|"
    r"返回值|实现|代码|错误|异常|不正确|失败"
)


def classify_blocker(text: str) -> BlockerKind:
    """What kind of problem a blocker describes: a code defect (the sub-loop can fix it), a
    missing test (MAIN must plan it), the environment (no code fix helps) or other."""
    if _MISSING_TEST.search(text):
        return "missing_test"
    if _ENVIRONMENT.search(text):
        return "environment"
    if _CODE.search(text):
        return "code"
    return "other"


def should_enter(verdict: str, blockers: Iterable[str]) -> tuple[bool, str]:
    """Enter the sub-loop on a FAIL whose blockers are code problems (and none is a missing
    test or the environment); returns the decision and its reason."""
    if verdict != "FAIL":
        return False, f"verdict {verdict}"
    kinds = {b: classify_blocker(b) for b in blockers}
    if not kinds:
        return False, "FAIL without blockers"
    other = sorted({k for k in kinds.values() if k in ("missing_test", "environment")})
    if other:
        return False, "blockers need MAIN: " + ", ".join(other)
    code = [b for b, k in kinds.items() if k == "code"]
    if not code:
        return False, "no code-implementation blocker"
    return True, "code blockers: " + "; ".join(code)[:200]


@dataclass(slots=True, kw_only=True)
class SubLoopState:
    """Where a sub-loop is; checkpointed with the run and mirrored to a JSON file."""

    active: bool = False
    iteration: int = 0
    """The MAIN iteration that entered it."""
    sub_iteration: int = 0
    """The current round, 1..3."""
    test_report: str = ""
    dev_report: str = ""
    entry_reason: str = ""
    exit_condition: str = ""
    started_at: float = 0.0
    """Wall-clock start, for the total timeout (it survives a restart)."""
    stage: Literal["dev", "test", ""] = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> SubLoopState:
        if not data:
            return cls()
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass(frozen=True, slots=True, kw_only=True)
class SubLoopResult:
    success: bool
    final_test_verdict: str
    iterations: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "success": self.success,
            "final_test_verdict": self.final_test_verdict,
            "iterations": self.iterations,
        }


class SubLoopLock:
    """``.tether/subloop.lock``: one sub-loop per working directory at a time.

    The file holds the holder's host, pid and start time. ``acquire`` creates it
    exclusively; an existing lock is taken over when its holder is this run, is a dead
    process on this host, or is older than ``stale_after`` seconds (10 minutes by default).
    """

    def __init__(
        self, board: Blackboard, *, owner: str, stale_after: float = SUBLOOP_TIMEOUT_SECONDS
    ) -> None:
        self.board = board
        self.owner = owner
        self.stale_after = stale_after
        self.path = board.path(LOCK_FILE)

    def holder(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def acquire(self) -> bool:
        """Take the lock; returns True when a stale lock was taken over. Raises SubLoopLocked."""
        mine = {"owner": self.owner, "host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}
        with self.board.locked():
            current = self.holder()
            took_over = False
            if current is not None and current.get("owner") != self.owner:
                if not self._stale(current):
                    raise SubLoopLocked(
                        f"the sub-loop of {self.board.root} is held by {current.get('owner')} "
                        f"(pid {current.get('pid')}); wait for it, or remove {LOCK_FILE} "
                        "if that process is gone",
                        holder=str(current.get("owner")),
                    )
                took_over = True
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(mine), encoding="utf-8")
            os.replace(tmp, self.path)
        return took_over

    def held_by_other(self) -> dict[str, Any] | None:
        """The live holder other than us, if any (other stages must not run meanwhile)."""
        current = self.holder()
        if current is None or current.get("owner") == self.owner or self._stale(current):
            return None
        return current

    def release(self) -> None:
        with self.board.locked():
            current = self.holder()
            if current is None or current.get("owner") == self.owner:
                self.path.unlink(missing_ok=True)

    def _stale(self, data: Mapping[str, Any]) -> bool:
        if time.time() - float(data.get("since", 0)) > self.stale_after:
            return True
        if data.get("host") == socket.gethostname():
            return not _pid_alive(int(data.get("pid", 0)))
        return False


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
