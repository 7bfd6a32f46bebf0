"""The design's acceptance metrics, measured by running things: ``tether eval --acceptance``.

Each metric runs real work with scripted models (no network) and counts outcomes:

* **task success after standard compression**: the bundled task suite (:data:`TASKS`).
  Each task plants one fact in a file its first command reads (a port in a log, a
  configuration value, an image tag, an error, …), then reads filler files until the
  agent loop has compressed its context at the standard level at least once, then must
  write the fact to a result file. The scripted model reads the fact from the prompt it
  is sent (a regular expression on the messages), as a model would: if compression lost
  it, the model cannot finish the task. A task succeeds when the run completes, the
  result file holds the planted value and at least one standard compression happened.
* **rollback success under injected failures**: seeded workflows whose steps create and
  modify real files (registering compensations) fail at a random step with an injected
  exception of each failure class. A rollback succeeds when the failing step's effects
  are undone, the earlier steps' effects stay, the stored state is the state before the
  failing step, and a failure report lists what was rolled back (a transient failure
  instead must be retried and the run complete, each effect present once).
* **orchestrator FINISH accuracy and MAIN calls saved by the sub-loop**: recorded tasks
  (projects with bugs DEV can or cannot fix, and issues only the final review sees) run
  through the real orchestrator with the rule-based MAIN, once with the TEST→DEV
  sub-loop and once without. A FINISH decision is accurate when the run completed
  exactly when the project is really done (checked on the files afterwards); the MAIN
  calls saved are the MAIN decisions the sub-loop made unnecessary.

* **token-count accuracy per model family**: for each family whose tokenizer ships offline
  (OpenAI's cl100k and o200k), the window's running count (per item, cached) of a
  transcript against a count from scratch of the exact request with the model's own
  tokenizer. The other families have no offline tokenizer: their accuracy is measured
  from runs that recorded the provider's billed tokens
  (:func:`tether.context.evaluation.token_accuracy`, the ``tokenAccuracy`` of the report).
"""

from __future__ import annotations

import random
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "GOALS",
    "PROJECTS",
    "TASKS",
    "Task",
    "acceptance_report",
    "orchestrator_accuracy",
    "rollback_success",
    "task_success",
    "token_count_accuracy",
]

GOALS: Mapping[str, tuple[str, float]] = {
    "tokenCountAccuracy": (">", 0.95),
    "taskSuccessAfterStandardCompression": (">", 0.90),
    "rollbackSuccess": (">", 0.95),
    "finishAccuracy": (">=", 0.95),
}
"""The design's goals: metric name → (comparison, value)."""


@dataclass(frozen=True, slots=True)
class Task:
    """One scripted task: a fact planted in ``source``, found again with ``pattern``."""

    name: str
    source: str
    """The file the first command reads, holding the fact among other lines."""
    text: str
    """That file's text (``{value}`` marks the fact)."""
    value: str
    pattern: str
    """A regular expression whose first group finds the value in the prompt."""
    command: str = "cat {source}"
    """The first command (it reads the fact)."""


