from __future__ import annotations

from pathlib import Path

import pytest

from tether.context import ContextWindow, new_item
from tether.context.distill import step_outputs_from_commands
from tether.context.facts import extract_operation, extract_output, fact_lines, find_resolutions
from tether.context.planted import AGENT_CATEGORIES, generate_agent_transcript

OUTPUTS = Path(__file__).parent / "outputs"


@pytest.mark.parametrize(
    ("name", "field", "expected"),
    [
        ("pip_install.txt", "details", "Successfully installed fastapi-0.110.0 starlette-0.36.3"),
        ("npm_eacces.txt", "errors", "npm ERR! Error: EACCES: permission denied, mkdir '/srv/web/node_modules/.cache'"),
        ("docker_build.txt", "artifacts", "registry.example.com/shop/api:1.4.2"),
        ("systemd_status.txt", "environment", "0.0.0.0:8000"),
        ("systemd_status.txt", "environment", "Active: active (running)"),
        ("git_pull.txt", "details", "Updating 3e1c2d4..9f8a7b6"),
        ("pytest_fail.txt", "details", "1 failed, 56 passed in 3.21s"),
        ("pytest_fail.txt", "errors", "FAILED tests/test_api.py::test_checkout - AssertionError: assert 500 == 200"),
    ],
)  # fmt: skip
def test_facts_of_real_command_outputs(name: str, field: str, expected: str) -> None:
    """The line that says what happened is found in real pip/npm/docker/systemd/git/pytest output."""
    facts = extract_output((OUTPUTS / name).read_text(encoding="utf-8"))
    assert expected in getattr(facts, field)


def test_progress_noise_is_not_a_fact() -> None:
    """Versions in ``Collecting``/``Downloading`` lines are progress, not results."""
    facts = extract_output((OUTPUTS / "pip_install.txt").read_text(encoding="utf-8"))
    assert not any("92.1" in d or "Downloading" in d for d in facts.details)
    assert facts.errors == ()
    first = extract_output((OUTPUTS / "npm_eacces.txt").read_text(encoding="utf-8")).errors[0]
    assert "permission denied" in first  # the informative error line ranks first


