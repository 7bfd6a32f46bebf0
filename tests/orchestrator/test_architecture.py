"""The orchestrator's modules import one way: the engine calls the stages, never back."""

from __future__ import annotations

import ast
from pathlib import Path

import tether.orchestrator

PACKAGE = Path(tether.orchestrator.__file__).parent
PREFIX = "tether.orchestrator"
ABOVE_THE_ENGINE = {"__init__", "engine", "settings", "demo"}
"""The engine and what builds on it; every other module is below the engine."""


def imports() -> dict[str, set[str]]:
    """module -> orchestrator modules it imports anywhere (lazy and TYPE_CHECKING included)."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.glob("*.py"):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PREFIX):
                if node.module == PREFIX:  # from tether.orchestrator import stages
                    found |= {a.name for a in node.names if (PACKAGE / f"{a.name}.py").exists()}
                else:
                    found.add(node.module.removeprefix(PREFIX + ".").split(".")[0])
            elif isinstance(node, ast.Import):
                found |= {
                    a.name.removeprefix(PREFIX + ".").split(".")[0]
                    for a in node.names
                    if a.name.startswith(PREFIX + ".")
                }
        graph[path.stem] = found - {path.stem}
    return graph


def test_no_stage_module_imports_the_engine():
    """Stages, effects and the rest take what they need as arguments, not the Orchestrator."""
    graph = imports()
    assert {"stages", "decisions", "stage", "effects"} <= set(graph)
    offenders = {m for m, deps in graph.items() if m not in ABOVE_THE_ENGINE and deps & ABOVE_THE_ENGINE}
    assert offenders == set()


def test_the_orchestrator_package_has_no_import_cycle():
    """A depth-first walk of the module graph finds no module on its own import path."""
    graph = imports()
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph.get(module, ())):
            assert state.get(dep) != 1, " -> ".join([*path, module, dep])
            if dep not in state:
                visit(dep, [*path, module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