TASKS: tuple[Task, ...] = (
    Task(
        "port",
        "service.log",
        "starting orders\nlistening on 0.0.0.0:{value}\nready",
        "48213",
        r"0\.0\.0\.0:(\d+)",
    ),
    Task(
        "configuration",
        ".env",
        "LOG_LEVEL=info\nORDERS_POOL_SIZE={value}\nTZ=UTC",
        "37",
        r"ORDERS_POOL_SIZE=(\d+)",
    ),
    Task(
        "artefact",
        "build.log",
        "Step 9/9 : CMD serve\nSuccessfully tagged registry.local/orders:{value}",
        "2.4.0-k7q",
        r"registry\.local/orders:([\w.\-]+)",
    ),
    Task(
        "error",
        "compose.sh",
        "echo Creating orders_db; echo 'Error: Bind for 0.0.0.0:5432 failed: port is {value}' >&2; exit 1",
        "already allocated",
        r"port is (already allocated)",
        command="sh {source}",
    ),
    Task(
        "version",
        "runtime.txt",
        "python runtime check\nPython {value}\nok",
        "3.11.7",
        r"Python (\d+\.\d+\.\d+)",
    ),
    Task(
        "path",
        "release.log",
        "packing release\nwrote {value}\ndone",
        "/srv/orders/releases/r-9321/app.tar.gz",
        r"(/srv/orders/releases/[\w\-/]+\.tar\.gz)",
    ),
    Task(
        "url",
        "health.log",
        "probing\nGET {value} 200 OK",
        "http://orders.staging.local:8080/health",
        r"(http://orders\.[\w.:/]+)",
    ),
    Task(
        "database",
        "db.txt",
        "connecting\nDATABASE_URL={value}\nconnected",
        "postgres://orders@db-7/orders",
        r"DATABASE_URL=(\S+)",
    ),
    Task(
        "commit",
        "git.log",
        "fetching\nHEAD is now at {value} fix the median",
        "9f3c2ab",
        r"HEAD is now at ([0-9a-f]{7})",
    ),
    Task(
        "replicas",
        "scale.log",
        "scaling deployment\nORDERS_REPLICAS={value}\nrolled out",
        "6",
        r"ORDERS_REPLICAS=(\d+)",
    ),
)
"""The bundled task suite: one fact of each category the context engine keeps."""

_WORD_TEXT = (
    "the deploy build cluster service request response latency error retry timeout config database "
    "index query table migration schema cache token worker queue broker lease replica primary "
    "container image volume network socket certificate secret rotate report quarter search page"
)
_WORDS = tuple(_WORD_TEXT.split())


def _filler(rng: random.Random, chars: int) -> str:
    lines: list[str] = []
    size = 0
    while size < chars:
        line = " ".join(rng.choices(_WORDS, k=rng.randint(6, 14))).capitalize() + "."
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def _prompt_text(messages: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


def _responder(task: Task, fillers: int) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
    """A model that reads the task's file, the fillers, then writes the fact it finds in
    its prompt (or gives up when the prompt no longer holds it)."""
    step = [0]

    def answer(messages: list[dict[str, Any]]) -> dict[str, Any]:
        step[0] += 1
        n = step[0]
        if n == 1:
            command = task.command.format(source=task.source)
            return {"action": "execute", "command": command, "reasoning": "read the facts"}
        if n <= 1 + fillers:
            return {"action": "execute", "command": f"cat notes-{n - 1}.txt", "reasoning": "read the notes"}
        if n == 2 + fillers:
            found = re.search(task.pattern, _prompt_text(messages))
            if found is None:
                return {"action": "failed", "message": f"the {task.name} is no longer in my context"}
            return {
                "action": "execute",
                "command": f"printf '%s' '{found.group(1)}' > result.txt",
                "reasoning": f"write the {task.name}",
            }
        return {"action": "done", "message": "written"}

    return answer


@dataclass(slots=True)
class TaskOutcome:
    name: str
    success: bool
    status: str
    compressions: int
    written: str | None


def _prepare_task(task: Task, workdir: Path, rng: random.Random, fillers: int) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / task.source).write_text(task.text.format(value=task.value), encoding="utf-8")
    for k in range(1, fillers + 1):
        (workdir / f"notes-{k}.txt").write_text(_filler(rng, 1_400), encoding="utf-8")


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


