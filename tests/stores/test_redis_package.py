"""The Redis store's package: its scripts ship with it, and the tiered store uses only its
public cache API (no server needed)."""

from __future__ import annotations

import ast
import fnmatch
import tomllib
from importlib.resources import files
from pathlib import Path

from tether.stores.redis import RedisCache, RedisStore
from tether.stores.redis.scripts import Scripts, source

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "tether" / "stores" / "redis"


def test_every_script_is_a_lua_file_the_wheel_ships():
    """A .lua file left out of package-data would install a store that cannot start."""
    lua = sorted(p.name for p in PACKAGE.glob("*.lua"))
    assert sorted(f"{n}.lua" for n in Scripts.NAMES) == sorted(set(lua) - {"prelude.lua"})
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "tether"
    ]
    for name in lua:
        rel = f"stores/redis/{name}"
        assert any(fnmatch.fnmatch(rel, pat) for pat in patterns), f"{rel} is not in package-data"
        assert files("tether.stores.redis").joinpath(name).is_file()


def test_scripts_get_the_prelude_they_use():
    """A script gets the shared helpers exactly when it calls one (the lean ones stay lean)."""
    helpers = ("read_run(", "fence(", "drop(", "set_ttl(", "server_epoch(")
    for name in Scripts.NAMES:
        body = (PACKAGE / f"{name}.lua").read_text()
        text = source(name)
        assert ("local function read_run" in text) == any(h in body for h in helpers), name
        assert "GEN_TTL_MS" not in text, name


def _private_uses(path: Path, names: set[str]) -> list[str]:
    """``x._name`` accesses in ``path`` where ``x`` is one of ``names``' attributes."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            if isinstance(base, ast.Attribute) and base.attr in names:
                found.append(f"{base.attr}.{node.attr} (line {node.lineno})")
            if isinstance(base, ast.Name) and base.id in names:
                found.append(f"{base.id}.{node.attr} (line {node.lineno})")
    return found


def test_the_tiered_store_uses_only_the_public_cache_api():
    tiered = ROOT / "src" / "tether" / "stores" / "tiered.py"
    assert _private_uses(tiered, {"redis", "cache"}) == []
    tree = ast.parse(tiered.read_text())
    imported = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tether.stores.redis")
        for alias in node.names
    ]
    assert imported and all(not name.startswith("_") for name in imported)


async def test_the_cache_is_built_on_a_store_and_never_indexes_by_default():
    import redis.asyncio as aioredis

    client = aioredis.Redis()
    store = RedisStore(client, prefix="t:")
    cache = RedisCache(store)
    assert cache.store is store and cache.indexed is False and store.indexed is True
    await client.aclose()
