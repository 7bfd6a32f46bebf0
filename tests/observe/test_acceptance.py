"""The acceptance metrics of ``tether eval --acceptance`` measure real runs: suites whose
outcomes are known give exactly those outcomes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tether.cli.acceptance import (
    PROJECTS,
    TASKS,
    Task,
    orchestrator_accuracy,
    rollback_success,
    task_success,
    token_count_accuracy,
)
from tether.cli.app import app

PROSE = "\n".join(
    f"Paragraph {k} of the handbook talks about queues and workers at length." for k in range(40)
)
LOST = Task(
    "codeword",
    "handbook.md",
    PROSE + "\nBy the way, the codeword is {value} for the night shift.\n" + PROSE,
    "periwinkle",
    r"codeword is ([a-z]+)",
)
"""A fact in the middle of plain prose: a summary line of the operation cannot keep it."""


async def test_task_success_counts_a_kept_fact_as_success_and_a_lost_one_as_failure():
    """The port survives standard compression (it is in the operation's summary line); a
    word in the middle of prose does not, so the model cannot finish that task."""
    port = next(t for t in TASKS if t.name == "port")
    result = await task_success([port, LOST], seed=3)
    assert result["tasks"] == 2 and result["passed"] == 1 and result["rate"] == 0.5
    assert [f["task"] for f in result["failed"]] == ["codeword"]
    assert result["failed"][0]["status"] == "FAILED" and result["failed"][0]["written"] is None
    assert result["standardCompressions"] >= 2  # each task was compressed before its last step


def test_token_counts_match_the_models_tokenizer_where_it_ships():
    """OpenAI's encodings ship offline: the running count equals a count from scratch of the
    request; the families without an offline tokenizer say so instead of guessing."""
    result = token_count_accuracy(("gpt-4o", "gpt-4", "claude-sonnet-4-5"))
    families = result["families"]
    assert families["o200k"]["accuracy"] == 1.0 and families["o200k"]["ours"] > 1_000
    assert families["cl100k"]["accuracy"] == 1.0
    assert families["o200k"]["ours"] != families["cl100k"]["ours"]  # two tokenizers, really used
    assert families["claude"]["accuracy"] is None and "no offline tokenizer" in families["claude"]["note"]
    assert result["rate"] == 1.0


async def test_rollback_success_is_complete_with_compensations_and_fails_without():
    """Every failure class rolls back cleanly; steps that register no compensation leave
    their files behind, which the measurement reports (only the transient trial passes)."""
    good = await rollback_success(5, seed=2)
    assert good["rate"] == 1.0 and good["failed"] == []
    bad = await rollback_success(5, seed=2, compensate=False)
    assert bad["passed"] == 1 and {f["kind"] for f in bad["failed"]} == {
        "data",
        "validation",
        "permission",
        "system",
    }
    assert all("files" in f["problem"] for f in bad["failed"])


async def test_finish_accuracy_and_main_calls_saved_on_recorded_tasks():
    """A fixable task completes and an unfixable one does not, with and without the
    sub-loop; the sub-loop saves MAIN calls on the task with several bugs."""
    chosen = [p for p in PROJECTS if p.name in ("three-bugs", "unfixable")]
    result = await orchestrator_accuracy(chosen, seed=4)
    assert result["finishAccuracy"] == 1.0 and result["finishAccuracyWithoutSubloop"] == 1.0
    by_task = {row["task"]: row for row in result["perTask"]}
    assert by_task["three-bugs"]["with"] == {
        **by_task["three-bugs"]["with"],
        "status": "COMPLETED",
        "done": True,
    }
    assert by_task["unfixable"]["with"]["status"] != "COMPLETED" and not by_task["unfixable"]["with"]["done"]
    three = by_task["three-bugs"]
    assert three["without"]["mainCalls"] > three["with"]["mainCalls"]
    assert result["mainCallsSaved"] == result["mainCallsWithout"] - result["mainCallsWith"] > 0


@pytest.mark.slow
def test_eval_acceptance_cli_reports_each_goal(tmp_path):
    """`tether eval --acceptance --json` measures every metric and says whether its goal is met."""
    html = tmp_path / "acceptance.html"
    out = CliRunner().invoke(app, ["eval", "--acceptance", "--json", "--html", str(html)])
    assert out.exit_code == 0, out.output
    goals = json.loads(out.output)["acceptance"]["goals"]
    assert set(goals) == {
        "tokenCountAccuracy",
        "taskSuccessAfterStandardCompression",
        "rollbackSuccess",
        "finishAccuracy",
        "mainCallsSavedBySubloop",
    }
    assert (
        goals["rollbackSuccess"]["met"]
        and goals["finishAccuracy"]["met"]
        and goals["tokenCountAccuracy"]["met"]
    )
    assert 0 < goals["taskSuccessAfterStandardCompression"]["value"] <= 1
    assert "Acceptance metrics" in html.read_text()
