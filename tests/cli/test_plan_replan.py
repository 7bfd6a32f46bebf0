"""`tether plan`: a failed step offers replan next to retry / skip / abort, and
`tether resume RUN --decision replan` lets the model revise the steps left (real processes)."""

from __future__ import annotations

import json

from tests.cli.test_agents_cli import tether, write_script
from tether.cli.agents import EXIT_PAUSED


def test_plan_replan_decision_revises_the_remaining_steps(tmp_path):
    plan = tmp_path / "plan.json"
    steps = [
        {"name": "Prepare", "goal": "create the data dir", "category": "setup"},
        {"name": "Install postgres", "goal": "apt-get install postgresql", "category": "database"},
    ]
    plan.write_text(json.dumps({"project_name": "demo", "deploy_dir": str(tmp_path), "steps": steps}))
    replies = [
        {"action": "execute", "command": "mkdir -p data"},
        {"action": "step_done", "outputs": {"summary": "Created data/"}},
        {"action": "failed", "message": "permission denied: no root for apt-get"},
    ]
    first = tether(
        tmp_path, "plan", str(plan), "--script", write_script(tmp_path, "p1.json", replies), "--run-id", "rp"
    )
    assert first.returncode == EXIT_PAUSED, first.stdout + first.stderr
    assert "--decision retry|skip|replan|abort" in first.stdout

    revision = {
        "reason": "no root: sqlite",
        "steps": [{"name": "Use sqlite", "goal": "write DATABASE_URL to app.env", "category": "database"}],
    }
    rest = [
        revision,
        {"action": "execute", "command": "echo DATABASE_URL=sqlite:///data/app.db > app.env"},
        {"action": "step_done", "outputs": {"summary": "Configured sqlite"}},
    ]
    second = tether(
        tmp_path, "resume", "rp", "--decision", "replan", "--script", write_script(tmp_path, "p2.json", rest)
    )
    assert second.returncode == 0, second.stdout + second.stderr
    assert "COMPLETED rp" in second.stdout
    assert (tmp_path / "app.env").read_text() == "DATABASE_URL=sqlite:///data/app.db\n"
    log = json.loads((tmp_path / "agent_logs" / "rp.json").read_text())
    assert [s["step_name"] for s in log["steps"]] == ["Prepare", "Use sqlite"]
