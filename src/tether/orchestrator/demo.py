"""An offline orchestrator demo: scripted roles fix a real bug in a small sample project.

:func:`make_sample_repo` writes a tiny package (``stats.py``) with a real bug (the median
of an even number of values is wrong) and a real pytest suite. The roles are scripted but
do real work: TEST runs pytest in a subprocess and writes its verdict from the exit code
and its failing cases from pytest's output; DEV edits ``stats.py``; REVIEW and
FINISH_REVIEW check the file and the last test run. :func:`rule_main` is a MAIN that
decides from the verdicts, as a model would from the prompt.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tether.orchestrator.roles import MainDecision, MainRequest, RoleOutput, RoleRequest, ScriptedRunner

__all__ = [
    "BUG_FIX",
    "SAMPLE_FILES",
    "demo_runners",
    "dev_role",
    "make_sample_repo",
    "rule_main",
    "run_tests_role",
]

SAMPLE_FILES: Mapping[str, str] = {
    "stats.py": '''"""Small statistics helpers."""


def mean(values):
    return sum(values) / len(values)


def median(values):
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid]
''',
    "tests/test_stats.py": """from stats import mean, median


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_median_odd():
    assert median([3, 1, 2]) == 2


def test_median_even():
    assert median([4, 1, 3, 2]) == 2.5
""",
    "tests/conftest.py": (
        "import sys\nfrom pathlib import Path\n\nsys.path.insert(0, str(Path(__file__).parents[1]))\n"
    ),
    "pytest.ini": "[pytest]\naddopts = -q -p no:cacheprovider -p no:randomly\ntestpaths = tests\n",
}

BUG_FIX = (
    "stats.py",
    "    return ordered[mid]\n",
    "    if len(ordered) % 2 == 0:\n"
    "        return (ordered[mid - 1] + ordered[mid]) / 2\n"
    "    return ordered[mid]\n",
)
"""(file, old text, new text): the fix DEV applies."""

_FAILED = re.compile(r"(?m)^FAILED (\S+)(?: - (.*))?$")


def make_sample_repo(path: str | Path) -> Path:
    """Write the sample project (with its bug) into ``path`` and return it."""
    root = Path(path)
    for rel, text in SAMPLE_FILES.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return root


async def run_tests_role(request: RoleRequest) -> RoleOutput:
    """TEST: run pytest for real; the verdict is its exit code, blockers its failures."""
    from tether.tools.local import LocalSession

    command = f"{sys.executable} -m pytest -rf"
    async with LocalSession(
        request.workdir, env={"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    ) as session:
        result = await session.run(command, timeout=120)
    out = result.stdout + result.stderr
    failures = [f"{case} - {msg or 'failed'}" for case, msg in _FAILED.findall(out)]
    if result.exit_code == 0:
        verdict, blockers = "PASS", "无"
    elif result.exit_code == 5:
        verdict, blockers = "FAIL", "no tests collected: the tests are missing"
    else:
        verdict, blockers = "FAIL", "; ".join(failures) or f"pytest exited {result.exit_code}"
    tail = "\n".join(out.strip().splitlines()[-15:])
    failing = "\n".join(f"- {f}" for f in failures) or "- none"
    return RoleOutput(
        report=(
            f"iteration: {request.iteration}\n结论：{verdict}\n阻塞：{blockers}\n"
            f"命令：{command}\n\n## 失败用例\n{failing}\n\n## 证据\n```\n{tail}\n```\n"
        ),
        exit_code=result.exit_code,
    )


def dev_role(fixes: Sequence[tuple[str, str, str]] = (BUG_FIX,)) -> Any:
    """DEV: apply the next (file, old, new) edit of ``fixes`` (one per call; then nothing)."""
    queue = list(fixes)

    def run(request: RoleRequest) -> RoleOutput:
        changed: list[str] = []
        note = "no change needed"
        if queue:
            rel, old, new = queue.pop(0)
            target = request.workdir / rel
            text = target.read_text(encoding="utf-8")
            if old in text:
                target.write_text(text.replace(old, new, 1), encoding="utf-8")
                changed.append(rel)
                note = f"edited {rel}"
            else:
                note = f"{rel}: the expected code was not found"
        files = "\n".join(f"- {c}" for c in changed) or "- (none)"
        return RoleOutput(
            report=(
                f"iteration: {request.iteration}\n结论：PASS\n阻塞：无\n\n## 关键变更\n- {note}\n\n"
                f"## 修改文件\n{files}\n\n自测：python -m pytest (left to TEST)\n"
            )
        )

    return run


def review_role(request: RoleRequest) -> RoleOutput:
    """REVIEW: the even-length median must average the two middle values."""
    code = (request.workdir / "stats.py").read_text(encoding="utf-8")
    ok = "/ 2" in code and "% 2" in code
    verdict = "PASS" if ok else "FAIL"
    blockers = "无" if ok else "median() still returns one middle value for even lengths"
    return RoleOutput(
        report=(
            f"iteration: {request.iteration}\n结论：{verdict}\n阻塞：{blockers}\n\n"
            "## 证据来源\n- stats.py\n- the last TEST report\n\n验证方式：read the code of median()\n"
        )
    )


def finish_review_role(request: RoleRequest) -> RoleOutput:
    test = request.workdir / "reports" / "report_test.md"
    passed = test.is_file() and "结论：PASS" in test.read_text(encoding="utf-8")
    issue = "无 P0/P1" if passed else "P0: the test suite does not pass"
    return RoleOutput(
        report=(
            f"iteration: {request.iteration}\n结论：{'PASS' if passed else 'FAIL'}\n"
            f"阻塞：{'无' if passed else issue}\n\n## 问题清单\n- {issue}\n"
        )
    )


def demo_runners(fixes: Sequence[tuple[str, str, str]] = (BUG_FIX,)) -> ScriptedRunner:
    return ScriptedRunner(
        {
            "TEST": run_tests_role,
            "DEV": dev_role(fixes),
            "REVIEW": review_role,
            "FINISH_REVIEW": finish_review_role,
        }
    )


PLAN = [{"id": "t1", "title": "make the test suite pass", "status": "TODO"}]


def rule_main(request: MainRequest) -> MainDecision:
    """MAIN deciding from the verdicts: test first, fix failures, review, then finish."""
    v = request.verdicts
    if request.mode == "finish_check":
        ok = v.get("TEST") == "PASS" and v.get("FINISH_REVIEW") == "PASS"
        return MainDecision(
            next_agent="FINISH" if ok else "TEST", reason="verified" if ok else "not verified"
        )
    test, last = v.get("TEST"), request.last_stage
    if test is None:
        return MainDecision(next_agent="TEST", reason="run the suite first", dev_plan=PLAN)
    if test == "FAIL":
        if last == "DEV":
            return MainDecision(next_agent="TEST", reason="re-test after DEV's change")
        return MainDecision(
            next_agent="DEV", reason="fix the failing tests", dev_plan=[{"id": "t1", "status": "DOING"}]
        )
    if last == "DEV":
        return MainDecision(next_agent="TEST", reason="re-test after DEV's change")
    if v.get("REVIEW") != "PASS" or last not in ("REVIEW", "FINISH_CHECK"):
        return MainDecision(next_agent="REVIEW", reason="tests pass: review the change")
    return MainDecision(
        next_agent="FINISH", reason="tests pass and review passed", dev_plan=[{"id": "t1", "status": "DONE"}]
    )
