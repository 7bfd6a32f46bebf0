"""Scripted agent runs for stuck detection: healthy ones (that must never be flagged) and
stuck ones (each pattern), as lists of actions with real shell commands. Used by
``tests/agent/test_stuck.py`` and ``benchmarks/bench_stuck.py``."""

from __future__ import annotations

import random
import sys
from typing import Any

PY = sys.executable


def execute(command: str, why: str = "next step") -> dict[str, Any]:
    return {"action": "execute", "command": command, "reasoning": why}


def done(message: str = "done") -> dict[str, Any]:
    return {"action": "done", "message": message}


def _py(code: str) -> str:
    return f'{PY} -B -c "{code}"'


def healthy_run(seed: int, length: int = 16) -> list[dict[str, Any]]:
    """A run that makes progress: varied commands, a failure fixed, a service polled until
    it answers (up to twice the same failure), an edit/test loop whose errors change, and
    an error seen twice after different fixes before the third fix works."""
    rng = random.Random(seed)
    steps: list[dict[str, Any]] = []
    blocks = ["explore", "fix", "poll", "edit_test", "same_error_twice", "files"]
    k = 0
    while len(steps) < length - 1:
        block = rng.choice(blocks)
        k += 1
        if block == "explore":
            steps += [execute(f"ls -a; echo round {k}"), execute(f"cat /etc/hostname; echo seen {k}")]
        elif block == "fix":
            steps += [
                execute(f"cat cfg_{k}.ini"),
                execute(f"printf 'port={8000 + k}\\n' > cfg_{k}.ini"),
                execute(f"cat cfg_{k}.ini"),
            ]
        elif block == "poll":
            # a service that answers on the third poll: two identical failures, then success
            steps += [
                execute(
                    f"echo 1 >> poll_{k}; test $(wc -l < poll_{k}) -ge 3 && echo up || (echo down >&2; exit 7)"
                )
                for _ in range(3)
            ]
        elif block == "edit_test":
            for i in range(3):
                steps.append(execute(f"echo 'x = {i}' > mod_{k}.py"))
                code = f"import mod_{k}; assert mod_{k}.x == 2, 'x is ' + str(mod_{k}.x)"
                steps.append(execute(_py(code)))
        elif block == "same_error_twice":
            steps += [
                execute(f"test -f ready_{k} || (echo 'not ready: ready_{k} missing' >&2; exit 3)"),
                execute(f"mkdir -p dir_{k}"),
                execute(f"test -f ready_{k} || (echo 'not ready: ready_{k} missing' >&2; exit 3)"),
                execute(f"touch ready_{k}"),
                execute(f"test -f ready_{k} && echo ready"),
            ]
        else:
            n = rng.randint(2, 4)
            steps += [execute(f"echo 'line {i} of {k}' > note_{k}_{i}.txt") for i in range(n)]
    return [*steps[: length - 1], done(f"healthy run {seed} finished")]


def stuck_run(pattern: str, *, prefix: int = 2, length: int = 16) -> list[dict[str, Any]]:
    """A run that starts healthy for ``prefix`` iterations, then gets stuck in ``pattern``
    for the rest of its ``length`` replies."""
    steps = [execute(f"echo warm-up {i}") for i in range(prefix)]
    rest = length - prefix
    if pattern == "repeat":
        loop = [execute("cat missing.conf")]
    elif pattern == "cycle2":
        loop = [execute("cat missing.conf"), execute("ls missing-dir")]
    elif pattern == "cycle3":
        loop = [execute("cat a.conf"), execute("cat b.conf"), execute("cat c.conf")]
    elif pattern == "same_error":
        failing = _py("import yaml_missing_module")
        loop = []
        for i in range(rest):
            loop += [execute(f"echo 'attempted fix {i}' >> fixes.log"), execute(failing)]
        return [*steps, *loop][:length]
    elif pattern == "no_progress":
        loop = [execute("echo a"), execute("echo b"), execute("echo c"), execute("echo d")]
    else:
        raise ValueError(f"unknown pattern {pattern!r}")
    body = (loop * (rest // len(loop) + 1))[:rest]
    return [*steps, *body]
