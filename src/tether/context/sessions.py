"""Long generated agent sessions (deployments, migrations, incident fixes) with planted facts.

Each session is a script an agent loop can replay: commands with their outputs and exit
codes, and questions with the user's answers, grouped in the phases of a ``- [ ]`` plan
written in the goal. Facts sit where operators look for them an hour later: errors and
files written in the middle of long logs, configuration set by ``sed``, printed by ``cat``
or said in prose ("configured POOL value 64", "set WORKERS to 7", "X is now Y"),
listening ports, versions, images and reports built, failures and the commands that fixed
them, decisions answered and later changed ("Change of plan: ... instead"), settings given
a new value, restrictions the user adds (two lines, the second without a cue word) and
later lifts. Every planted value occurs nowhere else, so retention is a substring check.

:meth:`GeneratedSession.items` gives the items an agent loop adds for the script (a JSON
action as the tool call, ``exit code N`` and the output as its result, ``Q: …/A: …``
decisions for answers), to feed a window without running the loop.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

from tether.context.artifacts import InMemoryArtifactStore
from tether.context.items import ContextItem, new_item
from tether.context.tokens import TiktokenTokenizer, Tokenizer
from tether.context.trim import trim_output
from tether.context.values import PlantedValues

__all__ = [
    "SESSION_CATEGORIES",
    "SESSION_KINDS",
    "GeneratedSession",
    "Op",
    "SessionFact",
    "generate_session",
]

SessionKind = Literal["deployment", "migration", "incident"]
SESSION_KINDS: tuple[SessionKind, ...] = ("deployment", "migration", "incident")
SESSION_CATEGORIES: tuple[str, ...] = (
    "goal", "constraint", "todo", "decision", "config", "artifact",
    "fix", "failure", "port", "path", "version",
)  # fmt: skip
MUST_KEEP: frozenset[str] = frozenset({"goal", "constraint", "todo", "decision"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Op:
    """One step of the script: a command run, or a question the user answers."""

    kind: Literal["run", "ask"]
    phase: int
    command: str = ""
    output: str = ""
    exit_code: int = 0
    question: str = ""
    answer: str = ""
    done: str = ""
    """The plan item this step finishes ("Done: ..." in the agent's reasoning)."""

    def action(self) -> dict[str, str]:
        """The agent's reply for this step, as a model would send it."""
        reason = f"Done: {self.done}" if self.done else f"phase {self.phase + 1}"
        if self.kind == "ask":
            return {
                "action": "ask_user",
                "question": self.question,
                "input_type": "text",
                "reasoning": reason,
            }
        return {"action": "execute", "command": self.command, "reasoning": reason}


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionFact:
    category: str
    markers: tuple[str, ...]
    """Every part must be present for the fact to count as kept."""
    op: int
    current: bool = True
    """False for a decision or setting a later one replaced (it must not read as current)."""
    key: str = ""
    """For a setting: its key (the [Configurations] line must show the newest value)."""

    def kept_in(self, text: str) -> bool:
        return all(m in text for m in self.markers)


@dataclass(frozen=True, slots=True, kw_only=True)
class GeneratedSession:
    kind: SessionKind
    goal: str
    plan: tuple[str, ...]
    ops: tuple[Op, ...]
    facts: tuple[SessionFact, ...]

    def items(
        self, *, output_tokens: int | None = None, tokenizer: Tokenizer | None = None
    ) -> list[ContextItem]:
        """The items an agent loop adds for this script, in order (system and goal first).

        With ``output_tokens``, each output is trimmed as the loop trims it (the full text
        to an in-memory artefact store, the preview keeping its fact lines).
        """
        store = InMemoryArtifactStore()
        tok = tokenizer or TiktokenTokenizer()
        out = [
            new_item("system", "You are a DevOps agent with a shell.", id="system", pinned=True),
            new_item("goal", self.goal, id="goal", pinned=True),
        ]
        for n, op in enumerate(self.ops, 1):
            shown = json.dumps(op.action(), ensure_ascii=False)
            out.append(new_item("tool_call", shown, id=f"call-{n}", tool_call_id=f"it{n}"))
            if op.kind == "ask":
                out.append(new_item("decision", f"Q: {op.question}\nA: {op.answer}", id=f"answer-{n}"))
                out.append(new_item("tool_result", f"user answered: {op.answer}", id=f"result-{n}",
                                    tool_call_id=f"it{n}"))  # fmt: skip
            else:
                body = f"exit code {op.exit_code}\n{op.output}"
                if output_tokens is not None:
                    body = trim_output(body, max_tokens=output_tokens, tokenizer=tok, store=store).text
                out.append(new_item("tool_result", body, id=f"result-{n}", tool_call_id=f"it{n}"))
        return out

    def retention(self, text: str) -> dict[str, tuple[int, int]]:
        """Per category: (current facts kept in ``text``, current facts planted)."""
        found: Counter[str] = Counter()
        total: Counter[str] = Counter()
        for fact in self.facts:
            if fact.current:
                total[fact.category] += 1
                found[fact.category] += fact.kept_in(text)
        return {c: (found[c], total[c]) for c in total}

    def superseded_as_current(self, items: Iterable[ContextItem]) -> list[SessionFact]:
        """Replaced decisions that a compressed window still states as current: in a decision
        item, or in the summary's key decisions, or a replaced setting shown as its key's
        value in the summary's configurations."""
        items = list(items)
        decisions = "\n".join(i.content for i in items if i.kind == "decision")
        for item in items:
            if item.kind == "summary":
                decisions += "\n" + _section(item.content, "[Key decisions]")
        configs = "\n".join(_section(i.content, "[Configurations]") for i in items if i.kind == "summary")
        wrong = []
        for fact in self.facts:
            if fact.current:
                continue
            if (
                fact.category == "decision"
                and fact.kept_in(decisions)
                or fact.category == "config"
                and re.search(rf"(?m)^- {re.escape(fact.markers[0])}(?:\s|$)", configs)
            ):
                wrong.append(fact)
        return wrong


def _section(text: str, title: str) -> str:
    if title not in text:
        return ""
    body = text.split(title, 1)[1]
    return body.split("\n[", 1)[0]


# == the generator =====================================================================
_WORDS = ("orders", "billing", "ledger", "gateway", "auth", "search", "queue", "metrics", "cache",
          "assets", "users", "router", "session", "shard", "pool", "audit")  # fmt: skip
_NOISE = (
    "{d} 12:{n:02d}:{k:02d} {w}-{k} INFO request path=/api/{w} status=200 ms={s}",
    "Get:{n} http://deb.debian.org/debian bookworm/main amd64 lib{w} amd64 {v} [{k} kB]",
    "Collecting {w}=={v}",
    "  Downloading {w}-{v}-py3-none-any.whl ({k} kB)",
    "tests/test_{w}.py::test_{w}_{n} PASSED                          [{p}%]",
    " => [build {n}/{k}] RUN pip install --no-cache-dir -r requirements.txt   {s}s",
    "{d} 12:{n:02d}:{k:02d} {w}-{k} DEBUG cache hit key={w}:{k} ttl={p}s",
    "npm WARN deprecated {w}@{v}: this package is no longer supported",
)


class _Gen(PlantedValues):
    def __init__(self, *, kind: SessionKind, rng: random.Random, service: str = "orders") -> None:
        super().__init__(rng, templates=_NOISE, words=_WORDS, uid_length=5)
        self.kind = kind
        self.ops: list[Op] = []
        self.facts: list[SessionFact] = []
        self.phase = 0
        self.service = service

    def log(self, salient: list[str], lines: tuple[int, int] = (6, 30)) -> str:
        body = self.noise(self.rng.randrange(*lines))
        for line in salient:  # facts sit in the middle of the log, not at its ends
            body.insert(self.rng.randrange(len(body) // 3, max(len(body) * 2 // 3, 1) + 1), line)
        return "\n".join(body)

    def run(self, command: str, output: str, exit_code: int = 0) -> int:
        self.ops.append(Op(kind="run", phase=self.phase, command=command, output=output, exit_code=exit_code))
        return len(self.ops) - 1

    def ask(self, question: str, answer: str) -> int:
        self.ops.append(Op(kind="ask", phase=self.phase, question=question, answer=answer))
        return len(self.ops) - 1

    def fact(
        self, category: str, markers: Iterable[str], op: int, *, current: bool = True, key: str = ""
    ) -> None:
        self.facts.append(
            SessionFact(category=category, markers=tuple(markers), op=op, current=current, key=key)
        )

    # -- operations with one planted fact each ----------------------------------------
    def config_sed(self) -> None:
        key = f"{self.rng.choice(_WORDS).upper()}_{self.uid().upper()}_HOST"
        value = f"{self.rng.choice(_WORDS)}-{self.uid()}.internal"
        op = self.run(f"sed -i 's/^{key}=.*/{key}={value}/' /srv/{self.service}/.env", "")
        self.fact("config", [f"{key}={value}"], op, key=key)

    def config_prose(self) -> None:
        r = self.rng
        key = f"{r.choice(_WORDS).upper()}_{self.uid().upper()}"
        value = self.port()
        said = r.choice((f"configured {key} value {value}", f"set {key} to {value}", f"{key} is now {value}"))
        op = self.run(f"{self.service}ctl config apply --profile prod", self.log([said]))
        self.fact("config", [key, value], op, key=key)

    def artifact(self) -> None:
        tag = f"{self.rng.randrange(1, 9)}.{self.rng.randrange(0, 30)}.0-{self.uid()}"
        image = f"registry.local/{self.service}:{tag}"
        out = self.log([f"#14 writing image sha256:{self.hexid(64)} done", f"Successfully tagged {image}"])
        op = self.run(f"docker build -t {image} --build-arg PY=3.11 .", out)
        self.fact("artifact", [tag], op)

    def path_written(self, long: bool) -> None:
        path = f"/srv/{self.service}/releases/{self.uid()}/manifest.json"
        out = self.log([f"wrote {path}"], lines=(400, 700) if long else (6, 30))
        op = self.run(f"{self.service}ctl render --env prod", out)
        self.fact("path", [path], op)

    def port_listening(self, long: bool) -> None:
        port = self.port()
        line = self.rng.choice(
            (f"{self.service}-api listening on :{port}", f"server listening on 0.0.0.0:{port}")
        )
        out = self.log(
            ["Active: active (running) since Tue 2026-03-03", line], lines=(400, 700) if long else (4, 12)
        )
        op = self.run(f"systemctl restart {self.service}-api && journalctl -u {self.service}-api -n 800", out)
        self.fact("port", [f":{port}"], op)

    def version(self) -> None:
        ver = f"{self.rng.randrange(10, 17)}.{self.rng.randrange(1, 9)}-{self.uid()}"
        op = self.run(
            "psql -At -c 'select version()'",
            self.log([f"PostgreSQL {ver} on x86_64-pc-linux-gnu, server version {ver}"], lines=(1, 3)),
        )
        self.fact("version", [ver], op)

    def failure(self, long: bool) -> None:
        r = self.rng
        role = f"{self.service}_migrator_{self.uid()}"
        a, b = self.uid(), self.port()
        cases = (
            (
                f"python -m {self.service}.migrate",
                f"KeyError: '{a.upper()}_REDIS_URL'",
                f"{self.service}ctl env set {a.upper()}_REDIS_URL=redis://cache-{self.uid()}:6379/0",
            ),
            (
                "docker compose up -d",
                f"Error response from daemon: Bind for 0.0.0.0:{b} failed: port is already allocated",
                f"systemctl stop legacy-{self.uid()}.service",
            ),
            (
                f"psql -h db-{a}.internal -d {self.service} -f migrations/0042_ledger.sql",
                f"ERROR:  permission denied for schema {self.service}_{a}",
                f"psql -h db-{a}.internal -d {self.service} "
                f"-c 'GRANT USAGE, CREATE ON SCHEMA {self.service}_{a} TO {role}'",
            ),
        )
        command, error, fix = r.choice(cases)
        lines = (400, 700) if long else (4, 12)
        op = self.run(command, self.log([error], lines=lines), exit_code=1)
        marker = (
            error.split("'")[1]
            if "KeyError" in error
            else (f":{b}" if "Bind" in error else f"{self.service}_{a}")
        )
        self.fact("failure", [marker], op)
        fix_marker = fix.rsplit(" ", 1)[1].strip("'") if "GRANT" in fix else fix.split()[-1].strip("'")
        if "env set" in fix:
            fix_marker = fix.split("=", 1)[1]
        self.run(fix, "")
        self.run(command, self.log([], lines=(3, 8)))
        self.fact("fix", [marker, fix_marker], op)

    def routine(self) -> None:
        r = self.rng
        command = r.choice((
            f"curl -fsS http://127.0.0.1:8080/{self.service}/health", "df -h /srv",
            f"ls -la /srv/{self.service}",
            f"git -C /srv/{self.service} status --short", "docker ps --format '{{.Names}}'",
            f"kubectl -n {self.service} get pods", "uptime",
        ))  # fmt: skip
        self.run(command, "\n".join(self.noise(r.randrange(2, 12))))


def _plan_for(kind: SessionKind, g: _Gen) -> tuple[str, list[str]]:
    svc = g.service
    if kind == "deployment":
        steps = [f"Provision the database on db-{g.uid()}", f"Build the {svc} image for rel-{g.uid()}",
                 f"Configure TLS for api-{g.uid()}.example.com", f"Roll out to canary-{g.uid()}",
                 f"Smoke-test region eu-{g.uid()}"]  # fmt: skip
        goal = f"Deploy {svc} release {g.uid()} to prod-eu-1 with Docker Compose."
    elif kind == "migration":
        steps = [f"Snapshot the database snap-{g.uid()}", f"Migrate the schema to mig-{g.uid()}",
                 f"Backfill the ledger table bf-{g.uid()}", f"Switch reads to replica rep-{g.uid()}",
                 f"Drop the old columns in cleanup-{g.uid()}"]  # fmt: skip
        goal = f"Migrate the {svc} database to schema version {g.uid()} without downtime."
    else:
        steps = [f"Triage the alert inc-{g.uid()}", f"Find the failing dependency dep-{g.uid()}",
                 f"Patch the config in hotfix-{g.uid()}", f"Verify the error rate on dash-{g.uid()}",
                 f"Write the postmortem pm-{g.uid()}"]  # fmt: skip
        goal = f"Fix the {svc} incident {g.uid()}: 5xx errors on checkout since 09:12 UTC."
    return goal, steps


def generate_session(
    kind: SessionKind, *, seed: int = 0, operations: int = 3000, long_every: int = 40
) -> GeneratedSession:
    """A deterministic session of about ``operations`` steps; one in ``long_every`` outputs
    is a long log (several hundred lines) with its fact in the middle."""
    rng = random.Random(f"{kind}-{seed}")
    g = _Gen(kind=kind, rng=rng, service=rng.choice(("orders", "billing", "ledger", "checkout")))
    goal, steps = _plan_for(kind, g)
    goal_marker = goal.split()[-1] if kind != "incident" else goal.split(":")[0].split()[-1]
    plan_text = "\n".join(f"- [ ] {s}" for s in steps)
    g.fact("goal", [goal_marker], 0)
    for s in steps:
        g.fact("todo", [s.rsplit(" ", 1)[1]], 0)
    per_phase = max(operations // len(steps), 1)
    cache_q = f"Which cache backend and port should the {g.service} sessions use?"
    region_q = f"Which region should the {g.service} replica run in?"
    old_cache = new_cache = old_region = ""
    workers_key = f"{g.service.upper()}_WORKERS"
    workers_old = workers_new = ""
    rule_op = -1
    rule_host = ""
    while len(g.ops) < operations:
        n = len(g.ops)
        g.phase = min(n // per_phase, len(steps) - 1)
        stage = n / operations
        if not old_cache and stage > 0.05:
            old_cache = f"redis 6.2 on port {g.port()}"
            op = g.ask(cache_q, f"Use {old_cache} for the {g.service} session cache.")
            g.fact("decision", [old_cache], op, current=False)
        elif not new_cache and stage > 0.30:
            new_cache = f"valkey 8.0 on port {g.port()}"
            change = f"Change of plan: use {new_cache} instead of redis for the {g.service} session cache."
            op = g.ask(f"Anything to change before I set up the {g.service} session cache?", change)
            g.fact("decision", [new_cache], op)
        elif not old_region and stage > 0.10:
            old_region = f"eu-west-{g.uid()}"
            op = g.ask(region_q, f"{old_region}, next to the primary.")
            g.fact("decision", [old_region], op, current=False)
        elif old_region and old_region != "done" and stage > 0.55:
            region = f"eu-central-{g.uid()}"
            op = g.ask(region_q, f"{region}: the west zone is being drained.")
            g.fact("decision", [region], op)
            old_region = "done"
        elif rule_op < 0 and stage > 0.02:
            rule_host = f"pg-main-{g.uid()}"
            data = f"/data/{g.service}-{g.uid()}"
            rule_op = g.ask("Any rules for the rollout?",
                            f"Never restart the shared cluster {rule_host} during the work.\n"
                            f"keep every file under {data} untouched")  # fmt: skip
            g.fact("constraint", [rule_host], rule_op, current=False)  # lifted later
            g.fact("constraint", [data], rule_op)
            keep = f"audit-{g.uid()}"
            op = g.ask("Anything else I must respect?", f"Do not delete the {keep} bucket.")
            g.fact("constraint", [keep], op)
        elif rule_op >= 0 and rule_host and stage > 0.70:
            lift = f"Yes, the freeze is lifted: you may now restart the shared cluster {rule_host}."
            op = g.ask(f"May I restart {rule_host} now?", lift)
            g.fact("decision", ["freeze is lifted", rule_host], op)
            rule_host = ""
        elif not workers_old and stage > 0.15:
            workers_old = str(g.rng.randrange(2, 9)) + g.uid()
            op = g.run(f"sed -i 's/^{workers_key}=.*/{workers_key}={workers_old}/' /srv/{g.service}/.env", "")
            g.fact("config", [f"{workers_key}={workers_old}"], op, current=False, key=workers_key)
        elif not workers_new and stage > 0.60:
            workers_new = str(g.rng.randrange(10, 32)) + g.uid()
            op = g.run(f"sed -i 's/^{workers_key}=.*/{workers_key}={workers_new}/' /srv/{g.service}/.env", "")
            g.fact("config", [f"{workers_key}={workers_new}"], op, key=workers_key)
        else:
            long = n % long_every == long_every - 1
            pick = rng.random()
            if long:
                rng.choice((g.path_written, g.port_listening, g.failure))(True)
            elif pick < 0.06:
                g.config_sed()
            elif pick < 0.11:
                g.config_prose()
            elif pick < 0.16:
                g.artifact()
            elif pick < 0.20:
                g.path_written(False)
            elif pick < 0.24:
                g.port_listening(False)
            elif pick < 0.27:
                g.version()
            elif pick < 0.31:
                g.failure(False)
            else:
                g.routine()
        if g.ops and len(g.ops) // per_phase > g.phase and g.phase < len(steps) - 1:
            last = g.ops[-1]
            g.ops[-1] = replace(last, done=steps[g.phase])
    full_goal = f"{goal}\nPlan:\n{plan_text}"
    return GeneratedSession(
        kind=kind, goal=full_goal, plan=tuple(steps), ops=tuple(g.ops), facts=tuple(g.facts)
    )
