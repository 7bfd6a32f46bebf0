"""The public surface and the import weight of the package."""

from __future__ import annotations

import subprocess
import sys

import tether


def test_public_names_are_pinned():
    """Changing the top-level API is a deliberate act: update this list with it."""
    assert sorted(tether.__all__) == sorted(
        [
            "AgentLoop",
            "CheckpointCorrupt",
            "Checkpoint",
            "CheckpointStore",
            "CompactionPolicy",
            "ConfigError",
            "ContextWindow",
            "DecryptionError",
            "ExecutionContext",
            "ExecutionContextSnapshot",
            "ExpiryPolicy",
            "InvalidStateValue",
            "ReducerRegistry",
            "RunInProgress",
            "RunNotFound",
            "RunNotPaused",
            "RunStatus",
            "Runner",
            "ScriptedModel",
            "Step",
            "StoreError",
            "StoreUnavailable",
            "TetherError",
            "VersionConflict",
            "Workflow",
            "__version__",
            "open_store",
            "upsert_by",
        ]
    )
    for name in tether.__all__:
        assert hasattr(tether, name), name


def test_the_everyday_names_load_on_first_use():
    """``import tether`` does not import the runtime, the agent or pydantic; the first
    ``tether.Runner`` (or ``from tether import AgentLoop``) does, and gives the real class."""
    code = (
        "import sys, tether; "
        "before = sorted(m for m in ('tether.runtime', 'tether.agent', 'tether.models', 'pydantic') "
        "if m in sys.modules); "
        "from tether import AgentLoop, ContextWindow, Runner, ScriptedModel, Step, Workflow; "
        "from tether.runtime import Runner as R; "
        "print(before, tether.Runner is R, 'tether.agent.loop' in sys.modules, 'Runner' in dir(tether))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] True True True", out.stderr
    try:
        tether.NoSuchName  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchName" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_core_import_loads_no_driver_or_tokenizer():
    """Backends' drivers and tiktoken are imported only when used."""
    code = (
        "import sys, tether, tether.stores, tether.runtime, tether.context; "
        "heavy = {'psycopg', 'redis', 'asyncmy', 'tiktoken', 'cryptography', 'zstandard', 'typer', 'rich'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_missing_driver_is_a_config_error_with_the_fix(monkeypatch):
    import builtins

    from tether.errors import ConfigError
    from tether.stores import create_store

    real_import = builtins.__import__

    def no_psycopg(name, *args, **kwargs):
        if name == "psycopg" or name.startswith("psycopg."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_psycopg)
    try:
        create_store("postgresql://127.0.0.1/test")
    except ConfigError as exc:
        assert "pip install 'tether[postgres]'" in str(exc)
    else:
        raise AssertionError("expected ConfigError")
