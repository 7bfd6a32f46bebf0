"""The public surface and the import weight of the package."""

from __future__ import annotations

import subprocess
import sys

import tether


def test_public_names_are_pinned():
    """Changing the top-level API is a deliberate act: update this list with it."""
    assert sorted(tether.__all__) == sorted(
        [
            "CheckpointCorrupt",
            "Checkpoint",
            "CheckpointStore",
            "CompactionPolicy",
            "ConfigError",
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
            "StoreError",
            "StoreUnavailable",
            "TetherError",
            "VersionConflict",
            "__version__",
            "open_store",
            "upsert_by",
        ]
    )
    for name in tether.__all__:
        assert hasattr(tether, name), name


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
