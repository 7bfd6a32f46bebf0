"""The external-command runner, with a small script standing in for a coding agent."""

from __future__ import annotations

import sys
import textwrap

import pytest

from tether.errors import ConfigError, ToolError
from tether.orchestrator import CommandRunner, Orchestrator, ScriptedMain, ScriptedRunner
from tether.orchestrator.demo import finish_review_role, rule_main, run_tests_role
from tether.orchestrator.roles import RoleRequest
from tether.state import RunStatus

AGENT = textwrap.dedent(
    """
    # A stand-in coding agent: reads its prompt, fixes stats.py when it is DEV, writes a report.
    import re, sys
    mode, role, report = sys.argv[1], sys.argv[2], sys.argv[3]
    prompt = open(sys.argv[4]).read() if mode == "file" else sys.stdin.read()
    iteration = re.search(r"iteration: (\\d+)", prompt).group(1)
    if role == "DEV":
        code = open("stats.py").read()
        fix = "    if len(ordered) % 2 == 0:\\n        return (ordered[mid - 1] + ordered[mid]) / 2\\n"
        if "% 2" not in code:
            open("stats.py", "w").write(code.replace("    return ordered[mid]", fix + "    return ordered[mid]"))
        body = "## 修改文件\\n- stats.py\\n"
    else:
        body = "## 证据来源\\n- stats.py\\n验证方式：read it\\n"
    text = f"iteration: {iteration}\\n结论：PASS\\n阻塞：无\\n{body}prompt had {len(prompt)} chars\\n"
    if report == "-":
        print(text)
    else:
        open(report, "w").write(text)
    """
)


@pytest.fixture
def agent(tmp_path):
    path = tmp_path / "agent.py"
    path.write_text(AGENT)
    return f"{sys.executable} {path}"


async def test_a_command_agent_fixes_the_bug_inside_the_orchestration(repo, store, agent):
    """DEV and REVIEW are an external program: prompt on stdin, report written to a file."""
    runner = CommandRunner(f"{agent} stdin {{role}} {{report_file}}", prompt_via="stdin", timeout=60)
    runners = {"DEV": runner, "REVIEW": runner, "TEST": ScriptedRunner({"TEST": run_tests_role})}
    runners["FINISH_REVIEW"] = ScriptedRunner({"FINISH_REVIEW": finish_review_role})
    orch = Orchestrator(repo, store, main=ScriptedMain(rule_main), runners=runners)
    result = await orch.start("cmd", "fix the median")
    assert result.status is RunStatus.COMPLETED
    assert "% 2" in (repo / "stats.py").read_text()
    dev = (repo / "reports/report_dev_1_final.md").read_text()
    assert dev.startswith("iteration: 1\n结论：PASS") and "prompt had" in dev
    assert (repo / ".tether/prompts/dev_1_subloop_1.md").read_text().startswith("You are DEV.")


async def test_prompt_as_a_file_report_on_stdout_timeout_and_exit_code(repo, agent):
    def request(role="REVIEW", timeout=None):
        return RoleRequest(
            role=role, iteration=4, prompt="iteration: 4\nreview", workdir=repo,
            report_path=repo / "reports" / "report_review_4.md", run_id="r", timeout=timeout,
        )  # fmt: skip

    (repo / "reports").mkdir(exist_ok=True)
    out = await CommandRunner(f"{agent} file {{role}} - {{prompt_file}}", prompt_via="file").run(request())
    assert out.report.startswith("iteration: 4\n结论：PASS")
    with pytest.raises(ToolError, match="timed out"):
        await CommandRunner("sleep 5", timeout=0.3).run(request())
    with pytest.raises(ToolError, match="exited 3"):
        await CommandRunner("echo broken >&2; exit 3").run(request())
    capped = await CommandRunner("head -c 300000 /dev/zero | tr '\\0' a", max_output_bytes=10_000).run(
        request()
    )
    assert len(capped.report) < 20_000
    with pytest.raises(ConfigError, match="unknown placeholder"):
        await CommandRunner("agent {nope}").run(request())
    with pytest.raises(ConfigError):
        CommandRunner("x", prompt_via="pipe")  # type: ignore[arg-type]


async def test_the_agent_loop_as_a_role_writes_its_report_with_shell_commands(repo, store):
    """AgentRunner: a (scripted) model drives a local shell in the workdir, as a nested run."""
    from tether.models import ScriptedModel
    from tether.orchestrator import AgentRunner

    model = ScriptedModel(
        [
            {"action": "execute", "command": "grep -c 'return ordered' stats.py", "reasoning": "look"},
            {
                "action": "execute",
                "command": "printf 'iteration: 1\\n结论：FAIL\\n阻塞：median() of even lengths\\n' > reports/report_review_1.md",
                "reasoning": "write the report",
            },
            {"action": "done", "message": "reviewed"},
        ]
    )
    (repo / "reports").mkdir(exist_ok=True)
    request = RoleRequest(
        role="REVIEW", iteration=1, prompt="You are REVIEW.", workdir=repo,
        report_path=repo / "reports" / "report_review_1.md", run_id="outer",
    )  # fmt: skip
    out = await AgentRunner(model, store).run(request)
    assert out.report.startswith("iteration: 1\n结论：FAIL")
    assert "reports/report_review_1.md" in model.calls[0][-1]["content"] or any(
        "report_review_1.md" in m["content"] for m in model.calls[0]
    )
    assert await store.get_run("outer-review-1") is not None  # a nested durable run
