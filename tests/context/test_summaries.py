from __future__ import annotations

import logging

import pytest

from tether.context import ExecutionSummary, StepOutputs, SummaryManager, merge, parse_step_outputs


def test_prompt_context_has_the_seed_markdown_shape() -> None:
    """# Current Deployment State, then ## sections only when non-empty."""
    m = SummaryManager("my-app", "/home/user/my-app", "traditional")
    m.merge_step_outputs(
        "Install Node.js",
        "prerequisite",
        StepOutputs(
            summary="Installed Node.js 18.17.0",
            environment_changes={"node_version": "18.17.0", "pm2_installed": True},
            issues_resolved=({"issue": "Node.js not found", "resolution": "Installed via nvm"},),
        ),
        now="2025-12-13T00:00:00+00:00",
    )
    assert m.get_prompt_context() == (
        "# Current Deployment State\n"
        "- Project: my-app\n"
        "- Deploy Directory: /home/user/my-app\n"
        "- Strategy: traditional\n"
        "\n## Environment\n- node_version: 18.17.0\n- pm2_installed: True\n"
        "\n## Completed Actions\n- [PREREQUISITE] Install Node.js: Installed Node.js 18.17.0\n"
        "\n## Resolved Issues\n- Node.js not found → Installed via nvm"
    )
    assert m.get_summary().last_updated == "2025-12-13T00:00:00+00:00"


def test_caps_keep_the_newest_15_actions_and_5_issues() -> None:
    """Completed actions capped at 15, resolved issues at 5, newest kept."""
    s = ExecutionSummary()
    for n in range(20):
        s = merge(
            s,
            StepOutputs(summary=f"step {n}", issues_resolved=({"issue": f"i{n}", "resolution": "r"},)),
            step_name=f"s{n}",
            now="t",
        )
    assert len(s.completed_actions) == 15 and s.completed_actions[0] == "s5: step 5"
    assert [i["issue"] for i in s.resolved_issues] == ["i15", "i16", "i17", "i18", "i19"]


def test_merge_is_pure_and_later_values_win() -> None:
    """merge() returns a new summary and leaves its input untouched."""
    s0 = ExecutionSummary(environment={"a": 1}, configurations={"X": "1"})
    s1 = merge(
        s0, StepOutputs(summary="x", environment_changes={"a": 2}, new_configurations={"X": "2"}), now="t"
    )
    assert s0.environment == {"a": 1} and s1.environment == {"a": 2} and s1.configurations == {"X": "2"}
    again = merge(
        s0, StepOutputs(summary="x", environment_changes={"a": 2}, new_configurations={"X": "2"}), now="t"
    )
    assert again == s1


def test_size_warnings_are_logged_and_recorded_once(caplog: pytest.LogCaptureFixture) -> None:
    """Past 30 environment keys / 20 configuration keys: one warning each."""
    s = ExecutionSummary()
    with caplog.at_level(logging.WARNING):
        s = merge(s, StepOutputs(summary="x", environment_changes={f"e{i}": i for i in range(31)}), now="t")
        s = merge(s, StepOutputs(summary="y", new_configurations={f"c{i}": "v" for i in range(21)}), now="t")
        s = merge(s, StepOutputs(summary="z", environment_changes={"more": 1}), now="t")
    assert len(s.warnings) == 2
    assert "environment has more than 30 keys" in s.warnings[0]
    assert "configurations has more than 20 keys" in s.warnings[1]
    assert caplog.text.count("more than 30 keys") == 1


@pytest.mark.parametrize(
    ("raw", "summary"),
    [
        (None, "Step completed"),
        ({}, "Step completed"),
        ("not json", "Step completed"),
        ([1, 2], "Step completed"),
        ({"summary": ""}, "Step completed"),
        ({"summary": 42, "message": "Built the bundle"}, "Built the bundle"),
        ('{"summary": "from json"}', "from json"),
    ],
)
def test_malformed_outputs_fall_back_with_a_warning(
    raw: object, summary: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Never raises: the seed's fallback summary plus a logged warning."""
    out = parse_step_outputs(raw)
    assert out.summary == summary
    if summary != "from json":
        assert "step outputs repaired" in caplog.text


def test_wrong_typed_fields_become_defaults(caplog: pytest.LogCaptureFixture) -> None:
    """Bad field types are repaired individually; good ones survive."""
    out = parse_step_outputs(
        {
            "summary": "ok",
            "environment_changes": "oops",
            "new_configurations": {"PORT": 8080},
            "artifacts": "/srv/app/dist",
            "services_started": ["nginx", {"name": "app", "port": 3000}],
            "issues_resolved": 7,
            "custom_data": {"k": [1]},
        }
    )
    assert out.environment_changes == {} and out.new_configurations == {"PORT": "8080"}
    assert out.artifacts == ("/srv/app/dist",)
    assert out.services_started == ({"name": "nginx"}, {"name": "app", "port": 3000})
    assert out.issues_resolved == () and out.custom_data == {"k": [1]}
    assert "environment_changes is str" in caplog.text and "issues_resolved is int" in caplog.text


def test_valid_outputs_log_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """A well-formed step_done is accepted silently."""
    out = parse_step_outputs({"summary": "Installed", "artifacts": ["a"]})
    assert out == StepOutputs(summary="Installed", artifacts=("a",))
    assert caplog.text == ""


def test_manager_validates_raw_dicts_and_round_trips_state() -> None:
    """merge_step_outputs accepts a model's raw dict; state is plain data."""
    m = SummaryManager("p", "/d", "docker")
    m.merge_step_outputs(
        "Build", "build", {"message": "built", "services_started": [{"name": "web"}]}, now="t"
    )
    assert m.get_summary().completed_actions == ("[BUILD] Build: built",)
    back = SummaryManager.from_state(m.to_state())
    assert back.get_summary() == m.get_summary()
    assert "## Services\n- web" in back.get_prompt_context()


async def test_a_plan_phase_that_ends_folds_into_one_line(tmp_path) -> None:
    """Two build steps then a deploy step: once the build phase ends, its actions are one
    line with their count and artefact ids; the deploy step (a phase of one) stays as it is."""
    from tether.agent.plan import PlanOrchestrator, PlanStep, StepContext, StepResult
    from tether.stores import open_store

    async def execute(ctx: StepContext) -> StepResult:
        outputs = StepOutputs(summary=f"did {ctx.step_name}", artifacts=(f"reg/app:{ctx.step_id}",))
        return StepResult.succeeded(structured_outputs=outputs)

    steps = [PlanStep(name="Build", goal="b", category="build"), PlanStep(name="Push", goal="p", category="build"),
             PlanStep(name="Deploy", goal="d", category="deploy")]  # fmt: skip
    async with open_store(f"sqlite:///{tmp_path}/plan.db") as store:
        plan = PlanOrchestrator(store=store, steps=steps, step_executor=execute, log_dir=None)
        result = await plan.start("phased")
    actions = result.state["execution_summary"]["completed_actions"]
    assert actions == [
        "✅ phase build (2 items): artefacts reg/app:1, reg/app:2; last: Push: did Push",
        "[DEPLOY] Deploy: did Deploy",
    ]
