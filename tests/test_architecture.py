"""The storage engine and the agent loop stay small enough to read: size limits per module,
no private names imported across modules of ``state/`` and ``stores/``, and an agent loop
whose parameters are typed. Modules keep to their own objects: no module of ``src/tether``
writes another's private attributes, and a store backend is subclassed only in its own
module (its variants are options of its public constructor). The import layers themselves are checked by ``lint-imports``
(``scripts/check``)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tether"


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_store_modules_stay_under_their_size_limits():
    sizes = {p.relative_to(SRC).as_posix(): _lines(p) for p in (SRC / "stores").rglob("*.py")}
    assert sizes["stores/base.py"] <= 430, "stores/base.py is the store's one class: keep it near 400 lines"
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


# == modules keep to their own objects ================================================
@functools.cache
def _modules() -> list[tuple[str, ast.Module]]:
    root = SRC.parent
    return [
        (p.relative_to(root).as_posix(), ast.parse(p.read_text(), str(p))) for p in sorted(SRC.rglob("*.py"))
    ]


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


SHARED_BASES = {"CheckpointStore", "Backend", "SqlBackend", "SqlStore"}
"""The store and the backend bases, written to be derived from (by every backend module)."""

VARIANTS = {("tether/stores/memory_cached.py", "MemoryBackend")}
"""A backend's variant kept in a module of its own beside it in ``stores/``: the memory
backend plus a read cache of each run's latest checkpoint (``memory://?cache=1``)."""


def foreign_subclasses(path: str, tree: ast.Module, backends: dict[str, str]) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for base in node.bases:
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
            home = backends.get(name or "")
            if home is None or home == path or (path, name) in VARIANTS:
                continue
            if name in SHARED_BASES and path.startswith("tether/stores/"):
                continue
            found.append(f"{path}:{node.lineno} {node.name} subclasses {name} of {home}")
    return found


def test_no_module_writes_another_modules_private_attributes() -> None:
    """A module sets only its own objects' private attributes: another module's variant
    is an argument of its public constructor."""
    found = [w for path, tree in _modules() for w in private_writes(path, tree)]
    assert not found, "add a public constructor argument instead:\n" + "\n".join(found)


def test_store_backends_are_subclassed_only_in_their_own_module() -> None:
    """A backend's variants (its blocking twin, a cached copy) are options of its own
    constructor, not subclasses made elsewhere; only the shared bases are derived from."""
    backends = _backends()
    found = [s for path, tree in _modules() for s in foreign_subclasses(path, tree, backends)]
    assert not found, "give the backend a constructor option instead:\n" + "\n".join(found)


def test_the_boundary_checks_see_a_violation() -> None:
    """Both rules catch what they forbid, in a module planted outside the backends'."""
    source = (
        "from tether.stores.sqlite import SqliteBackend\n"
        "from tether.stores.redis.store import RedisBackend\n"
        "class Twin(SqliteBackend):\n"
        "    def __init__(self):\n"
        "        self._lock = None\n"
        "def make(url):\n"
        "    backend = RedisBackend.from_url(url)\n"
        "    backend._owns_client = True\n"
        "    setattr(backend, '_conn', None)\n"
        "    return backend\n"
    )
    tree = ast.parse(source)
    path = "tether/stores/planted.py"
    writes = private_writes(path, tree)
    assert writes == [f"{path}:8 writes ._owns_client", f"{path}:9 writes ._conn"]
    assert foreign_subclasses(path, tree, _backends()) == [
        f"{path}:3 Twin subclasses SqliteBackend of tether/stores/sqlite.py"
    ]
