"""Synthetic agent transcripts with planted facts, for tests and benchmarks.

A transcript looks like a deployment agent's run: a system prompt, a goal, a TODO list,
tool calls with long log outputs, search results, decisions, errors and reminders. Every
fact worth keeping carries a unique fixed-width marker (``F-00042``), so retention is a
substring check on whatever the compressed prompt renders.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tether.context.items import ContextItem, ItemKind, Layer, new_item

__all__ = ["FactCategory", "PlantedFact", "Transcript", "generate_transcript"]

FactCategory = Literal["system", "goal", "pinned", "todo", "decision", "operation", "query"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PlantedFact:
    marker: str
    """Unique, fixed-width (``F-00042``): never a substring of another marker."""
    category: FactCategory
    item_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Transcript:
    items: tuple[ContextItem, ...]
    facts: tuple[PlantedFact, ...]

    def retention(self, text: str) -> dict[str, tuple[int, int]]:
        """Per category: (facts found in ``text``, facts planted)."""
        found: Counter[str] = Counter()
        total: Counter[str] = Counter()
        for fact in self.facts:
            total[fact.category] += 1
            if fact.marker in text:
                found[fact.category] += 1
        return {cat: (found[cat], total[cat]) for cat in total}

    def must_keep(self) -> tuple[PlantedFact, ...]:
        """Facts no compression may lose: system, goal, pinned, TODO and decisions."""
        return tuple(f for f in self.facts if f.category not in ("operation", "query"))


_COMMANDS = (
    "apt-get install -y nginx",
    "npm ci --omit=dev",
    "docker compose up -d --build",
    "pytest -q tests/",
    "systemctl restart app.service",
    "git pull --ff-only origin main",
    "pip install -r requirements.txt",
    "curl -fsS http://127.0.0.1:8080/health",
    "psql -c 'SELECT count(*) FROM users'",
    "journalctl -u app.service -n 200",
)
_LOG_LINES = (
    "Get:{n} http://deb.debian.org/debian bookworm/main amd64 lib{w} amd64 {v} [{k} kB]",
    "npm WARN deprecated {w}@{v}: this package is no longer supported",
    "added {n} packages, and audited {k} packages in {s}s",
    " => [build {n}/{k}] RUN pip install --no-cache-dir -r requirements.txt   {s}s",
    "tests/test_{w}.py::test_{w}_{n} PASSED                          [{p}%]",
    "{d} 12:{n:02d}:{k:02d} host app[{k}]: INFO request path=/api/{w} status=200 ms={s}",
    "Collecting {w}=={v}",
    "  Downloading {w}-{v}-py3-none-any.whl ({k} kB)",
    "Setting up lib{w} ({v}) ...",
    "warning: {w}.conf line {n}: deprecated directive, using default",
)
_WORDS = (
    "alpha", "cache", "router", "ledger", "orders", "billing", "queue", "auth",
    "search", "users", "assets", "metrics", "gateway", "session", "pool", "shard",
)  # fmt: skip
_TOPICS = (
    "configured nginx upstream on port {p}",
    "database migration {v} applied to schema app",
    "built image registry.local/app:{v}",
    "service answered health check in {s} ms",
    "installed {w} {v} into /opt/app/venv",
    "rotated TLS certificate for {w}.example.internal",
)


class _Gen:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.n = 0
        self.facts: list[PlantedFact] = []
        self.items: list[ContextItem] = []

    def marker(self, category: FactCategory, item_id: str) -> str:
        self.n += 1
        marker = f"F-{self.n:05d}"
        self.facts.append(PlantedFact(marker=marker, category=category, item_id=item_id))
        return marker

    def fill(self, template: str) -> str:
        r = self.rng
        return template.format(
            n=r.randrange(1, 60),
            k=r.randrange(10, 999),
            s=round(r.uniform(0.1, 9.9), 1),
            p=r.randrange(1, 100),
            v=f"{r.randrange(1, 9)}.{r.randrange(0, 20)}.{r.randrange(0, 9)}",
            w=r.choice(_WORDS),
            d=r.choice(("Mar", "Apr", "May")),
        )

    def log(self, lines: int) -> str:
        return "\n".join(self.fill(self.rng.choice(_LOG_LINES)) for _ in range(lines))

    def add(self, kind: ItemKind, content: str, **fields: Any) -> ContextItem:
        n = len(self.items)
        item = new_item(kind, content, id=f"{kind}-{n:04d}", seq=n + 1, **fields)
        self.items.append(item)
        return item


def generate_transcript(
    *,
    seed: int = 0,
    operations: int = 120,
    phases: int = 4,
    log_lines: tuple[int, int] = (8, 40),
    query_every: int = 4,
    decision_every: int = 9,
) -> Transcript:
    """A deterministic transcript; about 330 tokens per operation with the defaults."""
    g = _Gen(seed)
    rng = g.rng
    sys_id = "system-0000"
    g.add(
        "system",
        f"You are a deployment agent. Rule {g.marker('system', sys_id)}: never run destructive "
        "commands (rm -rf, DROP DATABASE) without the user's confirmation. Reply with one "
        "JSON action per turn: execute, step_done, ask_user or failed.",
        pinned=True,
    )
    goal_id = f"goal-{len(g.items):04d}"
    g.add(
        "goal",
        "Deploy the orders service to prod-eu-1 with Docker Compose "
        f"({g.marker('goal', goal_id)}); keep the public API backward compatible.",
    )
    pin_id = f"constraint-{len(g.items):04d}"
    g.add(
        "constraint",
        f"Use the exact-match evaluator only; no LLM evaluation ({g.marker('pinned', pin_id)}).",
        pinned=True,
    )
    per_phase = max(operations // phases, 1)
    for p in range(phases):
        todo_id = f"todo-{len(g.items):04d}"
        status = "in_progress" if p == 0 else "pending"
        g.add(
            "todo",
            f"#{p + 1} {rng.choice(_TOPICS).split(' ')[0]} phase {p + 1} ({g.marker('todo', todo_id)})",
            metadata={"status": status},
            todo_id=f"#{p + 1}",
        )
    for op in range(operations):
        phase = f"phase-{min(op // per_phase, phases - 1) + 1}"
        call_id = f"call-{op:05d}"
        cmd = rng.choice(_COMMANDS)
        g.add(
            "message",
            f"Next I will run `{cmd}` to {g.fill(rng.choice(_TOPICS))}.",
            role="assistant",
            phase=phase,
        )
        g.add(
            "tool_call",
            f"run_command(cmd={cmd!r}, cwd='/srv/orders')",
            tool_call_id=call_id,
            phase=phase,
            metadata={"name": "run_command", "arguments": {"cmd": cmd}},
        )
        result_id = f"tool_result-{len(g.items):04d}"
        marker = g.marker("operation", result_id)
        g.add(
            "tool_result",
            f"exit 0 ({marker}): {g.fill(rng.choice(_TOPICS))}\n" + g.log(rng.randrange(*log_lines)),
            tool_call_id=call_id,
            phase=phase,
            metadata={"artifact_id": f"log-{op:05d}"} if op % 10 == 0 else {},
        )
        if op % query_every == query_every - 1:
            qid = f"query_result-{len(g.items):04d}"
            g.add(
                "query_result",
                f"search results ({g.marker('query', qid)}):\n" + g.log(rng.randrange(10, 30)),
                phase=phase,
            )
        if op % decision_every == decision_every - 1:
            did = f"decision-{len(g.items):04d}"
            g.add(
                "decision",
                f"Use {rng.choice(_WORDS)} {g.fill('{v}')} instead of the default "
                f"({g.marker('decision', did)}); confirmed by the user.",
                phase=phase,
            )
        if op % 13 == 12:
            g.add("error", f"command timed out after 30 s: {cmd}", phase=phase)
        if op % 11 == 10:
            g.add("state", f"page /deploy/{phase} shows {rng.randrange(1, 9)} pending checks")
    g.add("reminder", "Reply with exactly one JSON action.", layer=Layer.INSTANT)
    return Transcript(items=tuple(g.items), facts=tuple(g.facts))


def retention_summary(result: Mapping[str, tuple[int, int]]) -> str:
    return ", ".join(f"{cat} {k}/{n}" for cat, (k, n) in sorted(result.items()))