async def _run_task(task: Task, workdir: Path, store: Any, *, seed: int, fillers: int = 18) -> TaskOutcome:
    from tether.agent import AgentLoop, LoopConfig
    from tether.context import Thresholds
    from tether.models import ScriptedModel
    from tether.tools import LocalSession

    _prepare_task(task, workdir, random.Random(seed), fillers)
    compressions: list[str] = []

    def on_event(event: Any) -> None:
        if event.kind == "context_compressed":
            compressions.append(str(event.detail.get("level", "")))

    config = LoopConfig(
        max_iterations=fillers + 6,
        budget=8_000,
        thresholds=Thresholds(warn=0.5, standard=0.6, deep=50.0),  # standard compression only
        phase_compression=False,
        checkpoint_compression=False,
    )
    model = ScriptedModel(_responder(task, fillers))
    loop = AgentLoop(model, LocalSession(cwd=workdir), store, config=config, on_event=on_event)
    result = await loop.start(
        f"acceptance-{task.name}-{seed}", f"Find the {task.name} and write it to result.txt."
    )
    written = _read(workdir / "result.txt")
    standard = sum(1 for level in compressions if level == "standard")
    ok = str(result.status) == "COMPLETED" and written == task.value and standard > 0
    return TaskOutcome(task.name, ok, str(result.status), standard, written)


async def task_success(
    tasks: Sequence[Task] = TASKS, *, seed: int = 1, store_url: str | None = None
) -> dict[str, Any]:
    """Run the task suite; the share of tasks completed with the planted value written."""
    from tether.stores import open_store

    with tempfile.TemporaryDirectory(prefix="tether-acceptance-") as tmp:
        async with open_store(store_url or f"sqlite:///{tmp}/tasks.db") as store:
            outcomes = [
                await _run_task(task, Path(tmp) / task.name, store, seed=seed + i)
                for i, task in enumerate(tasks)
            ]
    passed = sum(o.success for o in outcomes)
    return {
        "rate": passed / len(outcomes) if outcomes else None,
        "tasks": len(outcomes),
        "passed": passed,
        "standardCompressions": sum(o.compressions for o in outcomes),
        "failed": [
            {"task": o.name, "status": o.status, "compressions": o.compressions, "written": o.written}
            for o in outcomes
            if not o.success
        ],
    }


# -- token counts -------------------------------------------------------------------------

FAMILY_MODELS: tuple[str, ...] = ("gpt-4o", "gpt-4", "claude-sonnet-4-5", "llama-3.1-8b", "mistral-large")
"""One model of each family the report names."""


