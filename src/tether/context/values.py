"""Seeded values for generated transcripts: unique ids and ports, hex ids, log noise.

The planted agent transcripts (:mod:`tether.context.planted`) and the generated sessions
(:mod:`tether.context.sessions`) draw every value from one of these. A uid or a port is
never handed out twice, and uids use letters that are not hex digits, so a planted value
occurs nowhere else in its transcript (not even inside a digest): "kept" can be a
substring check. The same seed gives the same values on every machine.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

__all__ = ["NOISE", "WORDS", "PlantedValues"]

NOISE: tuple[str, ...] = (
    "Get:{n} http://deb.debian.org/debian bookworm/main amd64 lib{w} amd64 {v} [{k} kB]",
    "npm WARN deprecated {w}@{v}: this package is no longer supported",
    " => [build {n}/{k}] RUN pip install --no-cache-dir -r requirements.txt   {s}s",
    "tests/test_{w}.py::test_{w}_{n} PASSED                          [{p}%]",
    "{d} 12:{n:02d}:{k:02d} host app[{k}]: INFO request path=/api/{w} status=200 ms={s}",
    "Collecting {w}=={v}",
    "  Downloading {w}-{v}-py3-none-any.whl ({k} kB)",
    "Setting up lib{w} ({v}) ...",
    "Requirement already satisfied: {w}>={v} in /opt/app/venv/lib/python3.11/site-packages",
    "#{n} DONE {s}s",
)
"""Log lines with no fact in them (apt, npm, pip, docker build, pytest, an access log)."""
WORDS: tuple[str, ...] = (
    "alpha", "cache", "router", "ledger", "orders", "billing", "queue", "auth",
    "search", "users", "assets", "metrics", "gateway", "session", "pool", "shard",
)  # fmt: skip
_LETTERS = "ghjkmnpqrstvwxyz"  # not hex: a uid never occurs inside a digest


class PlantedValues:
    """Unique values from one seeded ``random.Random`` (see the module docstring)."""

    def __init__(
        self,
        rng: random.Random,
        *,
        templates: Sequence[str] = NOISE,
        words: Sequence[str] = WORDS,
        uid_length: int = 4,
    ) -> None:
        self.rng = rng
        self.templates = tuple(templates)
        self.words = tuple(words)
        self.uid_length = uid_length
        """Letters and digits alternate: ``k4m2`` (4), ``k4m2q`` (5)."""
        self.used: set[str] = set()

    def uid(self) -> str:
        r = self.rng
        while True:
            value = "".join(
                r.choice(_LETTERS) if k % 2 == 0 else str(r.randrange(10)) for k in range(self.uid_length)
            )
            if value not in self.used:
                self.used.add(value)
                return value

    def port(self) -> str:
        while True:
            value = str(self.rng.randrange(20_000, 29_999))
            if value not in self.used:
                self.used.add(value)
                return value

    def hexid(self, n: int) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(n))

    def noise(self, lines: int) -> list[str]:
        r = self.rng
        return [
            r.choice(self.templates).format(
                n=r.randrange(1, 60),
                k=r.randrange(10, 999),
                s=round(r.uniform(0.1, 9.9), 1),
                p=r.randrange(1, 100),
                v=f"{r.randrange(1, 9)}.{r.randrange(0, 20)}.{r.randrange(0, 9)}",
                w=r.choice(self.words),
                d=r.choice(("Mar", "Apr", "May")),
            )
            for _ in range(lines)
        ]
