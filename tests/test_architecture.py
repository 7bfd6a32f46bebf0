"""The storage engine and the agent loop stay small enough to read: size limits per module,
no private names imported across modules of ``state/`` and ``stores/``, and an agent loop
whose parameters are typed. The import layers themselves are checked by ``lint-imports``
(``scripts/check``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tether"


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_store_modules_stay_under_their_size_limits():
    sizes = {p.relative_to(SRC).as_posix(): _lines(p) for p in (SRC / "stores").rglob("*.py")}
    assert sizes["stores/base.py"] <= 400, "stores/base.py is the store's one class: keep it at 400 lines"
    over = {name: n for name, n in sizes.items() if n > 600}
    assert not over, f"split these store modules (600 lines at most): {over}"


def _private_imports(root: Path, package: str) -> list[str]:
    found = []
    for path in (root / package).rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tether"):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(
                            f"{path.relative_to(root).as_posix()}: from {node.module} import {alias.name}"
                        )
    return found


@pytest.mark.parametrize("package", ["state", "stores"])
def test_no_private_name_is_imported_across_modules(package: str):
    assert _private_imports(SRC, package) == []


def test_the_agent_loop_is_short_and_its_parameters_are_typed():
    path = SRC / "agent" / "loop.py"
    assert _lines(path) <= 300
    untyped = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                if arg.arg in ("self", "cls"):
                    continue
                if arg.annotation is None or ast.unparse(arg.annotation) == "Any":
                    untyped.append(f"{node.name}({arg.arg})")
    assert untyped == []


def test_the_checks_see_a_violation(tmp_path: Path):
    """The scanner above finds what it looks for (a private import planted in a copy)."""
    fake = tmp_path / "stores"
    fake.mkdir()
    (fake / "a.py").write_text("from tether.stores.memory import _Hidden\nfrom tether.state import __all__\n")
    assert _private_imports(tmp_path, "stores") == ["stores/a.py: from tether.stores.memory import _Hidden"]
