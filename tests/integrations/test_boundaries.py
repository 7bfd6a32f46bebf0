"""Modules keep to their own objects: no module writes another's private attributes, and a
store backend is subclassed only in its own module (a backend's variants are options of
its public constructor). Checked on the source, for every module of ``src/tether``."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

KNOWN = {
    # The blocking twins of the SQLite, PostgreSQL and Redis backends are built from
    # outside them. The backend redesign (each backend offering its synchronous variant
    # through its own constructor) removes this exception; nothing else may join it.
    "tether/stores/blocking.py",
}


@functools.cache
def _modules() -> list[tuple[str, ast.Module]]:
    return [(str(p.relative_to(SRC)), ast.parse(p.read_text(), str(p))) for p in sorted(SRC.rglob("*.py"))]


def _tether_imports(tree: ast.Module) -> set[str]:
    return {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tether")
        for alias in node.names
    }


def _own_attributes(tree: ast.Module) -> set[str]:
    """Private attribute names this module's own classes set on ``self`` or ``cls`` (or
    list in ``__slots__``): writing them on another instance of such a class stays in the
    module. A class derived from another tether module's class does not count (its
    attributes may be its base's)."""
    foreign = _tether_imports(tree)
    names: set[str] = set()
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        if any(isinstance(b, ast.Name) and b.id in foreign for b in cls.bases):
            continue
        for node in ast.walk(cls):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                names.add(node.attr)
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
            ):
                names |= {
                    e.value
                    for e in ast.walk(node.value)
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)
                }
    return names


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_writes(path: str, tree: ast.Module) -> list[str]:
    own = _own_attributes(tree)
    found = []
    for node in ast.walk(tree):
        target: tuple[str, int] | None = None
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                target = (node.attr, node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            target = (node.args[1].value, node.lineno)
        if target is not None and _private(target[0]) and target[0] not in own:
            found.append(f"{path}:{target[1]} writes .{target[0]}")
    return found


def _backends() -> dict[str, str]:
    """Store backend classes (a class under ``tether/stores`` named ``*Backend`` or ``*Store``)
    -> the module defining them."""
    out: dict[str, str] = {}
    for path, tree in _modules():
        if path.startswith("tether/stores/"):
            for node in tree.body:
                if isinstance(node, ast.ClassDef) and node.name.endswith(("Backend", "Store")):
                    out.setdefault(node.name, path)
    return out


def _backend_module(path: str) -> bool:
    """The store backends' own modules, where a backend may build on another (a cached
    variant, a shared SQL base); the blocking toolkit is not one of them."""
    return path.startswith("tether/stores/") and path != "tether/stores/blocking.py"


def foreign_subclasses(path: str, tree: ast.Module, backends: dict[str, str]) -> list[str]:
    if _backend_module(path):
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for base in node.bases:
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
            home = backends.get(name or "")
            if home is not None and home != path:
                found.append(f"{path}:{node.lineno} {node.name} subclasses {name} of {home}")
    return found


def test_no_module_writes_another_modules_private_attributes() -> None:
    found = [w for path, tree in _modules() if path not in KNOWN for w in private_writes(path, tree)]
    assert not found, "add a public constructor argument instead:\n" + "\n".join(found)


def test_store_backends_are_subclassed_only_in_their_own_module() -> None:
    backends = _backends()
    found = [
        s for path, tree in _modules() if path not in KNOWN for s in foreign_subclasses(path, tree, backends)
    ]
    assert not found, "give the backend a constructor option instead:\n" + "\n".join(found)


def test_the_checks_see_the_known_exception() -> None:
    """The rules do catch what they forbid: the blocking twins break both, for now."""
    tree = ast.parse((SRC / "tether/stores/blocking.py").read_text())
    writes = private_writes("tether/stores/blocking.py", tree)
    assert any("._conn_lock" in w for w in writes) and any("._owns_client" in w for w in writes)
    assert foreign_subclasses("tether/stores/blocking.py", tree, _backends())