def _sample_transcript(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You deploy services. " + _filler(rng, 600)},
        {"role": "user", "content": "Deploy the orders service to staging and report its port."},
    ]
    for i, task in enumerate(TASKS):
        args = f'{{"command": "cat {task.source}"}}'
        call = {"id": f"c{i}", "type": "function", "function": {"name": "run_command", "arguments": args}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        text = task.text.format(value=task.value) + "\n" + _filler(rng, rng.randrange(200, 1_500))
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": text})
        messages.append({"role": "assistant", "content": f"Noted the {task.name}; ünïcode ✓ 日本語 too."})
    return messages


def token_count_accuracy(models: Sequence[str] = FAMILY_MODELS, *, seed: int = 1) -> dict[str, Any]:
    """Per model family: our running count against the model's tokenizer, where it ships."""
    from tether.context.evaluation import window_from_messages
    from tether.context.tokens import model_spec

    messages = _sample_transcript(seed)
    families: dict[str, Any] = {}
    for model in models:
        spec = model_spec(model)
        if not spec.exact:
            families[spec.family] = {
                "model": model,
                "accuracy": None,
                "note": f"no offline tokenizer (documented: {spec.accuracy})",
            }
            continue
        window = window_from_messages(messages, model=model)
        ours, reference = window.usage().raw_tokens, window.count_exact()
        families[spec.family] = {
            "model": model,
            "ours": ours,
            "reference": reference,
            "accuracy": 1 - abs(ours - reference) / reference if reference else None,
        }
    measured = [f["accuracy"] for f in families.values() if f["accuracy"] is not None]
    return {"rate": min(measured) if measured else None, "families": families}


# -- rollback -----------------------------------------------------------------------------

_INJECTED: tuple[tuple[str, Callable[[str], BaseException]], ...] = (
    ("data", FileNotFoundError),
    ("validation", ValueError),
    ("permission", PermissionError),
    ("system", RuntimeError),
    ("transient", TimeoutError),
)


@dataclass(slots=True)
class _Trial:
    steps: int
    failing: int
    kind: str
    compensate: bool = True
    transient_attempts: list[int] = field(default_factory=list)


def _workflow(trial: _Trial, root: Path) -> Any:
    from tether.runtime import RetryPolicy, Step, StepContext, Workflow

    make = dict(_INJECTED)[trial.kind]

    def step_fn(k: int) -> Callable[[StepContext], dict[str, Any]]:
        def run(sc: StepContext) -> dict[str, Any]:
            created = root / f"created-{k}.txt"
            shared = root / "shared.txt"
            old = shared.read_text(encoding="utf-8")
            created.write_text(f"made by step {k}", encoding="utf-8")
            if trial.compensate:
                sc.compensate(f"remove {created.name}", lambda: created.unlink(missing_ok=True))
            if f"step {k}\n" not in old:  # idempotent, as steps are by default: a retry adds nothing twice
                shared.write_text(old + f"step {k}\n", encoding="utf-8")
            if trial.compensate:
                sc.compensate(
                    "restore shared.txt",
                    lambda: shared.write_text(old, encoding="utf-8"),
                    kind="restore_modified",
                )
            if k == trial.failing:
                sc.state.merge({"partial": f"half of step {k}"})  # a write the rollback must drop
                if trial.kind != "transient" or len(trial.transient_attempts) < 1:
                    trial.transient_attempts.append(k)
                    raise make(f"injected {trial.kind} failure in step {k}")
            return {f"s{k}_output": f"done {k}"}

        return run

    retry = RetryPolicy(attempts=3, initial=0.001, maximum=0.002, jitter=0.0)
    steps = [Step(id=f"s{k}", fn=step_fn(k), retry=retry) for k in range(1, trial.steps + 1)]
    return Workflow.plan(steps, name="acceptance-rollback")


def _files(root: Path, files: Mapping[str, str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")


def _created(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob("created-*.txt"))


async def _rollback_trial(trial: _Trial, root: Path, store: Any, run_id: str) -> tuple[bool, str]:
    from tether.runtime import Runner

    _files(root, {"shared.txt": ""})
    result = await Runner(_workflow(trial, root), store).start(run_id)
    shared = _read(root / "shared.txt")
    created = _created(root)
    state = (await store.load(run_id)).state
    outputs = sorted(k for k in state if re.fullmatch(r"s\d+_output", k))
    if trial.kind == "transient":
        everything = [f"created-{k}.txt" for k in range(1, trial.steps + 1)]
        ok = (
            str(result.status) == "COMPLETED"
            and created == sorted(everything)
            and shared == "".join(f"step {k}\n" for k in range(1, trial.steps + 1))
        )
        return ok, "" if ok else f"transient: status {result.status}, files {created}"
    before = range(1, trial.failing)
    problems = []
    if str(result.status) == "COMPLETED":
        problems.append("completed despite the failure")
    if created != sorted(f"created-{k}.txt" for k in before):
        problems.append(f"files {created}")
    if shared != "".join(f"step {k}\n" for k in before):
        problems.append("shared.txt not restored")
    if outputs != sorted(f"s{k}_output" for k in before) or "partial" in state:
        problems.append(f"state keys {outputs}")
    report = result.report
    if report is None or len(report.rolled_back) < 2:
        problems.append("no report of the rollback")
    return not problems, "; ".join(problems)


async def rollback_success(
    trials: int = 40, *, seed: int = 1, store_url: str | None = None, compensate: bool = True
) -> dict[str, Any]:
    """Seeded workflows failing at a random step with each failure class in turn.

    ``compensate=False``: the steps register no compensation, so no rollback can undo
    their files (how the tests check that this measurement sees a failed rollback).
    """
    from tether.stores import open_store

    rng = random.Random(seed)
    failures: list[dict[str, Any]] = []
    passed = 0
    with tempfile.TemporaryDirectory(prefix="tether-rollback-") as tmp:
        async with open_store(store_url or f"sqlite:///{tmp}/rollback.db") as store:
            for i in range(trials):
                steps = rng.randint(2, 6)
                kind = _INJECTED[i % len(_INJECTED)][0]
                trial = _Trial(steps=steps, failing=rng.randint(1, steps), kind=kind, compensate=compensate)
                ok, why = await _rollback_trial(
                    trial, Path(tmp) / f"t{i}", store, f"acceptance-rollback-{seed}-{i}"
                )
                passed += ok
                if not ok:
                    failures.append({"trial": i, "kind": trial.kind, "step": trial.failing, "problem": why})
    return {
        "rate": passed / trials if trials else None,
        "trials": trials,
        "passed": passed,
        "failed": failures,
    }


# -- orchestrator -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Project:
    name: str
    bugs: int
    fixable: int
    """How many of the bugs DEV knows how to fix (fewer than ``bugs``: the task cannot be done)."""
    hidden: bool = False
    """An issue only FINISH_REVIEW sees (DEV fixes it once told)."""


PROJECTS: tuple[_Project, ...] = (
    _Project("one-bug", 1, 1),
    _Project("two-bugs", 2, 2),
    _Project("three-bugs", 3, 3),
    _Project("hidden-issue", 1, 1, hidden=True),
    _Project("clean", 0, 0),
    _Project("unfixable", 2, 1),
    _Project("unfixable-hidden", 1, 1, hidden=True),
    _Project("four-bugs", 4, 4),
)
"""Recorded orchestrator tasks: whether each can be finished is known in advance."""


def _roles(project: _Project) -> dict[str, Any]:
    from tether.orchestrator import RoleOutput, RoleRequest, ScriptedRunner

    fixes = [f"BUG-{k}" for k in range(1, project.fixable + 1)]
    hidden_fixable = project.hidden and project.name != "unfixable-hidden"

    def report(iteration: int, ok: bool, blockers: str) -> str:
        return f"iteration: {iteration}\n结论：{'PASS' if ok else 'FAIL'}\n阻塞：{'无' if ok else blockers}\n"

    def code(request: RoleRequest) -> str:
        return (request.workdir / "app.txt").read_text(encoding="utf-8")

    def test(request: RoleRequest) -> RoleOutput:
        bugs = re.findall(r"BUG-\d+", code(request))
        return RoleOutput(
            report=report(request.iteration, not bugs, ", ".join(bugs)), exit_code=1 if bugs else 0
        )

    def dev(request: RoleRequest) -> RoleOutput:
        path = request.workdir / "app.txt"
        text = code(request)
        for bug in fixes:
            if bug in text:
                path.write_text(text.replace(bug, "fixed", 1), encoding="utf-8")
                return RoleOutput(
                    report=report(request.iteration, True, "") + f"\n## 关键变更\n- fixed {bug}\n"
                )
        if hidden_fixable and "ISSUE-P0" in text:
            path.write_text(text.replace("ISSUE-P0", "resolved", 1), encoding="utf-8")
            return RoleOutput(
                report=report(request.iteration, True, "") + "\n## 关键变更\n- resolved the P0\n"
            )
        return RoleOutput(report=report(request.iteration, True, "") + "\n## 关键变更\n- nothing I can fix\n")

    def review(request: RoleRequest) -> RoleOutput:
        return RoleOutput(report=report(request.iteration, True, ""))

    def finish_review(request: RoleRequest) -> RoleOutput:
        text = code(request)
        ok = "BUG-" not in text and "ISSUE-P0" not in text
        return RoleOutput(report=report(request.iteration, ok, "P0: ISSUE-P0 is still open"))

    runner = ScriptedRunner({"TEST": test, "DEV": dev, "REVIEW": review, "FINISH_REVIEW": finish_review})
    return {"TEST": runner, "DEV": runner, "REVIEW": runner, "FINISH_REVIEW": runner}


class _CountingMain:
    """The rule-based MAIN, counting its decisions."""

    def __init__(self) -> None:
        from tether.orchestrator import ScriptedMain
        from tether.orchestrator.demo import rule_main

        self.inner = ScriptedMain(rule_main)
        self.calls = 0

    async def decide(self, request: Any) -> Any:
        self.calls += 1
        return await self.inner.decide(request)


async def _orchestrate(
    project: _Project, root: Path, store: Any, run_id: str, *, subloop: bool
) -> tuple[str, int, bool]:
    from tether.orchestrator import Orchestrator
    from tether.orchestrator.settings import config_from

    lines = [f"line {k}: BUG-{k}" for k in range(1, project.bugs + 1)] + ["ISSUE-P0"] * project.hidden
    _files(root, {"app.txt": "\n".join(["app", *lines]) + "\n"})
    main = _CountingMain()
    config = config_from({}, (), subloop=subloop, max_iterations=14, stall_rounds=4)
    orch = Orchestrator(root, store, main=main, runners=_roles(project), config=config)
    result = await orch.start(run_id, f"Fix every bug of {project.name}.")
    text = _read(root / "app.txt") or ""
    done = "BUG-" not in text and "ISSUE-P0" not in text
    return str(result.status.value), main.calls, done


async def orchestrator_accuracy(
    projects: Sequence[_Project] = PROJECTS, *, seed: int = 1, store_url: str | None = None
) -> dict[str, Any]:
    """FINISH accuracy over the recorded tasks (with the sub-loop) and MAIN calls saved."""
    from tether.stores import open_store

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tether-orch-") as tmp:
        async with open_store(store_url or f"sqlite:///{tmp}/orch.db") as store:
            for i, project in enumerate(projects):
                row: dict[str, Any] = {"task": project.name}
                for subloop in (True, False):
                    tag = "with" if subloop else "without"
                    status, calls, done = await _orchestrate(
                        project,
                        Path(tmp) / f"{i}-{tag}",
                        store,
                        f"acceptance-orch-{seed}-{i}-{tag}",
                        subloop=subloop,
                    )
                    row[tag] = {"status": status, "mainCalls": calls, "done": done}
                rows.append(row)
    accurate = sum((r["with"]["status"] == "COMPLETED") == r["with"]["done"] for r in rows)
    accurate_off = sum((r["without"]["status"] == "COMPLETED") == r["without"]["done"] for r in rows)
    saved = [r["without"]["mainCalls"] - r["with"]["mainCalls"] for r in rows]
    return {
        "finishAccuracy": accurate / len(rows) if rows else None,
        "finishAccuracyWithoutSubloop": accurate_off / len(rows) if rows else None,
        "tasks": len(rows),
        "mainCallsWith": sum(r["with"]["mainCalls"] for r in rows),
        "mainCallsWithout": sum(r["without"]["mainCalls"] for r in rows),
        "mainCallsSaved": sum(saved),
        "perTask": rows,
    }


async def acceptance_report(
    *,
    seed: int = 1,
    trials: int = 40,
    tasks: Sequence[Task] = TASKS,
    projects: Sequence[_Project] = PROJECTS,
) -> dict[str, Any]:
    """Every metric, each with its goal and whether it is met."""
    tokens = token_count_accuracy(seed=seed)
    suite = await task_success(tasks, seed=seed)
    rollback = await rollback_success(trials, seed=seed)
    orch = await orchestrator_accuracy(projects, seed=seed)
    values = {
        "tokenCountAccuracy": tokens["rate"],
        "taskSuccessAfterStandardCompression": suite["rate"],
        "rollbackSuccess": rollback["rate"],
        "finishAccuracy": orch["finishAccuracy"],
    }
    goals = {}
    for name, (op, goal) in GOALS.items():
        value = values[name]
        met = value is not None and (value > goal if op == ">" else value >= goal)
        goals[name] = {"value": value, "goal": f"{op} {goal:.0%}", "met": met}
    goals["mainCallsSavedBySubloop"] = {
        "value": orch["mainCallsSaved"],
        "goal": "> 0",
        "met": orch["mainCallsSaved"] > 0,
    }
    return {"goals": goals, "tokens": tokens, "tasks": suite, "rollback": rollback, "orchestrator": orch}