def test_fact_lines_of_ascii_and_other_lines_alike() -> None:
    """The lines a trim keeps are found wherever they are, in plain ASCII lines (searched in
    the whole text at once) as in the others (tested one by one)."""
    lines = [
        "Compiling 120 modules",
        "\u2713 wrote /srv/app/dist/bundle.js",
        "Server listening on 0.0.0.0:8080",
        "the offset was reset",
        "LOG_LEVEL is now debug",
        "PORT=8443",
        "\u00c4rger: permission denied",
        "0 errors, 2 warnings",
        "ERROR: disk full",
    ]
    assert fact_lines("\n".join(lines)) == [1, 2, 4, 5, 6, 8]
    for path in sorted(OUTPUTS.glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        one_by_one = [k for k, line in enumerate(text.splitlines()) if fact_lines(line)]
        assert fact_lines(text) == one_by_one, path.name


def test_command_arguments_exit_status_and_config() -> None:
    """A structured call's command, the printed exit code and a config set by sed."""
    call = new_item("tool_call", "x", tool_call_id="c1", metadata={
        "name": "run_command",
        "arguments": {"command": "sed -i 's/^DB_HOST=.*/DB_HOST=db-7.internal/' /srv/app/.env"}})  # fmt: skip
    result = new_item("tool_result", "[exit code 0]", tool_call_id="c1")
    facts = extract_operation(call, result)
    assert facts.exit_code == 0 and facts.configurations == {"DB_HOST": "db-7.internal"}
    line = facts.line(max_chars=120)
    assert line.startswith("$ sed -i") and "exit 0" in line and "DB_HOST=db-7.internal" in line
    action = new_item("tool_call", '{"action": "execute", "command": "docker build -t reg.io/a:1.2 ."}')
    built = extract_operation(action, new_item("tool_result", "exit code 0\nSuccessfully built 1a2b3c4d"))
    assert built.command == "docker build -t reg.io/a:1.2 ." and built.artifacts[0] == "reg.io/a:1.2"


def _op(command: str, output: str, n: int) -> tuple[str, object]:
    call = new_item(
        "tool_call", "", tool_call_id=f"c{n}", metadata={"name": "sh", "arguments": {"command": command}}
    )
    return call.id, extract_operation(call, new_item("tool_result", output, tool_call_id=f"c{n}"))


def test_a_failure_fixed_before_a_good_retry_is_a_resolution() -> None:
    """Error line of the failure, the commands between, and only when the retry succeeds."""
    ops = [
        _op("npm ci", (OUTPUTS / "npm_eacces.txt").read_text(encoding="utf-8") + "\n[exit code 1]", 1),
        _op("chown -R deploy /srv/web/node_modules", "[exit code 0]", 2),
        _op("npm ci", "added 12 packages\n[exit code 0]", 3),
        _op("make deploy", "make: *** [deploy] Error 2\n[exit code 2]", 4),
    ]
    [res] = find_resolutions(ops)  # type: ignore[arg-type]
    assert "permission denied" in res.issue
    assert res.resolution == "`chown -R deploy /srv/web/node_modules`"


def _window(*items: object) -> ContextWindow:
    w = ContextWindow("gpt-4", budget=10**7)
    w.add(new_item("goal", "Ship the shop API"))
    for item in items:
        w.add(item)  # type: ignore[arg-type]
    for k in range(8):  # enough operations after them that they fold
        call = new_item("tool_call", "", tool_call_id=f"t{k}", metadata={"name": "sh", "arguments": {"command": f"make step{k}"}})  # fmt: skip
        w.add(call)
        w.add(new_item("tool_result", "log line\n" * 200 + "[exit code 0]", tool_call_id=f"t{k}"))
    return w


def test_a_checklist_becomes_todo_items_whose_status_later_messages_update() -> None:
    """``- [ ]`` items become protected TODOs; ``- [x]`` and "step N done" tick them off."""
    w = _window(
        new_item("message", "Plan:\n- [ ] Build the image\n- [ ] Open port 8443 on lb-2", role="user"),
        new_item("message", "My steps:\n1. Check disk on node-4\n2. Rotate key vault-9", role="assistant"),
        new_item("message", "- [x] Build the image", role="user"),
        new_item("message", "Step 2 done.", role="assistant"),
    )
    w.compress("deep")
    todos = {i.metadata["text"]: i for i in w.items() if i.kind == "todo"}
    assert set(todos) == {
        "Build the image",
        "Open port 8443 on lb-2",
        "Check disk on node-4",
        "Rotate key vault-9",
    }
    assert todos["Build the image"].content == "[x] Build the image"
    assert todos["Rotate key vault-9"].metadata["status"] == "done"
    assert todos["Open port 8443 on lb-2"].metadata["status"] == "pending"
    w.compress("deep")  # a second compression keeps them as they are
    assert {i.metadata["text"] for i in w.items() if i.kind == "todo"} == set(todos)


def test_an_answer_becomes_a_decision_with_its_question() -> None:
    """The agent's question and the user's answer are kept together, both in full."""
    w = _window(
        new_item(
            "message", "Two certificates exist.\nShould I use the wildcard or api-cert-7?", role="assistant"
        ),
        new_item("message", "Use api-cert-7.\nIt expires later.", role="user"),
        new_item("message", "Thanks.\nNever restart pg-main during business hours.", role="user"),
    )
    w.compress("deep")
    [decision] = [i for i in w.items() if i.kind == "decision"]
    assert "Should I use the wildcard or api-cert-7?" in decision.content
    assert "Use api-cert-7. / It expires later." in decision.content
    [constraint] = [i for i in w.items() if i.kind == "constraint"]
    assert constraint.content == "Never restart pg-main during business hours."


def test_a_question_folded_before_its_answer_still_becomes_a_decision() -> None:
    """A compression boundary between question and answer: the decision still holds both."""
    w = _window(
        new_item("message", "Should I deploy to eu-west-3 or eu-central-9?", role="assistant"),
        new_item("message", "eu-central-9, the other one is frozen.", role="user"),
    )
    question = next(i for i in w.items() if i.effective_role == "assistant" and i.kind == "message")
    w.compress("checkpoint", before_seq=question.seq)  # folds the question, keeps the answer
    [decision] = [i for i in w.items() if i.kind == "decision"]
    assert decision.content == (
        "Should I deploy to eu-west-3 or eu-central-9? → user: eu-central-9, the other one is frozen."
    )
    assert question.id not in w


def test_step_outputs_from_a_command_history() -> None:
    """Without step_done outputs, the rolling summary still gets configs, artefacts, fixes."""
    history = [
        {"command": "export API_PORT=8443", "exit_code": 0, "stdout": ""},
        {"command": "npm ci", "exit_code": 1, "stderr": "npm ERR! Error: EACCES: permission denied, mkdir '/x'"},
        {"command": "chown -R deploy /x", "exit_code": 0},
        {"command": "npm ci", "exit_code": 0, "stdout": "added 3 packages"},
        {"command": "docker build -t reg.io/shop:2 .", "exit_code": 0, "stdout": "Successfully tagged reg.io/shop:2"},
    ]  # fmt: skip
    out = step_outputs_from_commands(history, summary="built")
    assert out.new_configurations == {"API_PORT": "8443"}
    assert out.artifacts == ("reg.io/shop:2",)
    assert out.issues_resolved[0]["resolution"] == "`chown -R deploy /x`"


@pytest.mark.parametrize("level", ["standard", "deep"])
def test_quality_targets_on_an_agent_transcript(level: str) -> None:
    """Protected categories 100%; config/artefact/resolution and early details over the targets."""
    tr = generate_agent_transcript(seed=21, operations=120)
    w = ContextWindow("gpt-4", budget=10**7)
    w.add_many(tr.items)
    result = w.compress(level)  # type: ignore[arg-type]
    target = 0.6 if level == "standard" else 0.3
    assert abs(result.kept_ratio - target) <= 0.05
    kept = tr.retention(w.render())
    floor = 0.9 if level == "standard" else 0.7
    for column in AGENT_CATEGORIES:
        found, planted = kept[column]
        if column in ("goal", "constraint", "todo", "decision"):
            assert found == planted, column
        else:
            assert found / planted >= floor, (column, found, planted)


def test_outputs_are_mined_when_added_not_when_compressed() -> None:
    """Compression reads the facts mined on arrival; a replaced output is mined again."""
    w = _window()
    assert len(w.facts) == 8  # one entry per call and result pair, filled by add()
    extract_output.cache_clear()
    w.compress("checkpoint", before_seq=w.items()[-4].seq)
    info = extract_output.cache_info()
    assert info.hits + info.misses == 0  # nothing mined during the compression
    result = next(i for i in w.items() if i.kind == "tool_result")
    w.replace(new_item("tool_result", "Successfully tagged reg.io/shop:9\n[exit code 0]", id=result.id, tool_call_id=result.tool_call_id))  # fmt: skip
    w.compress("deep")
    summary = next(i for i in w.items() if i.kind == "summary")
    assert "reg.io/shop:9" in summary.content


def test_prose_configuration_and_whole_commands() -> None:
    """`configured X value Y`, `set X to Y`, `X is now Y` and `listening on :P` are facts;
    a summary line keeps a long command's end, shortening paths in the middle."""
    out = extract_output(
        "configured PORT value 8443\nset WORKERS to 4\nMAX_CONN is now 900\nserver listening on :9090\n"
    )
    assert out.configurations == {"PORT": "8443", "WORKERS": "4", "MAX_CONN": "900"}
    assert ":9090" in out.environment
    command = (
        "psql -h db-main-7.internal -d ledger -f /srv/ledger/releases/2026-03-03/migrations/0042.sql "
        "-c 'GRANT USAGE, CREATE ON SCHEMA ledger_x TO ledger_migrator_x'"
    )
    call = new_item(
        "tool_call", "", tool_call_id="c", metadata={"name": "sh", "arguments": {"command": command}}
    )
    line = extract_operation(call, new_item("tool_result", "exit code 0", tool_call_id="c")).line(
        max_chars=200
    )
    assert "TO ledger_migrator_x'" in line and "ledger_x" in line and "/srv/…/0042.sql" in line


def test_urls_url_settings_and_tool_versions_in_an_output_are_facts():
    """Lines the first-line fallback used to drop: an endpoint, a setting whose value is a
    URL, and a tool's version on a line of its own."""
    from tether.context.facts import extract_output

    health = extract_output("probing\nGET http://orders.staging.local:8080/health 200 OK")
    assert health.environment == ("http://orders.staging.local:8080/health",)
    db = extract_output("connecting\nDATABASE_URL=postgres://orders@db-7/orders\nconnected")
    assert db.configurations == {"DATABASE_URL": "postgres://orders@db-7/orders"}
    runtime = extract_output("python runtime check\nPython 3.11.7\nok")
    assert "Python 3.11.7" in runtime.details
    assert "nginx/1.25.3" in extract_output("nginx/1.25.3\n").details[0]
    assert extract_output("took 3.5 seconds in all, then 2.1 more\n").details == (
        "took 3.5 seconds in all, then 2.1 more",
    )  # prose with numbers is not a version line (the first-line fallback keeps it)
