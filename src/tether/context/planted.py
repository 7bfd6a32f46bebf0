"""Agent transcripts with facts where real agents leave them, for the quality benchmark.

:func:`generate_agent_transcript` writes what a deployment agent's conversation looks
like when it is fed to a window message by message: a pinned system prompt, the user's
first message as the goal, a ``- [ ]`` plan from the user and numbered plans from the
agent, structured ``run_command`` calls with long logs, questions answered by the user,
failures followed by a fix and a retry. Each fact is a value that occurs nowhere else in
the transcript (a host name, a port, an image tag, a path, a commit hash, a config
value), so retention is a substring check on what a compressed prompt renders, and a
fact with two parts (an error and its fix, a question and its answer) counts only when
both are there.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from tether.context.items import ContextItem, ItemKind, Layer, new_item
from tether.context.values import WORDS, PlantedValues

__all__ = [
    "AGENT_CATEGORIES",
    "AgentFact",
    "AgentTranscript",
    "generate_agent_transcript",
]

AgentCategory = Literal[
    "goal", "constraint", "todo", "decision", "config", "artifact", "resolution", "detail"
]
AGENT_CATEGORIES: tuple[str, ...] = (
    "goal", "constraint", "todo", "decision", "config", "artifact", "resolution", "early detail"
)  # fmt: skip
"""Report columns; ``early detail`` is a ``detail`` fact from the first half of the run."""
_MUST_KEEP = frozenset({"goal", "constraint", "todo", "decision"})


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentFact:
    markers: tuple[str, ...]
    """Every part must be present for the fact to count as kept."""
    category: str
    item_ids: tuple[str, ...]
    early: bool = False
    """Planted in the first half of the operations."""

    @property
    def column(self) -> str:
        return "early detail" if self.category == "detail" and self.early else self.category

    def kept_in(self, text: str) -> bool:
        return all(m in text for m in self.markers)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentTranscript:
    items: tuple[ContextItem, ...]
    facts: tuple[AgentFact, ...]

    def retention(self, text: str) -> dict[str, tuple[int, int]]:
        """Per report column: (facts kept in ``text``, facts planted)."""
        found: Counter[str] = Counter()
        total: Counter[str] = Counter()
        for fact in self.facts:
            for column in {fact.category, fact.column}:
                total[column] += 1
                found[column] += fact.kept_in(text)
        return {c: (found[c], total[c]) for c in total}

    def must_keep(self) -> tuple[AgentFact, ...]:
        return tuple(f for f in self.facts if f.category in _MUST_KEEP)


class _Gen(PlantedValues):
    def __init__(self, seed: int, operations: int) -> None:
        super().__init__(random.Random(seed))
        self.operations = operations
        self.items: list[ContextItem] = []
        self.facts: list[AgentFact] = []
        self._call = 0

    # -- items -------------------------------------------------------------------------
    def add(self, kind: ItemKind, content: str, **fields: Any) -> ContextItem:
        n = len(self.items)
        item = new_item(kind, content, id=f"{kind}-{n:04d}", seq=n + 1, **fields)
        self.items.append(item)
        return item

    def fact(self, category: str, markers: Iterable[str], items: Iterable[ContextItem], op: int) -> None:
        self.facts.append(
            AgentFact(
                markers=tuple(markers),
                category=category,
                item_ids=tuple(i.id for i in items),
                early=op < self.operations // 2,
            )
        )

    def say(self, role: Literal["user", "assistant"], text: str) -> ContextItem:
        return self.add("message", text, role=role)

    def run(self, command: str, output: str) -> tuple[ContextItem, ContextItem]:
        self._call += 1
        call_id = f"call_{self._call:05d}"
        call = self.add(
            "tool_call",
            f"run_command({command!r})",
            tool_call_id=call_id,
            metadata={"name": "run_command", "arguments": {"command": command}},
        )
        result = self.add("tool_result", output, tool_call_id=call_id)
        return call, result

    def log(self, salient: list[str], *, exit_code: int = 0, lines: tuple[int, int] = (8, 36)) -> str:
        body = self.noise(self.rng.randrange(*lines))
        for line in salient:  # salient lines sit inside the log, not at its top
            body.insert(self.rng.randrange(len(body) // 2, len(body) + 1), line)
        return "\n".join([*body, f"[exit code {exit_code}]"])


def _operation(g: _Gen, op: int) -> None:
    r = g.rng
    kind = r.choice(("install", "build", "config", "git", "service", "health", "tests", "config_out"))
    if kind == "install":
        pkg, ver = f"{r.choice(WORDS)}-sdk", f"{r.randrange(1, 9)}.{r.randrange(20, 99)}.{g.uid()}"
        cmd = f"pip install --no-input {pkg}=={ver}"
        call, res = g.run(cmd, g.log([f"Successfully installed {pkg}-{ver} uvicorn-0.30.1"]))
        g.fact("detail", [ver], [call, res], op)
    elif kind == "build":
        tag = f"2.{r.randrange(1, 9)}.0-{g.uid()}"
        image = f"registry.local/orders:{tag}"
        cmd = f"docker build -t {image} --build-arg PY=3.11 ."
        out = g.log([f"#12 writing image sha256:{g.hexid(64)} done", f"Successfully tagged {image}"])
        call, res = g.run(cmd, out)
        g.fact("artifact", [tag], [call, res], op)
    elif kind == "config":
        key = f"ORDERS_{r.choice(WORDS).upper()}_HOST"
        value = f"{r.choice(WORDS)}-{g.uid()}.prod-eu.internal"
        cmd = f"sed -i 's/^{key}=.*/{key}={value}/' /srv/orders/.env"
        call, res = g.run(cmd, "[exit code 0]")
        g.fact("config", [value], [call, res], op)
    elif kind == "config_out":
        key = f"{r.choice(WORDS).upper()}_POOL_SIZE"
        value = g.port()
        lines = [f"{w.upper()}_TIMEOUT=30" for w in r.sample(WORDS, 3)] + [f"{key}={value}"]
        r.shuffle(lines)
        call, res = g.run("cat /srv/orders/.env", "\n".join([*lines, "[exit code 0]"]))
        g.fact("config", [f"{key}={value}"], [call, res], op)
    elif kind == "git":
        sha = g.hexid(8)
        call, res = g.run(
            "git -C /srv/orders pull --ff-only origin main",
            g.log([f"Updating 1a2b3c4..{sha}", "Fast-forward"], lines=(3, 8)),
        )
        g.fact("detail", [sha], [call, res], op)
    elif kind == "service":
        port = g.port()
        unit = f"orders-{r.choice(WORDS)}.service"
        out = g.log(
            [f"Active: active (running) since Tue 2026-03-03; Main PID: {r.randrange(900, 9999)}",
             f"{unit}: listening on 0.0.0.0:{port}"],
            lines=(4, 12),
        )  # fmt: skip
        call, res = g.run(f"systemctl restart {unit} && systemctl status {unit}", out)
        g.fact("detail", [f":{port}"], [call, res], op)
    elif kind == "health":
        build = g.uid() + g.hexid(4)
        url = "http://127.0.0.1:8080/health"
        call, res = g.run(f"curl -fsS {url}", f'{{"status": "ok", "build": "{build}"}}\n[exit code 0]')
        g.fact("detail", [build], [call, res], op)
    else:
        report = f"/srv/orders/reports/junit-{g.uid()}.xml"
        out = g.log([f"- generated xml file: {report} -", f"{r.randrange(50, 400)} passed in 12.3s"])
        call, res = g.run("pytest -q tests/ --junitxml=reports/junit.xml", out)
        g.fact("artifact", [report], [call, res], op)


_FAILURES = (
    ("docker compose up -d", "Error response from daemon: driver failed programming external connectivity: "
     "Bind for 0.0.0.0:{a} failed: port is already allocated", "systemctl stop legacy-{b}.service"),
    ("python -m orders.migrate", "ModuleNotFoundError: No module named 'orders_{a}'",
     "pip install --no-input orders-plugins==1.{b}"),
    ("npm ci --omit=dev",
     "npm ERR! code EACCES: permission denied, mkdir '/srv/orders/node_modules/.cache-{a}'",
     "chown -R deploy-{b}:deploy /srv/orders/node_modules"),
)  # fmt: skip


def _failure(g: _Gen, op: int) -> None:
    command, error_t, fix_t = g.rng.choice(_FAILURES)
    a = g.port() if "0.0.0.0:{a}" in error_t else g.uid()
    b = g.uid()
    error, fix = error_t.format(a=a), fix_t.format(b=b)
    call, res = g.run(command, g.log([error], exit_code=1, lines=(4, 10)))
    g.say("assistant", "The command failed; fixing the cause before retrying.")
    fcall, fres = g.run(fix, "[exit code 0]")
    g.run(command, g.log([], lines=(3, 8)))
    g.fact("resolution", [f":{a}" if a.isdigit() else a, fix], [call, res, fcall, fres], op)


def _question(g: _Gen, op: int) -> None:
    r = g.rng
    topic = r.choice(("the session store", "the TLS certificate", "the database backup"))
    option = f"{r.choice(WORDS)}-{g.uid()}"
    q = g.say("assistant", f"I found two candidates for {topic}.\nShould I use the default or {option}?")
    a = g.say("user", f"Use {option}.")
    g.fact("decision", [topic, option], [q, a], op)


def generate_agent_transcript(*, seed: int = 0, operations: int = 150) -> AgentTranscript:
    """A deterministic deployment conversation of about 250 tokens per operation."""
    g = _Gen(seed, operations)
    g.add(
        "system",
        "You are a deployment agent with a shell. Call run_command for every command; "
        "ask the user when a choice is theirs.",
        pinned=True,
    )
    release = f"4.{g.rng.randrange(10, 99)}.{g.uid()}"
    goal = g.add("goal", f"Deploy orders release {release} to prod-eu-1 with Docker Compose.", role="user")
    g.fact("goal", [release], [goal], 0)
    steps = [f"Provision the database on db-{g.uid()}", f"Configure TLS for api-{g.uid()}.example.com",
             f"Run the migrations up to mig-{g.uid()}", f"Smoke-test canary-{g.uid()}"]  # fmt: skip
    plan = g.say("user", "Here is the plan:\n" + "\n".join(f"- [ ] {s}" for s in steps))
    for step in steps:
        g.fact("todo", [step.rsplit(" ", 1)[1]], [plan], 0)
    per_phase = max(operations // 3, 1)
    done = 0
    for op in range(operations):
        if op == 2:
            limit = g.uid()
            c = g.say(
                "user",
                "Looks good so far.\nImportant: never restart the shared cluster "
                f"pg-main-{limit} during the rollout.",
            )
            g.fact("constraint", [f"pg-main-{limit}"], [c], op)
        if op % per_phase == 1:
            own = [f"Check disk space on node-{g.uid()}", f"Rotate the key vault-{g.uid()}"]
            p = g.say("assistant", "My plan for this phase:\n" + "\n".join(
                f"{k}. {s}" for k, s in enumerate(own, 1)))  # fmt: skip
            for s in own:
                g.fact("todo", [s.rsplit(" ", 1)[1]], [p], op)
        if op % 25 == 24 and done < len(steps):
            g.say("user", f"- [x] {steps[done]}")
            done += 1
        if op % 17 == 8:
            _question(g, op)
        if op % 12 == 6:
            _failure(g, op)
            continue
        if g.rng.random() < 0.4:
            g.say("assistant", f"Next: step {op + 1} of the rollout.")
        _operation(g, op)
    g.add("reminder", "Reply with exactly one tool call or message.", layer=Layer.INSTANT)
    tr = AgentTranscript(items=tuple(g.items), facts=tuple(g.facts))
    _check_unique(tr)
    return tr


def _check_unique(tr: AgentTranscript) -> None:
    """A marker found outside its own items would make the substring score lie."""
    for fact in tr.facts:
        own = set(fact.item_ids)
        for item in tr.items:
            if item.id in own:
                continue
            text = item.content + str(item.metadata.get("arguments", ""))
            for marker in fact.markers:
                if marker in text and fact.category not in ("decision", "todo"):
                    raise AssertionError(f"marker {marker!r} of {fact.category} also in {item.id}")
