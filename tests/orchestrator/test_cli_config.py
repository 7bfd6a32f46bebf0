"""``tether orchestrate`` driven fully from the CLI and the environment: every config field
from ``TETHER_ORCH_*``, ``--set``, ``--env`` for cmd: roles, ``*`` filling only the roles
without their own spec, and a scripted MAIN resumed after kill -9 making the same decisions
as an uninterrupted run."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tether.cli.app import app
from tether.cli.orchestrate import _agent_specs
from tether.errors import ConfigError
from tether.orchestrator import OrchestratorConfig
from tether.orchestrator.metrics import check_thresholds, empty_metrics
from tether.orchestrator.prompts import PromptConfig
from tether.orchestrator.settings import config_dict, config_from, env_names
from tether.stores import create_store

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_every_field_has_an_environment_variable():
    fields = {f.name for f in dataclasses.fields(OrchestratorConfig)} - {"prompts"}
    fields |= {f.name for f in dataclasses.fields(PromptConfig)}
    assert set(env_names().values()) == fields
    env = {
        "TETHER_ORCH_MAX_ITERATIONS": "7",
        "TETHER_ORCH_STALL_ROUNDS": "4",
        "TETHER_ORCH_SUBLOOP": "off",
        "TETHER_ORCH_SUBLOOP_MAX_ITERATIONS": "2",
        "TETHER_ORCH_SUBLOOP_TIMEOUT": "90.5",
        "TETHER_ORCH_STAGE_TIMEOUT": "none",
        "TETHER_ORCH_ACCEPTANCE": "all tests pass\nno TODO left",
        "TETHER_ORCH_MAX_PROMPT_BYTES": "90000",
        "TETHER_ORCH_LEVEL": "3",
        "TETHER_ORCH_DOWNGRADE_RATIO": "0.7",
        "SUBAGENT_HISTORY_LOOKBACK": "3",
        "TETHER_ORCH_HISTORY_LAST_N": "9",
        "TETHER_ORCH_HISTORY_MIN_RECENT": "1",
        "TETHER_ORCH_HISTORY_MAX_TOKENS": "2000",
        "TETHER_ORCH_INCLUDE_MILESTONES": "no",
        "TETHER_ORCH_FINISH_CHECK_MAX_BYTES": "80000",
    }
    c = config_from(env)
    assert (c.max_iterations, c.stall_rounds, c.subloop, c.subloop_max_iterations) == (7, 4, False, 2)
    assert (c.subloop_timeout, c.stage_timeout) == (90.5, None)
    assert c.acceptance == ("all tests pass", "no TODO left")
    p = c.prompts
    assert (p.max_prompt_bytes, p.level, p.downgrade_ratio, p.lookback) == (90000, 3, 0.7, 3)
    assert (p.history_last_n, p.history_min_recent, p.history_max_tokens) == (9, 1, 2000)
    assert (p.include_milestones, p.finish_check_max_bytes) == (False, 80000)
    # TETHER_ORCH_LOOKBACK wins over the design's name; --set and named options win over both
    both = {"SUBAGENT_HISTORY_LOOKBACK": "3", "TETHER_ORCH_LOOKBACK": "5", "TETHER_ORCH_STALL_ROUNDS": "4"}
    assert config_from(both).prompts.lookback == 5
    over = config_from(both, ["stall-rounds=6", "lookback=1"], max_iterations=3)
    assert (over.stall_rounds, over.prompts.lookback, over.max_iterations) == (6, 1, 3)
    # a recorded configuration comes back as it was
    again = config_from({}, [f"{k}={json.dumps(v)}" for k, v in config_dict(c).items()])
    assert again == c


def test_bad_values_name_the_variable_and_the_field():
    with pytest.raises(ConfigError, match="TETHER_ORCH_STALL_ROUNDS"):
        config_from({"TETHER_ORCH_STALL_ROUNDS": "many"})
    with pytest.raises(ConfigError, match="TETHER_ORCH_SUBLOOP"):
        config_from({"TETHER_ORCH_SUBLOOP": "maybe"})
    with pytest.raises(ConfigError, match="FIELD=VALUE"):
        config_from({}, ["colour=blue"])
    with pytest.raises(ConfigError, match=">= 1"):
        config_from({"TETHER_ORCH_MAX_ITERATIONS": "0"})


def test_star_fills_only_roles_without_their_own_spec():
    specs = _agent_specs(["TEST=demo", "*=cmd:my-agent"], demo=False)
    assert specs == {
        "TEST": "demo",
        "DEV": "cmd:my-agent",
        "REVIEW": "cmd:my-agent",
        "FINISH_REVIEW": "cmd:my-agent",
    }
    assert _agent_specs(["*=cmd:x", "DEV=demo"], demo=False)["DEV"] == "demo"
    assert _agent_specs(["*=cmd:x"], demo=True)["TEST"] == "cmd:x"  # * over the demo's defaults


def test_the_cache_alert_waits_for_a_warm_cache():
    m = {**empty_metrics(), "cache_hits": 2, "cache_misses": 12, "main_prompt_bytes": [1000, 1100, 1200]}
    assert [t.name for t in check_thresholds(m)] == []  # 3 MAIN rounds: a cold cache is no alert
    m["main_prompt_bytes"] = [1000] * 6
    assert [(t.name, t.level) for t in check_thresholds(m)] == [("cache_hit_rate", "info")]


def test_a_run_configured_only_through_the_environment(tmp_path):
    work = tmp_path / "project"
    store = f"sqlite:///{tmp_path}/o.db"
    env = {
        "TETHER_ORCH_SUBLOOP": "0",
        "TETHER_ORCH_MAX_ITERATIONS": "9",
        "TETHER_ORCH_ACCEPTANCE": "the suite passes",
        "SUBAGENT_HISTORY_LOOKBACK": "2",
    }
    out = runner.invoke(
        app, ["orchestrate", "--demo", "--workdir", str(work), "--store", store, "--run-id", "env1"], env=env
    )
    assert out.exit_code == 0, out.output
    assert "sub-loop round" not in out.output  # the sub-loop is off: DEV is a MAIN-level stage
    assert "-> DEV" in out.output

    async def origin() -> dict:
        s = create_store(store)
        await s.setup()
        cp = await s.load("env1")
        await s.aclose()
        assert cp is not None
        return cp.state["_origin"]["config"]

    import asyncio

    recorded = asyncio.run(origin())
    assert recorded["subloop"] is False and recorded["max_iterations"] == 9
    assert recorded["acceptance"] == ["the suite passes"] and recorded["lookback"] == 2


# == scripted MAIN, kill -9, resume: the same decisions ==========================
MAIN_REPLIES = [
    {"next_agent": "TEST", "reason": "run the suite first"},
    {"next_agent": "REVIEW", "reason": "the sub-loop fixed it; review the change"},
    {"next_agent": "FINISH", "reason": "reviewed"},
    {"next_agent": "FINISH", "reason": "accepted: the suite passes"},
]
REVIEW = (
    "cmd:if [ -f armed ]; then rm armed; kill -9 $PPID; sleep 5; fi; "
    "printf 'iteration: {iteration}\\n结论：PASS\\n阻塞：无\\n\\n## 证据来源\\n- setting=%s\\n\\n验证方式：read\\n' \"$MY_SETTING\""
)


def tether(*args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from tether.cli.app import app; sys.argv[0] = 'tether'; app()"
    env = {**os.environ, "TETHER_ORCH_SUBLOOP_MAX_ITERATIONS": "2", **extra}
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, timeout=240, env=env
    )


async def decisions(url: str, run_id: str) -> list[str]:
    s = create_store(url)
    await s.setup()
    cp = await s.load(run_id)
    await s.aclose()
    assert cp is not None and cp.status.value == "COMPLETED"
    return [c.split(": ", 1)[1] for c in cp.state["stage_changes"]]


@pytest.mark.slow
async def test_a_resumed_scripted_main_makes_the_same_decisions(tmp_path):
    replies = tmp_path / "main.json"
    replies.write_text(json.dumps(MAIN_REPLIES))
    runs = {}
    for name, crash in (("straight", False), ("crashed", True)):
        work, url = tmp_path / name, f"sqlite:///{tmp_path}/{name}.db"
        args = ["orchestrate", "fix the median", "--workdir", str(work), "--store", url, "--run-id", name]
        args += ["--main", f"script:{replies}", "--agent", f"REVIEW={REVIEW}", "--agent", "*=demo"]
        args += ["--env", "MY_SETTING=hello"]
        from tether.orchestrator.demo import make_sample_repo

        make_sample_repo(work)
        if crash:
            (work / "armed").touch()
        first = tether(*args, cwd=ROOT)
        if crash:
            assert first.returncode == -9, first.stdout + first.stderr
            # only the name of an --env variable is recorded: the resuming shell provides its value
            resumed = tether("resume", name, "--store", url, cwd=ROOT, MY_SETTING="hello")
            assert resumed.returncode == 0 and f"COMPLETED {name}" in resumed.stdout, (
                resumed.stdout + resumed.stderr
            )
        else:
            assert first.returncode == 0 and f"COMPLETED {name}" in first.stdout, first.stdout + first.stderr
        runs[name] = await decisions(url, name)
        # REVIEW ran the cmd: role with the --env value, and * did not replace it
        assert "setting=hello" in (work / "reports" / "report_review.md").read_text()
    assert runs["crashed"] == runs["straight"]
    assert [d for d in runs["straight"] if d.startswith("MAIN")] == [
        "MAIN -> TEST (run the suite first)",
        "MAIN -> REVIEW (the sub-loop fixed it; review the change)",
        "MAIN -> FINISH (reviewed)",
    ]


def test_main_prompt_over_its_limit_cuts_the_history_then_refuses(tmp_path):
    from tether.orchestrator.blackboard import Blackboard
    from tether.orchestrator.prompts import PromptOverLimit, build_main_prompt
    from tether.orchestrator.summaries import SummaryStore

    board = Blackboard(tmp_path)
    entries = "\n\n".join(f"## iteration {i}: DEV\n- " + ("change " * 60) for i in range(1, 40))
    board.write("project_history.md", f"# Project history\n\n{entries}\n")
    store = SummaryStore(board)
    state = {"task": "fix it", "iteration": 40, "dev_plan": [], "latest": {}}
    full, _ = build_main_prompt(store, state, PromptConfig(max_prompt_bytes=1_000_000))
    limit = len(full.encode()) - 10  # the usual window no longer fits
    small, level = build_main_prompt(store, state, PromptConfig(max_prompt_bytes=limit))
    assert level == 1 and len(small.encode()) <= limit < len(full.encode())
    with pytest.raises(PromptOverLimit, match="TETHER_ORCH_MAX_PROMPT_BYTES"):
        build_main_prompt(store, {**state, "task": "x" * 5000}, PromptConfig(max_prompt_bytes=2000))
    from tether.runtime.failures import FailureKind, classify

    assert classify(PromptOverLimit("too big")) is FailureKind.DATA
