"""Reads tests/tools/data/policy_corpus.txt (shared by the corpus tests and the policy benchmark)."""

from __future__ import annotations

from pathlib import Path

CORPUS = Path(__file__).parent / "data" / "policy_corpus.txt"
WORKDIR = "/srv/app"


def load(path: Path = CORPUS) -> dict[str, list[tuple[str, str]]]:
    """``{"dangerous": [(kind, line), ...], "benign": [...]}``."""
    sets: dict[str, list[tuple[str, str]]] = {"dangerous": [], "benign": []}
    where: tuple[str, str] | None = None
    for raw in path.read_text(encoding="utf-8").splitlines():
        if raw.startswith("## "):
            group, kind = raw[3:].split()
            where = (group, kind)
        elif raw.strip() and not raw.startswith("#"):
            assert where is not None, f"{path}: a line before the first '## set kind' header"
            sets[where[0]].append((where[1], raw))
    return sets
